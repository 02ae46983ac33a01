"""Client settings for the CLI's broker verbs, as Kafka's tools take them with
``--command-config``: a properties file of librdkafka client keys (``security.protocol``,
``ssl.ca.location``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password`` ...), the
same file ``kcat -F`` reads. Given as ``kompakt --command-config FILE <verb>`` or in
``KOMPAKT_COMMAND_CONFIG``, so a password never sits on the command line."""

from __future__ import annotations

import os
from pathlib import Path

from .backend import CliError

ENV = "KOMPAKT_COMMAND_CONFIG"
_path: Path | None = None


def set_path(path: Path | None) -> None:
    """The root option's file (None: fall back to the environment)."""
    global _path
    _path = path


def settings() -> dict[str, str]:
    """The client settings in force ({} when none were given)."""
    from kompakt.log.config.properties import read_properties

    path = _path or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if path is None:
        return {}
    try:
        return dict(read_properties(path))
    except OSError as exc:
        raise CliError(f"--command-config {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"--command-config {path}: not a properties file ({exc})") from None
