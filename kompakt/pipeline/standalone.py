"""A throwaway Spark standalone cluster (a master, N workers) on 127.0.0.1.

For trying the compaction job in cluster mode on one machine (tests, demos): the pip
``pyspark`` has no ``start-master.sh``, so ``bin/spark-class`` starts the master and
worker classes directly. Every process is started here and stopped here, by its own
process group id. Workers run kompakt with this interpreter (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

# a JVM that only needs to live for a test starts much faster with C1 and serial GC
FAST_START_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_DAEMON_JAVA_OPTS=FAST_START_JAVA_OPTS,
    )
    return env


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


@contextmanager
def standalone_cluster(
    work_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 60
) -> Iterator[str]:
    """Yield the master URL once ``workers`` workers have registered."""
    env = cluster_env()
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    port, ui_port = free_port(), free_port()
    procs: list[subprocess.Popen] = []
    logs = []

    def start(args: list[str], name: str) -> None:
        log = open(work_dir / f"{name}.log", "wb")  # noqa: SIM115
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [spark_class, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            "master",
        )
        master = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            wdir = work_dir / f"worker-{i}"
            wdir.mkdir(parents=True, exist_ok=True)
            start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(wdir),
                    master,
                ],
                f"worker-{i}",
            )
        deadline = time.monotonic() + timeout
        while _alive_workers(ui_port) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"standalone cluster did not start; see logs in {work_dir}")
            time.sleep(0.5)
        yield master
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in logs:
            log.close()
