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
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
