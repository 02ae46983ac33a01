"""From the broker config to the listeners the server binds (:class:`ListenerSpec`).

Per listener: its security protocol from ``listener.security.protocol.map``; for SSL and
SASL_SSL a TLS context (:mod:`.tls`) and the principal mapper; for SASL_* the enabled
mechanisms (``[listener.name.<l>.]sasl.enabled.mechanisms``), PLAIN users from
``listener.name.<l>.plain.sasl.jaas.config`` and the data dir's SCRAM credentials.
Everything is checked here, at start: a SASL listener enabling PLAIN without a JAAS
config, or TLS without a keystore, refuses to start with the key named.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kompakt.broker.handlers.security import SCRAM_STORE
from kompakt.broker.security.keys import listener_prefix
from kompakt.broker.security.principal import PrincipalMapper
from kompakt.broker.security.sasl import SaslAuthenticator, parse_jaas, plain_users
from kompakt.broker.security.scram_store import ScramStore
from kompakt.broker.security.tls import server_context
from kompakt.broker.server import ListenerSpec
from kompakt.errors import InvalidConfigError

log = logging.getLogger(__name__)


def listener_specs(cfg: Any, state: Any) -> list[ListenerSpec]:
    """The listeners of ``cfg`` (a BrokerConfig), the PLAINTEXT one first if any, so the
    server's ``port`` stays the PLAINTEXT port."""
    protocols = cfg.security_protocols
    ordered = sorted(cfg.listeners, key=lambda x: x.name != cfg.listener.name)
    specs = []
    for x in ordered:
        proto = protocols[x.name]
        spec = ListenerSpec(x.name, proto, x.host, x.port)
        if proto in ("SSL", "SASL_SSL"):
            spec.ssl = server_context(cfg, x.name)
            spec.mapper = PrincipalMapper(
                str(cfg.listener_value(x.name, "ssl.principal.mapping.rules"))
            )
        if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
            spec.sasl = _authenticator_factory(cfg, state, x.name)
            spec.sasl_max_receive = int(cfg.get("sasl.server.max.receive.size"))
        specs.append(spec)
    return specs


def _authenticator_factory(cfg: Any, state: Any, listener: str) -> Any:
    mechanisms = tuple(cfg.listener_value(listener, "sasl.enabled.mechanisms"))
    if not mechanisms:
        raise InvalidConfigError(f"listener {listener}: sasl.enabled.mechanisms is empty")
    plain: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = listener_prefix(listener) + "plain.sasl.jaas.config"
        text = cfg.raw.get(key)
        if text is None:
            raise InvalidConfigError(
                f"listener {listener} enables SASL mechanism PLAIN but {key} is not set "
                "(org.apache.kafka.common.security.plain.PlainLoginModule required "
                'user_<name>="<password>" ...;)'
            )
        plain = plain_users(parse_jaas(key, text))
    store = None
    if any(m.startswith("SCRAM-") for m in mechanisms):
        store = scram_store_of(cfg, state)
    return functools.partial(SaslAuthenticator, listener, mechanisms, plain, store)


def scram_store_of(cfg: Any, state: Any) -> ScramStore:
    """The data dir's SCRAM store, once per broker, with the bootstrap users added."""
    store = state.extra.get(SCRAM_STORE)
    if store is None:
        store = state.extra[SCRAM_STORE] = ScramStore(cfg.data_dir)
        created = store.bootstrap(cfg.get("kompakt.sasl.bootstrap.users"))
        if created:
            log.info("SCRAM credentials created for bootstrap users %s", ", ".join(created))
    return store


def admin_security(cfg: Any, state: Any, metrics: Any) -> dict[str, Any]:
    """AdminServer's TLS context and gate settings from the kompakt.admin.* keys: the
    SCRAM store as the Basic authenticator, the principal mapper when https asks client
    certificates (``listener.name.admin.ssl.client.auth``), the broker's authorizer (looked up per
    request, as the Kafka APIs' guard sees it), the Host names served."""
    from kompakt.broker.admin_http import is_tls, parse_listener
    from kompakt.broker.handlers.acls import AUTHORIZER_KEY
    from kompakt.broker.http_browser import allowed_hosts
    from kompakt.broker.http_gate import GateSettings

    out: dict[str, Any] = {}
    mapper = None
    if is_tls(cfg.admin_listener):
        out["tls"] = server_context(cfg, "ADMIN")
        if str(cfg.listener_value("ADMIN", "ssl.client.auth")) != "none":  # an SSL listener's
            rules = cfg.listener_value("ADMIN", "ssl.principal.mapping.rules")
            mapper = PrincipalMapper(str(rules))
    authenticate = None
    if cfg.get("kompakt.admin.auth") == "basic":
        authenticate = scram_store_of(cfg, state).verify_password
    if "kompakt.admin.auth.get" in cfg.raw:
        log.warning(
            "kompakt.admin.auth.get is ignored: with kompakt.admin.auth=basic every request "
            "asks for credentials; kompakt.admin.metrics.public=true opens /metrics alone"
        )
    extra = list(cfg.get("kompakt.admin.allowed.hosts") or ())
    extra += [adv.host for adv in cfg.advertised_listeners.values() if adv.host]
    out["gate"] = GateSettings(
        authenticate=authenticate,
        authorizer=lambda: state.extra.get(AUTHORIZER_KEY),
        metrics_public=bool(cfg.get("kompakt.admin.metrics.public")),
        allowed_hosts=allowed_hosts(parse_listener(cfg.admin_listener)[0], extra),
        on_failure=lambda reason: metrics.auth_failed("HTTP_BASIC", reason),
        failed_delay_ms=int(cfg.get("connection.failed.authentication.delay.ms")),
        mapper=mapper,
    )
    return out
