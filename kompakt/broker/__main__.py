"""``python -m kompakt.broker [server.properties] [--override key=value ...]``."""

from __future__ import annotations

import argparse
import logging
import sys

from kompakt.broker.app import run
from kompakt.broker.config import BrokerConfig
from kompakt.errors import InvalidConfigError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kompakt.broker")
    p.add_argument("properties", nargs="?")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = BrokerConfig.load(args.properties, args.override)
    except InvalidConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
