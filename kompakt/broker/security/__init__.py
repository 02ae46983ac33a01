"""Listeners' security: TLS (:mod:`.tls`), SASL (:mod:`.sasl`), SCRAM credentials
(:mod:`.scram_store`), principals (:mod:`.principal`) and the config keys (:mod:`.keys`).

Kafka splits the same way: the channel builders and ``SslFactory`` make a listener's
transport, ``SaslServerAuthenticator`` runs the handshake before any request reaches
``KafkaApis``, ``CredentialCache`` holds SCRAM credentials, and ``KafkaPrincipalBuilder``
names the peer. The authorizer (ACLs) reads the principal; it lives elsewhere.
"""
