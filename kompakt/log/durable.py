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


def write_json_atomically(path: Path, body: Any) -> None:
    """Replace ``path`` with ``body`` as indented, key-sorted JSON, durably."""
    write_text_atomically(path, json.dumps(body, indent=1, sort_keys=True))


def write_text_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, durably (``meta.properties``: Kafka writes it the
    same way, a torn one would cost the dir its cluster and directory ids)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
