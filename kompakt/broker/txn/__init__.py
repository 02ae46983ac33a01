"""Kafka's transaction coordinator (single node), sans-IO.

:mod:`~kompakt.broker.txn.state` holds one transactional id's state machine (Kafka's
``TransactionMetadata``), :mod:`~kompakt.broker.txn.records` the ``__transaction_state``
record formats (Kafka's ``TransactionLog``) and :mod:`~kompakt.broker.txn.coordinator`
the decisions (Kafka's ``TransactionCoordinator`` / ``TransactionStateManager``), driven
by injected log-append, marker-writing and scheduler callbacks. The request handlers and
the broker wiring live above this package.
"""
