"""``python -m kompakt.broker [server.properties] [--override key=value ...]``.

The broker process has one start-up, :func:`serve`; ``kompakt serve`` (the CLI verb)
calls it too, so both refuse the same folders and data dirs in use before the broker
makes anything, and both say the same when Ctrl-C stops the broker. This module is
only the ``argparse`` front end for ``python -m`` (what scripts and Kafka's own test
harnesses start, as Kafka's ``kafka-server-start.sh`` runs ``kafka.Kafka``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from kompakt.broker.app import run
from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError, KompaktError
from kompakt.log.data_dir import check_new_data_dir, unusable_dir
from kompakt.log.manager import shared_dir_lock

INTERRUPTED = 130  # 128 + SIGINT, as a shell and the JVM running Kafka report it
CANNOT_START = 1  # as run() returns when the broker cannot start
BAD_CONFIG = 2  # python -m kompakt.broker: a bad server.properties or override


def serve(properties: str | os.PathLike | None, overrides: Sequence[str]) -> int:
    """Run a broker on ``properties`` (a Kafka-style server.properties, or None) with
    ``key=value`` overrides until SIGTERM/SIGINT; the exit code (see :func:`run`).

    Raises ``KompaktError``/``OSError`` for what stops it before it starts, for the
    front end to print in one line: a bad config, a ``log.dirs`` that is a folder of
    other things (Kafka refuses a log dir holding folders that are not partitions; a
    LogManager would take a 'photos-2019' folder for partition 2019), or a data dir
    another process owns (Kafka's log dir lock).
    """
    config = BrokerConfig.load(properties, list(overrides))
    for data_dir in config.data_dirs:  # each of log.dirs, as Kafka checks every one
        if unusable_dir(data_dir):
            # a file in its place, no permission, a failing disk: the log manager takes
            # it offline and starts with the others (Kafka's createAndValidateLogDirs),
            # or refuses in one line when it is the first dir or no dir is usable
            continue
        check_new_data_dir(data_dir)
        if data_dir.is_dir():
            with shared_dir_lock(data_dir):
                pass
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    code = run(config)
    if code == INTERRUPTED:
        print("interrupted: the broker stopped cleanly", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """``python -m kompakt.broker``: :func:`serve` with its refusals as one
    ``error:`` line (exit 2 for a bad config, as before; 1 for the rest, as a broker
    that cannot start)."""
    p = argparse.ArgumentParser(prog="python -m kompakt.broker")
    p.add_argument("properties", nargs="?")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    try:
        return serve(args.properties, args.override)
    except InvalidConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_CONFIG
    except (KompaktError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return CANNOT_START


if __name__ == "__main__":
    sys.exit(main())
