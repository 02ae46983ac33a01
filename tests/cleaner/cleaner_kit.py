"""Helpers shared by the cleaner tests (``tests/cleaner`` is in pytest's ``pythonpath``)."""

from __future__ import annotations

import threading
from pathlib import Path

from manual_clock import T0, ManualClock  # noqa: F401 (re-exported for the tests)
from shared_kit import wait_for

from kompakt.log.manager import LogManager
from kompakt.log.partition_log import PartitionLog
from kompakt.record.decode import Record
from kompakt.record.encode import build_simple_batch


def open_manager(path: Path, clock, broker_config=None) -> LogManager:
    return LogManager(path, broker_config=broker_config, clock=clock)


def append(plog: PartitionLog, items, ts: int | None = None, **kwargs) -> tuple[int, int]:
    """Append one batch of (key, value) items; returns (first, last) offset."""
    ts = plog.clock() if ts is None else ts
    info = plog.append(build_simple_batch(list(items), timestamp=ts, **kwargs))
    return info.first_offset, info.last_offset


def records(plog: PartitionLog) -> list[Record]:
    return [r for b in plog.iter_batches() for r in b.records()]


def fold(plog: PartitionLog) -> dict[bytes, bytes]:
    """Replay the log from its start: the state a consumer rebuilding a table sees."""
    state: dict[bytes, bytes] = {}
    for r in records(plog):
        if r.offset < plog.log_start_offset:
            continue
        if r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state


def dir_bytes(directory: Path, suffixes=(".log",)) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name.endswith(suffixes)
    }


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap")))


def headers(plog: PartitionLog):
    return [b.header for b in plog.iter_batches()]


def wait_for_file(path: Path, timeout: float = 60) -> None:
    """Wait for a marker the held clean writes (see ``CleanFaults``)."""
    wait_for(path.exists, f"{path.name} to appear", timeout)


def wait_for_later_group(hold: Path, timeout: float = 60) -> Path:
    """The ``held-<offset>`` marker of a group after the first (offset 0): the first
    group's rewrite is done and a later one is held (see ``CleanFaults``)."""

    def later() -> list[Path]:
        return [p for p in hold.iterdir() if p.name.startswith("held-") and p.name != "held-0"]

    return wait_for(later, "a group after the first to be held", timeout)[0]


class Run(threading.Thread):
    """A call on another thread, its result or exception kept for the test."""

    def __init__(self, fn, *args, **kwargs):
        super().__init__(daemon=True)
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.result = self.error = None

    def run(self):
        try:
            self.result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc
