"""Kafka's transaction coordinator (single node): a sans-IO core and its I/O.

:mod:`~kompakt.broker.txn.state` holds one transactional id's state machine (Kafka's
``TransactionMetadata``), :mod:`~kompakt.broker.txn.records` the ``__transaction_state``
record formats (Kafka's ``TransactionLog``) and :mod:`~kompakt.broker.txn.coordinator`
the decisions (Kafka's ``TransactionCoordinator`` / ``TransactionStateManager``), driven
by injected log-append, marker-writing and scheduler callbacks, with the shapes it is
configured with and answers in :mod:`~kompakt.broker.txn.results`. Its I/O is apart:
:mod:`~kompakt.broker.txn.log` reads and appends ``__transaction_state``, and
:mod:`~kompakt.broker.txn.broker` runs the coordinator on the broker's loop with its log
thread, markers and transactional offsets. The request handlers are
:mod:`kompakt.broker.handlers.txn`.
"""
