"""A broker process with a test's crash points: the coordinators'
:class:`~kompakt.broker.coordinator.faults.CoordinatorFaults`, handed to the broker at
start (nothing read from the environment), so a test kills the broker at one chosen
write and starts it again on the same data dir.

Run as a script, ``python tests/reliability/crash_faults.py NAME --override k=v ...``
starts the broker as ``python -m kompakt.broker`` does, with the faults :data:`FAULTS`
names (a function cannot cross the process boundary, a name can). It imports nothing
from the tests, so it runs from any working directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kompakt.broker.app import run
from kompakt.broker.config import BrokerConfig
from kompakt.broker.coordinator.faults import CoordinatorFaults

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parents[2]

SLOW_WRITE_S = 1.0
"""How long a doomed group write stalls before the kill, as a slow disk would: time
enough for an answer sent before the write to reach its client."""


def kill_self() -> None:
    """Die as a power cut would: no shutdown, no flush."""
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_before_markers() -> CoordinatorFaults:
    """Once an EndTxn's Prepare record is written, before any marker."""
    return CoordinatorFaults(before_txn_markers=lambda _producer_id: kill_self())


def _kill_after_end_txn_answer() -> CoordinatorFaults:
    """Once an EndTxn's Prepare record is written and its answer sent: the marker write
    stalls (a slow disk) long enough for the answer to reach the client, then dies."""

    def hook(_producer_id: int) -> None:
        time.sleep(SLOW_WRITE_S)  # fault: a slow disk under the marker write
        kill_self()

    return CoordinatorFaults(before_txn_markers=hook)


def _kill_at_second_generation() -> CoordinatorFaults:
    """At the first group record of generation 2 or later, before it is appended."""

    def hook(_group: str, generation: int) -> None:
        if generation >= 2:
            time.sleep(SLOW_WRITE_S)  # the injected fault: a stalled disk, then the crash
            kill_self()

    return CoordinatorFaults(before_group_write=hook)


FAULTS: dict[str, Callable[[], CoordinatorFaults]] = {
    "none": CoordinatorFaults,
    "kill_before_markers": _kill_before_markers,
    "kill_after_end_txn_answer": _kill_after_end_txn_answer,
    "kill_at_second_generation": _kill_at_second_generation,
}


def command(faults: str, settings: dict[str, object]) -> list[str]:
    """The command line of a broker with the named faults and ``settings``."""
    cmd = [sys.executable, str(SCRIPT), faults]
    for k, v in settings.items():
        cmd += ["--override", f"{k}={v}"]
    return cmd


def start(
    data_dir: Path, port: int, faults: str = "none", overrides: dict[str, object] | None = None
) -> subprocess.Popen:
    """A broker process on ``127.0.0.1:port`` over ``data_dir`` with the named faults,
    returned once it listens; its log is drained on a thread so it never blocks."""
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(data_dir),
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "kompakt.cleaner.engine": "local",
        **(overrides or {}),
    }
    proc = subprocess.Popen(
        command(faults, settings),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the broker logs "listening on" once its port is open
        seen.append(line)
        if "kompakt broker listening on" in line:
            break
    else:
        raise AssertionError("broker did not start:\n" + "".join(seen))
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("faults", choices=sorted(FAULTS))
    parser.add_argument("--override", action="append", default=[])
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    return run(BrokerConfig.load(None, args.override), faults=FAULTS[args.faults]())


if __name__ == "__main__":
    sys.exit(main())
