"""Small metadata files written so a crash leaves the old or the new file, never a torn one.

The same protocol as Kafka's checkpoint files (and :class:`OffsetCheckpointFile`): write
``<name>.tmp``, fsync it, rename it over the old file, fsync the directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kompakt.log.checkpoint import fsync_dir

# a secret's file (credentials, ACLs): the owner's alone from its first byte
PRIVATE = 0o600


def write_json_atomically(path: Path, body: Any, mode: int | None = None) -> None:
    """Replace ``path`` with ``body`` as indented, key-sorted JSON, durably."""
    write_text_atomically(path, json.dumps(body, indent=1, sort_keys=True), mode)


def write_text_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` with ``text``, durably (``meta.properties``: Kafka writes it the
    same way, a torn one would cost the dir its cluster and directory ids).

    ``mode`` (e.g. :data:`PRIVATE`): the temp file is created new with exactly these
    permissions before a byte is written, so neither it nor the file it becomes is ever
    readable by others; a chmod after the write or the rename would leave a window.
    Without it the file is made as Kafka makes its data dir files (0666 less the umask).
    """
    tmp = path.with_name(path.name + ".tmp")
    if mode is None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    else:
        # a leftover temp file (a crash mid-write) may have other permissions, or be a
        # link planted by someone else: remove it and create ours new (O_EXCL)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        os.fchmod(fd, mode)  # exactly ``mode`` whatever the umask
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
