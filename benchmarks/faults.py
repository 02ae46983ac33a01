"""Fault campaign: SIGKILLs aimed at phases, pauses, full disks and read I/O errors
against a real ``kompakt serve`` under load, judged by a model of Kafka's compaction
guarantees.

The workload, the faults and the checker are in ``tests/reliability/fault_campaign.py``
(the CI test runs the same code with a small budget). This script runs a campaign for
``--faults N`` faults or ``--duration`` seconds (whichever comes first), prints each
fault and a summary (seed, faults by kind with how many hit their aimed phase,
acknowledged records, transactions, violations), and writes ``faults.csv`` (every
fault: time, kind, phase, hit, detail), ``timeline.csv`` and ``faults.png``
(acknowledged records/s and produce p99 with the faults marked) to ``--out``.

``--seed`` replays the fault choices (kinds, delays, limits); the producers' timing and
the broker's still vary, so a replay aims at the same phases, not the same instants.
``--engine local`` runs the background cleaner in process and never starts Spark;
``spark`` cleans on Spark in the background too; ``both`` (default) cleans locally in
the background and adds kills during ``POST /v1/compact`` cleans on Spark.

Read I/O errors (``read-io-error``: EIO on segment ``pread``/``mmap`` during a fetch, a
local clean or a Spark clean) need libfiu's ``fiu-run``/``fiu-ctrl``
(``scripts/ensure-fiu.sh``); without them that kind is skipped and the summary says so.

Run: ``.venv/bin/python benchmarks/faults.py --faults 200 --out faults-out``.
Exit status 1 when any violation was found.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from reliability.fault_campaign import (  # noqa: E402
    DEFAULT_WEIGHTS,
    CampaignSettings,
    run_campaign,
    write_outputs,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=None, help="stop after N faults")
    ap.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    ap.add_argument("--seed", type=int, default=None, help="replay a campaign's fault choices")
    ap.add_argument("--engine", choices=("local", "spark", "both"), default="both")
    ap.add_argument("--rate", type=float, default=200.0, help="records/s per producer (2)")
    ap.add_argument(
        "--spark-every", type=int, default=0, help="make every Nth fault a Spark-clean kill"
    )
    ap.add_argument("--check-every", type=int, default=100, help="read back every N faults")
    ap.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="KIND=W",
        help=f"relative weight of a fault kind ({', '.join(DEFAULT_WEIGHTS)})",
    )
    ap.add_argument("--out", type=Path, default=Path("faults-out"))
    ap.add_argument("--work", type=Path, default=None, help="data dir parent (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.faults is None and args.duration is None:
        ap.error("give --faults N or --duration SECONDS")
    weights = dict(DEFAULT_WEIGHTS)
    for item in args.weight:
        kind, _, w = item.partition("=")
        if kind not in weights:
            ap.error(f"unknown fault kind {kind!r}: one of {', '.join(weights)}")
        try:
            weights[kind] = float(w)
        except ValueError:
            ap.error(f"--weight {item}: the weight must be a number")
    seed = random.randrange(2**31) if args.seed is None else args.seed
    settings = CampaignSettings(
        seed=seed,
        faults=args.faults,
        duration=args.duration,
        engine=args.engine,
        rate=args.rate,
        weights=weights,
        check_every=args.check_every,
        spark_every=args.spark_every,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="kompakt-faults-"))
    print(f"work dir {work} (broker log: {work / 'data-broker.log'})", flush=True)
    result = run_campaign(settings, work, log=lambda line: print(line, flush=True))
    faults_csv, png = write_outputs(result, args.out)
    print(result.summary())
    print(f"wrote {faults_csv}, {args.out / 'timeline.csv'} and {png}")
    for v in result.violations[:20]:
        print("  VIOLATION", v)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
