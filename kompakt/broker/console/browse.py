"""What the console's data pages share: reading what a user typed and showing bytes.

The pages' data live one module a page, as plain functions over the broker's state (no
web here): :mod:`~kompakt.broker.console.keys` (the key inspector, the cleaner's own
dry run), :mod:`~kompakt.broker.console.messages` (the message browser),
:mod:`~kompakt.broker.console.groups` (consumer groups and lag) and
:mod:`~kompakt.broker.console.topic_configs` (configs and their edit).

Hostile input (a key that is not valid hex, an offset "abc" or -5, an unknown topic, a
bad timestamp) raises :class:`BrowseInputError` whose message the page shows.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from kompakt.errors import KompaktError
from kompakt.log.partition_log import PartitionLog

MAX_KEY_BYTES = 64 * 1024
PREVIEW_CHARS = 240
KEY_SCAN_BYTES = 512 << 20
"""The key inspector reads at most this much of a log (the whole log up to it); past it
the answer says it is incomplete."""
PAGE_RECORDS = 50
MAX_PAGE_RECORDS = 500
PAGE_BYTES = 1 << 20
"""Bytes of values and keys one message-browser page renders at most."""
SCAN_BYTES = 32 << 20
"""Log bytes one message-browser request reads at most (a key search over a long log
stops there and offers to go on)."""
READ_CHUNK = 1 << 20
PAGE_EXPANSION = 512 << 20
"""Bytes the batches one page reads may decompress to (:mod:`kompakt.record.preview`):
Kafka bounds a batch's compressed size, and a few KiB of zstd may hold 2 GiB."""
VALUE_MODES = ("text", "json", "hex")
KEY_ENCODINGS = ("text", "hex", "base64")
OFFSET_MAX = 2**63 - 1


class BrowseInputError(KompaktError, code="invalid_request"):
    """Input a page cannot use; the message is shown on the page as it is."""


# -- parsing what a user typed --------------------------------------------------------------


def parse_key(text: str | None, encoding: str = "text") -> bytes:
    """A key typed as text (UTF-8), hex (``0a1b``, spaces allowed) or base64."""
    if text is None or text == "":
        raise BrowseInputError("enter a key")
    if encoding not in KEY_ENCODINGS:
        raise BrowseInputError(
            f"unknown key encoding {encoding!r}: use one of {', '.join(KEY_ENCODINGS)}"
        )
    if encoding == "text":
        key = text.encode("utf-8", "surrogatepass")
    elif encoding == "hex":
        digits = "".join(text.split())
        if digits.lower().startswith("0x"):
            digits = digits[2:]
        try:
            key = bytes.fromhex(digits)
        except ValueError:
            raise BrowseInputError(
                f"key {text[:80]!r} is not hex: use pairs of 0-9a-f digits"
            ) from None
    else:
        try:
            key = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise BrowseInputError(f"key {text[:80]!r} is not valid base64") from None
    if len(key) > MAX_KEY_BYTES:
        raise BrowseInputError(f"a key of {len(key)} bytes is longer than {MAX_KEY_BYTES}")
    return key


def parse_int(
    text: str | int | None, what: str, *, minimum: int = 0, maximum: int = OFFSET_MAX
) -> int:
    """A whole number in ``[minimum, maximum]``, or a :class:`BrowseInputError` naming it."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = (text or "").strip()
        try:
            value = int(s, 10)
        except ValueError:
            raise BrowseInputError(f"{what} must be a whole number, got {s[:40]!r}") from None
    if value < minimum or value > maximum:
        raise BrowseInputError(f"{what} must be between {minimum} and {maximum}, got {value}")
    return value


def parse_timestamp(text: str | None) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    s = (text or "").strip()
    if not s:
        raise BrowseInputError("enter a timestamp (ms since the epoch or ISO 8601)")
    if s.lstrip("-").isdigit():
        return parse_int(s, "timestamp", minimum=0)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
    except ValueError:
        raise BrowseInputError(
            f"timestamp {s[:40]!r} is neither ms since the epoch nor ISO 8601 "
            "(e.g. 2026-01-31T12:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    ms = int(dt.timestamp() * 1000)
    if ms < 0:
        raise BrowseInputError(f"timestamp {s[:40]!r} is before 1970")
    return ms


def partition_log(logs: Any, topic: str | None, partition: str | int | None) -> PartitionLog:
    """The log of ``topic``/``partition`` as typed, or a message saying what is wrong."""
    if not topic:
        raise BrowseInputError("choose a topic")
    if not logs.has_topic(topic):
        raise BrowseInputError(f"topic {topic[:200]!r} does not exist")
    count = logs.partition_count(topic)
    p = parse_int(partition if partition not in (None, "") else "0", "partition", maximum=2**31 - 1)
    if p >= count:
        raise BrowseInputError(f"topic {topic!r} has partitions 0..{count - 1}, not {p}")
    try:
        return logs.get_log(topic, p)
    except KompaktError as exc:  # deleted meanwhile
        raise BrowseInputError(str(exc)) from None


# -- rendering bytes ---------------------------------------------------------------------------


def render_bytes(data: bytes | None, mode: str = "text", limit: int = PREVIEW_CHARS) -> str:
    """``data`` as text (UTF-8, undecodable bytes as U+FFFD), pretty JSON or hex; None is
    ``null`` (a tombstone's value). Cut at ``limit`` characters with an ellipsis."""
    if data is None:
        return "null"
    if mode == "hex":
        out = data[: limit // 2 + 1].hex(" ")
    elif mode == "json":
        try:
            out = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            out = data.decode("utf-8", "replace")
    else:
        out = data.decode("utf-8", "replace")
    return out if len(out) <= limit else out[: limit - 1] + "…"


def is_json(data: bytes | None) -> bool:
    if data is None:
        return False
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


def header_pairs(headers: Iterable[tuple[str, bytes | None]]) -> list[tuple[str, str]]:
    return [(k, render_bytes(v, "text", 120)) for k, v in headers]


def iso(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def duration(ms: int) -> str:
    """A span of milliseconds for people: ``1d 2h``, ``3m 20s``, ``450 ms``."""
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return " ".join(parts[:2])


# other code imports these from here (the broker's metrics, a group crash test)
from kompakt.broker.console.groups import decode_assignment, lag_samples  # noqa: E402

__all__ = ["decode_assignment", "lag_samples"]
