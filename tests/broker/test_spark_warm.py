"""The broker starts Spark at start-up (``kompakt.spark.start=eager``, the default with
the Spark engine) in a background thread, quietly: the Kafka port is up before Spark
is, one "Spark ready" line is logged, no log4j line or ``[Stage`` bar reaches the
broker's log, nor a line of the warm-up's throwaway topic, the first background clean
does not wait for the JVM to start, and a SIGTERM during the warm-up is a clean, prompt
stop. ``lazy`` and the local engine start nothing.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from shared_kit import free_port, wait_for

from kompakt.broker.app import Broker
from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError
from kompakt.pipeline import spark_conf

REPO = Path(__file__).resolve().parents[2]
BACKOFF_MS = 1000
# kompakt's own log line; anything else on a broker's stderr came from Spark or the JVM
KOMPAKT_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ kompakt[.\w]*: ")
SPARK_MARKERS = ("log4j", "[Stage", "WARN ", "INFO Spark", "NativeCodeLoader", "WARNING: ")


class Serve:
    """``kompakt serve`` (Spark engine) as a process, its stderr collected line by line."""

    def __init__(self, data_dir: Path, *overrides: str):
        self.port, self.admin_port = free_port(), free_port()
        args = [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={data_dir}",
            f"kompakt.admin.listener=http://127.0.0.1:{self.admin_port}",
            "kompakt.cleaner.engine=spark",
            f"log.cleaner.backoff.ms={BACKOFF_MS}",
            *overrides,
        ]
        cmd = [sys.executable, "-m", "kompakt.cli.main", "serve"]
        for a in args:
            cmd += ["--override", a]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self.out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stderr, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> int:
        """The index of the first stderr line holding ``text``."""

        def found() -> list[int]:
            assert self.proc.poll() is None, "\n".join(self.lines)
            return [i for i, line in enumerate(list(self.lines)) if text in line][:1]

        return wait_for(found, f"a {text!r} line", timeout)[0]

    def partitions(self) -> list[dict]:
        url = f"http://127.0.0.1:{self.admin_port}/v1/partitions"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())["partitions"]

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for t in self._readers:
            t.join(10)
        return code


def not_kompakt(lines: list[str]) -> list[str]:
    return [ln for ln in lines if not KOMPAKT_LINE.match(ln)]


def test_serve_warms_spark_quietly_and_cleans_without_waiting_for_the_jvm(tmp_path: Path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = Serve(tmp_path / "data")
    try:
        listening = broker.wait_for("kompakt broker listening on", 60)
        ready = broker.wait_for("Spark ready in", 300)
        assert listening < ready  # start-up did not wait for Spark
        assert re.search(r"Spark ready in \d+\.\d s", broker.lines[ready])

        bootstrap = f"127.0.0.1:{broker.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic(
            "warm",
            num_partitions=1,
            replication_factor=1,
            config={
                "cleanup.policy": "compact",
                "segment.bytes": "1024",
                "min.cleanable.dirty.ratio": "0.01",
                "min.compaction.lag.ms": "0",
            },
        )
        for fut in admin.create_topics([topic]).values():
            fut.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(300):  # small batches: many 1 KiB segments, all but one cleanable
            producer.produce("warm", b"v%d" % i, b"k%d" % (i % 10))
            if i % 10 == 9:
                assert producer.flush(30) == 0

        def cleaned() -> bool:
            (part,) = [p for p in broker.partitions() if p["topic"] == "warm"]
            return part.get("last_compaction") is not None

        # Not a speed assertion: a deadline the cold JVM start used to miss on its own.
        wait_for(cleaned, "a clean of warm-0", BACKOFF_MS / 1000 + 60)
    finally:
        code = broker.stop()
    assert code == 0, "\n".join(broker.lines)
    noise = not_kompakt(broker.lines) + broker.out
    assert noise == [], "\n".join(noise)
    for marker in SPARK_MARKERS:
        assert not any(marker in ln for ln in broker.lines + broker.out), marker
    # the warm-up's throwaway topic is not the user's: none of its lines in the broker log
    warm_up = [ln for ln in broker.lines if "warm-up" in ln and "Spark ready" not in ln]
    assert warm_up == [], "\n".join(warm_up)


def test_sigterm_during_spark_warm_up_stops_cleanly_and_promptly(tmp_path: Path):
    broker = Serve(tmp_path / "data")
    try:
        broker.wait_for("kompakt broker listening on", 60)
        assert not any("Spark ready" in ln for ln in broker.lines)  # still warming
        code = broker.stop(timeout=30)  # SIGTERM; a JVM start is not waited for
    finally:
        broker.stop()
    assert code == 0, "\n".join(broker.lines)
    assert any("kompakt broker stopped" in ln for ln in broker.lines)
    assert not_kompakt(broker.lines) + broker.out == []


def _broker(tmp_path: Path, **props: str) -> Broker:
    base = {"log.dirs": str(tmp_path / "data"), **props}
    return Broker(BrokerConfig.from_mapping(base))


def test_start_config_is_validated_and_documented():
    assert BrokerConfig.from_mapping({}).get("kompakt.spark.start") == "eager"
    assert BrokerConfig.from_mapping({}).get("kompakt.spark.log.level") == "ERROR"
    with pytest.raises(InvalidConfigError, match="kompakt.spark.start"):
        BrokerConfig.from_mapping({"kompakt.spark.start": "sometimes"})
    with pytest.raises(InvalidConfigError, match="kompakt.spark.log.level"):
        BrokerConfig.from_mapping({"kompakt.spark.log.level": "LOUD"})


@pytest.mark.parametrize(
    "props",
    [
        {"kompakt.cleaner.engine": "local"},
        {"kompakt.cleaner.engine": "spark", "kompakt.spark.start": "lazy"},
    ],
    ids=["local-engine", "lazy"],
)
def test_local_engine_and_lazy_start_no_spark(tmp_path: Path, props: dict[str, str]):
    broker = _broker(tmp_path, **props)
    broker.cleaner_factory = broker._default_cleaner
    broker._start_spark()
    assert broker._spark_warm is None


def test_an_injected_cleaner_starts_no_spark(tmp_path: Path):
    broker = _broker(tmp_path)
    broker.cleaner_factory = lambda: None
    broker._start_spark()
    assert broker._spark_warm is None


def test_spark_conf_is_quiet_by_default_and_user_settings_pass_through():
    conf = spark_conf({})
    assert conf["spark.ui.showConsoleProgress"] == "false"
    opts = conf["spark.driver.extraJavaOptions"]
    assert "-Dlog4j2.configurationFile=file:" in opts
    path = opts.split("file:", 1)[1].split()[0]
    text = Path(path).read_text()
    assert "rootLogger.level = ERROR" in text
    assert (
        "rootLogger.level = WARN"
        in Path(
            spark_conf({"kompakt.spark.log.level": "WARN"})["spark.driver.extraJavaOptions"]
            .split("file:", 1)[1]
            .split()[0]
        ).read_text()
    )
    # the user's own settings win
    assert spark_conf({"spark.ui.showConsoleProgress": "true"})["spark.ui.showConsoleProgress"] == (
        "true"
    )
    mine = "-Xss4m -Dlog4j2.configurationFile=/etc/mine.properties"
    opts = spark_conf({"spark.driver.extraJavaOptions": mine})["spark.driver.extraJavaOptions"]
    assert opts.startswith(mine) and "file:" not in opts  # (a local JVM gets JIT/GC options)
    other = spark_conf({"spark.driver.extraJavaOptions": "-Xss4m"})
    assert other["spark.driver.extraJavaOptions"].startswith("-Xss4m -Dlog4j2.configurationFile=")
