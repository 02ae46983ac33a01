"""The cleaner's throttle and backlog on ``/metrics`` of a real broker, and
``log.cleaner.io.max.bytes.per.second`` changed at run time (Kafka: a dynamic broker
config, ``LogCleaner.reconfigure`` -> ``Throttler.updateDesiredRatePerSec``)."""

from __future__ import annotations

import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from prometheus_client.parser import text_string_to_metric_families
from shared_kit import wait_for

from kompakt.broker.app import start_test_broker
from kompakt.broker.metrics import BrokerMetrics, has_error

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
}


def samples(admin_port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kompakt_log_cleaner") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out


def test_throttle_metrics_and_a_dynamic_io_limit(tmp_path):
    b = start_test_broker(
        tmp_path / "data",
        **{
            "log.cleaner.backoff.ms": "100",
            "log.cleaner.io.max.bytes.per.second": "5e7",
            # a check every millisecond, so a clean of a few KiB meets the limit (Kafka's
            # Throttler measures the rate only once a check interval has passed)
            "kompakt.log.cleaner.io.check.interval.ms": "1",
        },
    )
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("kv", 1, 1, config=TOPIC_CONFIG)])["kv"].result(30)
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "batch.num.messages": 5,
            }
        )
        for i in range(300):
            p.produce("kv", key=b"k%d" % (i % 20), value=b"v" * 100)
            p.poll(0)
        assert p.flush(30) == 0

        def cleaned() -> dict | None:
            m = samples(b.admin_port)
            return m if m.get("kompakt_log_cleaner_compactions_total", 0) >= 1 else None

        m = wait_for(cleaned, "a background clean", 60)
        assert m["kompakt_log_cleaner_io_limit_bytes_per_second"] == 5e7
        assert m["kompakt_log_cleaner_io_bytes_total"] > 0  # reads and writes counted
        assert "kompakt_log_cleaner_throttle_seconds_total" in m
        assert "kompakt_log_cleaner_backlog_bytes" in m
        assert "kompakt_log_cleaner_max_dirty_percent" in m
        assert "kompakt_log_cleaner_cleaner_recopy_percent" in m

        res = ConfigResource(
            ConfigResource.Type.BROKER,
            "1",
            incremental_configs=[
                ConfigEntry(
                    "log.cleaner.io.max.bytes.per.second",
                    "1234567.0",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        admin.incremental_alter_configs([res])[res].result(30)

        def limit_changed() -> bool:
            m = samples(b.admin_port)
            return m["kompakt_log_cleaner_io_limit_bytes_per_second"] == 1234567.0

        wait_for(limit_changed, "the new limit in force", 30)

        # a clean at 1.2 MB/s of data read and written far faster sleeps, and says so
        for i in range(300):
            p.produce("kv", key=b"k%d" % (i % 20), value=b"w" * 1000)
            p.poll(0)
        assert p.flush(30) == 0

        def throttled() -> float:
            return samples(b.admin_port)["kompakt_log_cleaner_throttle_seconds_total"]

        assert wait_for(throttled, "a clean throttled at 1.2 MB/s", 60) > 0
    finally:
        b.stop()


def test_request_counts_and_errors_per_api():
    """Kafka's per-request metrics (``RequestMetrics``: RequestsPerSec, ErrorsPerSec by
    request name): each request counts once for its API, an answer with a non-zero error
    code anywhere in it counts as that API's error, and an API that never failed has no
    errors series."""
    ok = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0}]}]}
    bad = {"responses": [{"name": "t", "partition_responses": [{"index": 1, "error_code": 3}]}]}
    assert not has_error(ok)
    assert has_error(bad)
    assert has_error([{"error_code": 7}])
    m = BrokerMetrics(lambda: None)
    for body in (ok, ok, bad):
        m.observe("Produce", 0.001, has_error(body))
    m.observe("Metadata", 0.001, False)
    found = {
        (s.name, s.labels.get("api")): s.value
        for fam in text_string_to_metric_families(m.render().decode())
        for s in fam.samples
        if s.name in ("kompakt_requests_total", "kompakt_request_errors_total")
    }
    assert found[("kompakt_requests_total", "Produce")] == 3
    assert found[("kompakt_request_errors_total", "Produce")] == 1
    assert found[("kompakt_requests_total", "Metadata")] == 1
    assert ("kompakt_request_errors_total", "Metadata") not in found
