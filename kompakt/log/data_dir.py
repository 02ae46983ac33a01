"""Which folders may be opened or made a data dir, checked before anything opens one.

Opening a folder with a ``LogManager`` makes it a data dir (``.lock``,
``meta.properties``, checkpoints, and a partition for every ``NAME-N`` folder), so the
commands that open one (``kompakt serve`` / ``python -m kompakt.broker``, the offline
CLI verbs, ``compact``, ``export``) ask here first and refuse in one line, as Kafka
refuses a log dir holding folders that are not partitions.

``kompakt.log.manager`` is imported when a check runs, not with this module: the CLI
imports this at start-up, and ``kompakt --help`` must not load the log layer.
"""

from __future__ import annotations

import os
from pathlib import Path

from kompakt.errors import KompaktError


class DataDirError(KompaktError):
    """A folder that is not, and may not be made, a data dir."""


def require_data_dir(data_dir: Path) -> None:
    """Refuse, in one line, a ``--data-dir`` that is missing, a file, or a folder that
    was never a data dir (no ``meta.properties``: :func:`~kompakt.log.manager.is_data_dir`),
    before anything opens it: opening would make it one (``.lock``, ``meta.properties``,
    checkpoints, and a partition for every ``NAME-N`` folder, whose files it would
    truncate as torn segments)."""
    from kompakt.log.manager import is_data_dir

    if not data_dir.exists():
        raise DataDirError(f"data dir '{data_dir}' does not exist")
    if not data_dir.is_dir():
        raise DataDirError(f"data dir '{data_dir}' is not a directory")
    if not is_data_dir(data_dir):
        raise DataDirError(
            f"'{data_dir}' is not a kompakt data dir: it has no meta.properties (every "
            "kompakt and Kafka data dir has one; 'kompakt topic create' or 'kompakt "
            "serve' makes a data dir in a new or empty folder)"
        )


def check_new_data_dir(data_dir: Path) -> None:
    """Where a new data dir may be made (``topic create``; as Kafka formats an empty log
    dir): a missing or empty folder, or an existing data dir; never a folder that holds
    other things, whose ``NAME-N`` sub-folders would be taken for partitions."""
    if not data_dir.exists():
        return
    if not data_dir.is_dir():
        raise DataDirError(f"data dir '{data_dir}' is not a directory")
    # a freshly formatted volume's root holds only lost+found (no '-': never a partition)
    if not [p for p in data_dir.iterdir() if p.name != "lost+found"]:
        return
    from kompakt.log.manager import is_data_dir

    if not is_data_dir(data_dir):
        raise DataDirError(
            f"'{data_dir}' is not empty and not a kompakt data dir: "
            "refusing to make a data dir there (use a new or empty folder)"
        )


def unusable_dir(data_dir: Path) -> bool:
    """True for a log dir that exists but cannot be used as one: not a directory, or
    not readable (no permission, an I/O error). Such a dir is not refused here: the
    broker's log manager takes it offline at start, as Kafka's
    ``LogManager.createAndValidateLogDirs`` does."""
    try:
        if not data_dir.exists():
            return False
        if not data_dir.is_dir():
            return True
        os.listdir(data_dir)
        return False
    except OSError:
        return True
