"""Fixtures every test package shares.

The kits (``manual_clock``, ``raw_kafka``, ``cli_kit``, ``engine_kit``, ...) import by
module name: pyproject's ``[tool.pytest.ini_options] pythonpath`` lists their folders.

Hypothesis runs derandomized by default, so ``make test`` (and CI) sees the same
examples every run; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples
each run when hunting for bugs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from manual_clock import ManualClock
from shared_kit import SPARK_TEST_CONFIG

from kompakt.log.manager import LogManager

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# -- one local SparkSession for the whole test session (Spark start-up costs ~10 s) ----


@pytest.fixture(scope="session")
def spark():
    import kompakt.pipeline as pipeline
    from kompakt.pipeline.standalone import FAST_START_JAVA_OPTS

    session = pipeline.session(
        {**SPARK_TEST_CONFIG, "spark.driver.extraJavaOptions": FAST_START_JAVA_OPTS}
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    pipeline.stop()


@pytest.fixture
def clock() -> ManualClock:
    """Kafka's ``MockTime``: logs and cleaners read this, tests advance it."""
    return ManualClock()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def manager(data_dir: Path, clock: ManualClock) -> Iterator[LogManager]:
    """A LogManager on ``data_dir`` driven by ``clock``, closed after the test."""
    m = LogManager(data_dir, clock=clock)
    yield m
    m.close()


# -- the slow marker: one table says which tests ``pytest -m "not slow"`` leaves out ----
# ``pytest`` (the README's ``make test``) still runs every one of them.

SLOW_FIXTURES = frozenset(
    {
        "spark",  # tests/pipeline/conftest.py: a local Spark session in this process
        "spark_broker",  # tests/broker/test_compaction.py: a broker on the Spark engine
    }
)

SLOW_TESTS = (
    # SIGKILLs, soak, fault campaign (test_fault_campaign.py: kills during Spark cleans
    # too), request fuzzer, full disk, librdkafka's suite: real broker processes
    "reliability/",
    # SIGKILL of a cleaning process at every kill point of a seed list
    "cleaner/test_crash.py::test_sigkill_during_clean_recovers",
    # the broker as a process: SIGTERM and SIGKILL
    "broker/test_process.py",
    # thousands of offset commits until __consumer_offsets is cleaned back down
    "broker/test_groups_offsets.py::test_consumer_offsets_stays_bounded_under_many_commits",
    # a standalone Spark cluster (master and two workers)
    "pipeline/test_cluster.py",
    # a Spark job in a fresh process
    "pipeline/test_engine_log_changes.py",
    # ``kompakt serve`` or ``kompakt compact`` starting Spark in a subprocess
    "broker/test_spark_warm.py::test_serve_warms_spark_quietly_and_cleans_without_waiting_for_the_jvm",
    "broker/test_spark_warm.py::test_sigterm_during_spark_warm_up_stops_cleanly_and_promptly",
    "cli/test_compact_quiet.py::test_spark_compact_prints_nothing_from_spark",
    "cli/test_compact_interrupt.py::test_sigint_during_spark_clean_cancels_the_job_and_changes_nothing",
    "cli/test_interrupt.py::test_ctrl_c_during_export_keeps_the_earlier_export_whole",
    # Quix Streams app processes against a broker process it SIGKILLs
    "broker/test_quix.py",
    # the README's quick start: ``kompakt serve`` with local Spark on the fixed ports
    "test_quickstart.py",
    # a broker process whose Spark clean fills a log dir's tmpfs
    "broker/test_log_dir_failure.py::test_disk_full_during_a_spark_clean_takes_that_log_dir_offline",
)


def is_slow(nodeid: str, fixturenames: list[str]) -> bool:
    """Whether a test starts Spark or real broker processes to kill: the fast subset
    (``-m "not slow"``) is what a developer runs between edits, so it leaves out the
    tests whose start-up alone costs seconds to minutes."""
    path = nodeid.removeprefix("tests/")
    return bool(SLOW_FIXTURES.intersection(fixturenames)) or path.startswith(SLOW_TESTS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item.nodeid, getattr(item, "fixturenames", [])):
            item.add_marker(pytest.mark.slow)
