"""A Quix Streams application for ``test_quix.py``: an exactly-once, stateful count per
key of the ``words`` topic, written to ``counts`` (its state store's changelog is a
compacted topic Quix creates). Runs until no message arrived for ``timeout`` s.

Usage: ``python quix_count_app.py BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR TIMEOUT``.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

from quixstreams import Application


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # a stuck run's stacks, for the test's report
    bootstrap, source, sink, group, state_dir, timeout = sys.argv[1:7]
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        state_dir=state_dir,
        commit_interval=0.5,
        # a killed run's member leaves the group after 6 s (Kafka's
        # group.min.session.timeout.ms), not librdkafka's default 45 s
        consumer_extra_config={"session.timeout.ms": 6000},
        loglevel="DEBUG" if os.environ.get("KOMPAKT_QUIX_DEBUG") else "INFO",
        # KOMPAKT_QUIX_DEBUG=eos,protocol: librdkafka's debug log of the producer
        # Quix picks a random transactional.id per run: a killed run's open transaction
        # holds the LSO until the coordinator aborts it at transaction.timeout.ms
        producer_extra_config={
            "transaction.timeout.ms": 5000,
            **(
                {"debug": os.environ["KOMPAKT_QUIX_DEBUG"]}
                if os.environ.get("KOMPAKT_QUIX_DEBUG")
                else {}
            ),
        },
    )
    words = app.topic(source, key_deserializer="str", value_deserializer="str")
    counts = app.topic(sink, key_serializer="str", value_serializer="json")

    def count(_value: str, state) -> int:
        n = state.get("n", 0) + 1
        state.set("n", n)
        return n

    sdf = app.dataframe(words).apply(count, stateful=True)
    sdf.to_topic(counts)
    app.run(timeout=float(timeout))


if __name__ == "__main__":
    main()
