"""Java ``.properties`` text, read and written by the ``javaproperties`` library.

Kafka reads ``server.properties`` with ``java.util.Properties.load(InputStream)``: the
bytes are ISO-8859-1 and any other character is a ``\\uXXXX`` escape. ``read_properties``
decodes the same way, so a file from a Kafka install never fails to decode;
``to_properties`` writes ASCII with ``\\uXXXX`` escapes, which both readers take back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import javaproperties

PROPERTIES_ENCODING = "iso-8859-1"  # java.util.Properties.load(InputStream)


def to_properties(overrides: Mapping[str, str], header: str | None = None) -> str:
    """``key=value`` lines, sorted, escaped so ``from_properties`` reads them back exactly;
    each line of ``header`` becomes a ``# `` comment."""
    comments = "\n".join(f" {line}" for line in header.splitlines()) if header else None
    return javaproperties.dumps(overrides, comments=comments, timestamp=False, sort_keys=True)


def from_properties(text: str) -> dict[str, str]:
    """Read ``key=value`` (or ``key: value``, ``key value``) lines with Java's escapes and
    continuation lines; '#' and '!' start comments; the last occurrence of a key wins."""
    return javaproperties.loads(text)


def read_properties(path: str | Path) -> dict[str, str]:
    """A ``.properties`` file as ``java.util.Properties.load(InputStream)`` reads it."""
    return from_properties(Path(path).read_bytes().decode(PROPERTIES_ENCODING))
