"""A broker process that kills itself (SIGKILL) at one named step of the remote tier's
work, for the tiered crash campaign (:mod:`reliability.tiered_campaign`).

``python tests/reliability/tiered_faults.py STEP N ARM_FILE [kompakt serve] --override
k=v ...`` starts the broker as ``python -m kompakt.broker`` does; once ``ARM_FILE``
exists, the N-th time the broker reaches ``STEP`` it dies there, as a power cut would.
Nothing is read from the environment and the broker's code carries no test switch: the
steps are the remote cleaner's own fault hook (:attr:`RemoteCleaner.fault`) and the
object store's calls, wrapped on the one store instance the broker's remote tier opened
(every writer of the tier, the remote log manager's copies, commits and retention and
the remote clean, goes through it). The steps:

- ``upload.put.before`` / ``upload.put.after``: before / after one segment object's put
  (a ``.log``, an index, a ``.txnindex`` or a producer snapshot);
- ``manifest.cas.before`` / ``manifest.cas.after``: before / after a manifest's
  compare-and-swap returned (after it: before the local segments it allows to go are
  deleted, or before a clean's replaced objects are scheduled);
- ``remote.delete.before`` / ``remote.delete.after``: around one segment object's
  delete (remote retention, a clean's replaced objects);
- ``clean.fetched``, ``clean.cleaned``, ``clean.uploaded``, ``clean.committed``,
  ``clean.deleted``: the remote clean's own steps;
- ``none``: no kill from inside (the campaign kills at a random moment).

It imports nothing from the tests, so it runs from any working directory.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kompakt.broker import tiering
from kompakt.broker.app import run
from kompakt.broker.config import BrokerConfig
from kompakt.remote.layout import MANIFEST_OBJECT, SEGMENTS

SCRIPT = Path(__file__).resolve()
CLEAN_STEPS = ("fetched", "cleaned", "uploaded", "committed", "deleted")
STEPS = (
    "upload.put.before",
    "upload.put.after",
    "manifest.cas.before",
    "manifest.cas.after",
    "remote.delete.before",
    "remote.delete.after",
    *(f"clean.{s}" for s in CLEAN_STEPS),
)


class Killer:
    """Counts the armed passes through ``step`` and dies at the ``n``-th."""

    def __init__(self, step: str, n: int, arm_file: Path):
        self.step, self.n, self.arm_file = step, n, arm_file
        self.seen = 0

    def at(self, step: str) -> None:
        if step != self.step or not self.arm_file.exists():
            return
        self.seen += 1
        if self.seen >= self.n:
            logging.getLogger("tiered_faults").warning("killing the broker at %s", step)
            os.kill(os.getpid(), signal.SIGKILL)


def _kind(key: str) -> str | None:
    """``upload``/``manifest``/None: what a store key is, for the step names."""
    parts = key.split("/")
    if parts[-1] == MANIFEST_OBJECT:
        return "manifest"
    if len(parts) >= 2 and parts[-2] == SEGMENTS:
        return "upload"
    return None


def wrap_store(store: Any, killer: Killer) -> None:
    """Put the kill points around the store's put and delete (this one instance)."""
    put: Callable[..., str] = store.put
    delete: Callable[[str], None] = store.delete

    def faulty_put(key: str, data: Any, **kw: Any) -> str:
        kind = _kind(key)
        step = {"upload": "upload.put", "manifest": "manifest.cas"}.get(kind or "")
        if step:
            killer.at(step + ".before")
        version = put(key, data, **kw)
        if step:
            killer.at(step + ".after")
        return version

    def faulty_delete(key: str) -> None:
        segment = _kind(key) == "upload"
        if segment:
            killer.at("remote.delete.before")
        delete(key)
        if segment:
            killer.at("remote.delete.after")

    store.put = faulty_put
    store.delete = faulty_delete


def install_killer(killer: Killer) -> None:
    """Arm the broker's remote tier, once :func:`kompakt.broker.tiering.install` made it."""
    original = tiering.install

    def install(broker: Any) -> None:
        original(broker)
        t = tiering.tiering_of(broker.state)
        if t is None:
            return
        wrap_store(t.tier.store, killer)
        t.remote_cleaner.fault = lambda step: killer.at(f"clean.{step}")

    tiering.install = install


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("step", choices=[*STEPS, "none"])
    p.add_argument("n", type=int)
    p.add_argument("arm_file", type=Path)
    p.add_argument("command", nargs="*", help="ignored: the kompakt serve words")
    p.add_argument("--override", action="append", default=[])
    args = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    if args.step != "none":
        install_killer(Killer(args.step, args.n, args.arm_file))
    return run(BrokerConfig.load(None, args.override))


if __name__ == "__main__":
    sys.exit(main())
