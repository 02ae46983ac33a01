"""The console's data pages as plain functions over the broker's state (no web here).

- :func:`inspect_key`: every record of one key still in a partition's log, which of them
  the next clean removes, and when a tombstone's delete horizon passes. The decision is
  the cleaner's own: the key map is fed by :func:`kompakt.cleaner.key_map.feeds_key_map`
  over the dirty range :func:`kompakt.cleaner.cleanable.log_to_clean` plans, and each
  record goes through :func:`kompakt.cleaner.rule.retain_records` (Kafka's
  ``Cleaner.shouldRetainRecord``); aborted transactional data is dropped as the
  cleaner's :class:`~kompakt.cleaner.transactions.TxnTracker` says.
- :func:`browse_messages`: records from an offset or a timestamp (ListOffsets' rule:
  the first offset whose timestamp is at or after it), optional key filter, values as
  text / JSON / hex. It reads through :meth:`PartitionLog.read`, the Fetch handler's
  read path, and stops at a record count, a page byte budget and a scan byte budget,
  so a page never holds the broker's log lock for long nor reads a whole log.
- :func:`describe_groups` / :func:`describe_group`: members, assignment, committed
  offsets and lag from the group coordinator's state (what DescribeGroups and
  OffsetFetch answer); lag is ``high watermark - committed`` as
  ``kafka-consumer-groups.sh --describe`` computes it.
- :func:`topic_configs` / :func:`alter_topic_config`: a topic's configs with their
  source (DescribeConfigs' sources folded into default / broker / topic), and an edit
  that is an IncrementalAlterConfigs request dispatched through the broker's API table
  (:meth:`kompakt.broker.app.Broker.dispatch`),
  so it is validated (and authorized) by exactly the code a Kafka client reaches.

Hostile input (a key that is not valid hex, an offset "abc" or -5, an unknown topic, a
bad timestamp) raises :class:`BrowseInputError` whose message the page shows.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

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


# -- key inspector -------------------------------------------------------------------------------


@dataclass
class KeyRecord:
    offset: int
    timestamp: int
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    segment: int  # base offset of the segment holding it
    removed: bool = False
    why: str = ""
    delete_horizon_ms: int | None = None  # set on the batch (KIP-534)
    horizon_note: str = ""

    @property
    def tombstone(self) -> bool:
        return self.value is None

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "value": render_bytes(self.value),
            "tombstone": self.tombstone,
            "headers": header_pairs(self.headers),
            "segment": self.segment,
            "removed_by_next_clean": self.removed,
            "why": self.why,
            "delete_horizon_ms": self.delete_horizon_ms,
            "horizon_note": self.horizon_note,
        }


@dataclass
class KeyReport:
    topic: str
    partition: int
    key: bytes
    now: int
    compacted: bool
    delete_retention_ms: int
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    map_end_offset: int | None = None  # the next clean rewrites offsets below this
    records: list[KeyRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bytes_scanned: int = 0
    complete: bool = True
    where: str = ""  # which partition was read and why (kompakt.broker.console.key_find)

    @property
    def removed(self) -> int:
        return sum(r.removed for r in self.records)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "key": render_bytes(self.key),
            "compacted": self.compacted,
            "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "map_end_offset": self.map_end_offset,
            "delete_retention_ms": self.delete_retention_ms,
            "records": [r.to_json() for r in self.records],
            "removed_by_next_clean": self.removed,
            "notes": self.notes,
            "complete": self.complete,
            "where": self.where,
        }


def _matching_rows(scan: Any, key: bytes) -> np.ndarray:
    """Rows of ``scan`` whose key is exactly ``key`` (vectorised)."""
    n = len(key)
    lengths = np.diff(scan.key_offsets)
    cand = np.nonzero((lengths == n) & ~scan.key_null)[0]
    if not len(cand) or n == 0:
        return cand
    want = np.frombuffer(key, np.uint8)
    starts = scan.key_offsets[cand]
    out = []
    step = max(1, (8 << 20) // n)  # bounded temporary of candidates x key length
    for i in range(0, len(cand), step):
        idx = starts[i : i + step, None] + np.arange(n)
        hit = (scan.key_data[idx] == want).all(axis=1)
        out.append(cand[i : i + step][hit])
    return np.concatenate(out)


def inspect_key(
    logs: Any,
    plog: PartitionLog,
    key: bytes,
    now: int,
    *,
    max_scan_bytes: int = KEY_SCAN_BYTES,
    map_entries: int | None = None,
) -> KeyReport:
    """Every record of ``key`` in ``plog`` and what the next clean does with each.

    "The next clean" is the one a "compact now" would run at ``now``: Kafka's
    ``LogCleanerManager.cleanableOffsets`` gives the dirty range, the key map covers it
    (only records :func:`feeds_key_map` admits), and the rewrite covers the log from its
    start to where the map ends, deciding each record by Kafka's
    ``shouldRetainRecord`` (:func:`kompakt.cleaner.rule.retain_records`). A tombstone
    kept by a clean gets its delete horizon (KIP-534: the clean's time plus
    ``delete.retention.ms``) and goes at the first clean after that. ``map_entries``
    (:func:`key_map_entries`) bounds the key map, to say when a clean would be partial.
    """
    from kompakt.cleaner import cleanable, rule
    from kompakt.cleaner.key_map import feeds_key_map
    from kompakt.cleaner.segment_io import segment_buffer, summarize_producers
    from kompakt.cleaner.transactions import TxnTracker
    from kompakt.record.decode import iter_batches
    from kompakt.record.header import read_header
    from kompakt.record.scan import scan_records

    cfg = plog.config
    rep = KeyReport(plog.topic, plog.partition, key, now, cfg.compact, cfg.delete_retention_ms)
    segments = [s for s in plog.segments_snapshot() if s.size]
    if cfg.compact:
        checkpoint = logs.cleaner_checkpoint().read().get((plog.topic, plog.partition))
        ltc = cleanable.log_to_clean(plog, checkpoint, now)
        start, end = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        rep.first_dirty_offset, rep.first_uncleanable_offset = start, end
        dirty = cleanable.segments_between(plog.segments_snapshot(), start, end)
        dirty_bases = {s.base_offset for s in dirty}
        if not cleanable.is_eligible(ltc, force=True):
            rep.notes.append(
                "nothing is cleanable now (no dirty records outside the active segment, "
                "min.compaction.lag.ms and open transactions); the next clean removes "
                "nothing until there are"
            )
            dirty_bases = set()
        elif not cleanable.is_eligible(ltc):
            rep.notes.append(
                f"dirty ratio {ltc.cleanable_ratio:.2f} is not above "
                f"min.cleanable.dirty.ratio {cfg.min_cleanable_dirty_ratio}: the background "
                "cleaner waits; 'compact now' would clean as shown"
            )
        producers = summarize_producers(plog, segments, now) if dirty_bases else None
        if producers is not None:
            _note_partial_map(rep, map_entries, producers, dirty)
    else:
        rep.notes.append(
            f"cleanup.policy={','.join(cfg.cleanup_policy)}: the cleaner never compacts this "
            "topic; records leave only by retention"
        )
        dirty_bases, producers, start, end, dirty = set(), None, 0, 0, []

    # pass 1: the key's latest offset in the key map, and where the map ends
    latest = -1
    map_last = -1
    scanned: list[tuple[Any, Any, np.ndarray, np.ndarray]] = []  # (segment, buf, scan, rows)
    if dirty_bases:
        assert producers is not None
        txn = TxnTracker(producers.aborted_between(start, end))
    for seg in segments:
        if rep.bytes_scanned + seg.size > max_scan_bytes:
            rep.complete = False
            rep.notes.append(
                f"only the first {rep.bytes_scanned} bytes of the log were read "
                f"(the inspector reads at most {max_scan_bytes}); records of the key "
                "after offset "
                f"{seg.base_offset} are not shown and the verdicts may be wrong"
            )
            break
        try:
            buf = segment_buffer(seg.log_path, seg.size)  # memory-mapped, not copied
        except OSError as exc:  # replaced by a clean or removed by retention meanwhile
            raise BrowseInputError(
                f"the log changed while it was read ({exc.strerror or exc}): try again"
            ) from None
        rep.bytes_scanned += len(buf)
        scan = scan_records(buf, verify_crc=False)
        rows = _matching_rows(scan, key)
        scanned.append((seg, buf, scan, rows))
        if seg.base_offset in dirty_bases:
            feeds = feeds_key_map(scan, buf, txn, start, end)
            fed = rows[feeds[rows]] if len(rows) else rows
            if len(fed):
                latest = max(latest, int(scan.offset[fed].max()))
            if len(scan.batch_position) and scan.batch_last_offset[-1] >= start:
                map_last = max(map_last, int(scan.batch_last_offset[-1]))
    # LocalEngine.build_offset_map: the map reaches at least to the next dirty segment
    for j in range(len(dirty) if dirty_bases else 0):
        next_base = dirty[j + 1].base_offset if j + 1 < len(dirty) else end
        map_last = max(map_last, next_base - 1)
    if dirty_bases:  # never past the first uncleanable offset (LocalEngine too)
        map_last = min(map_last, end - 1)
    map_end = map_last + 1 if dirty_bases and map_last >= 0 else None
    rep.map_end_offset = map_end
    retention = cfg.delete_retention_ms

    # pass 2: the records of the key, each through the survive/discard rule
    rw_txn = (
        TxnTracker(producers.aborted_between(plog.log_start_offset, map_end))
        if map_end is not None and producers is not None
        else None
    )
    for seg, buf, scan, rows in scanned:
        rewritten = map_end is not None and seg.base_offset < map_end
        aborted = np.zeros(len(scan.batch_position), bool)
        if rewritten and rw_txn is not None:
            aborted = rw_txn.read_scan(scan, buf)
        if not len(rows):
            continue
        batches = {}
        for b in sorted({int(scan.batch_index[r]) for r in rows}):
            pos = int(scan.batch_position[b])
            batch = next(iter_batches(memoryview(buf), pos, pos + int(scan.batch_size[b])))
            batches[b] = (read_header(memoryview(buf), pos), {r.offset: r for r in batch.records()})
        for r in rows:
            b = int(scan.batch_index[r])
            header, recs = batches[b]
            off = int(scan.offset[r])
            rec = recs.get(off)
            horizon = header.delete_horizon
            kr = KeyRecord(
                off,
                rec.timestamp if rec else int(scan.timestamp[r]),
                rec.value if rec else None,
                rec.headers if rec else (),
                seg.base_offset,
                delete_horizon_ms=horizon,
            )
            _decide(kr, rule, rewritten, bool(aborted[b]), latest, map_end, now, retention)
            rep.records.append(kr)
    rep.records.sort(key=lambda r: r.offset)
    return rep


def key_map_entries(settings: Any) -> int | None:
    """How many keys one clean's key map holds: the local engine's bounded offset map
    (Kafka's ``SkimpyOffsetMap``: ``log.cleaner.dedupe.buffer.size`` / 24 bytes x
    ``log.cleaner.io.buffer.load.factor``); None for the Spark engine (no bound)."""
    from kompakt.cleaner.config import ENGINE_DEFAULT, ENGINE_KEY, dedupe_buffer_size, load_factor
    from kompakt.cleaner.offset_map import BYTES_PER_ENTRY

    if settings.get(ENGINE_KEY, ENGINE_DEFAULT) != "local":
        return None
    return int(dedupe_buffer_size(settings) // BYTES_PER_ENTRY * load_factor(settings))


def _note_partial_map(rep: KeyReport, fits: int | None, producers: Any, dirty: list) -> None:
    """Kafka's bounded offset map: a dirty range with more records than it holds is
    cleaned in several passes, and the first one stops early."""
    records = sum(producers.segment_records.get(s.base_offset, 0) for s in dirty)
    if fits is not None and records > fits:
        rep.notes.append(
            f"the dirty range has {records} records, more than the local engine's key map "
            f"holds ({fits}, log.cleaner.dedupe.buffer.size): the next clean is partial and "
            "may stop before some records shown as removed"
        )


def _decide(
    kr: KeyRecord,
    rule: Any,
    rewritten: bool,
    aborted: bool,
    latest: int,
    map_end: int | None,
    now: int,
    retention: int,
) -> None:
    """The verdict of the next clean on one record of the key, and its horizon note."""
    if kr.tombstone:
        if kr.delete_horizon_ms is not None:
            left = kr.delete_horizon_ms - now
            kr.horizon_note = f"delete horizon {iso(kr.delete_horizon_ms)} " + (
                f"(in {duration(left)})" if left > 0 else "(passed)"
            )
        else:
            kr.horizon_note = (
                "no delete horizon yet: the first clean that keeps it sets "
                f"clean time + delete.retention.ms ({duration(retention)})"
            )
    if not rewritten:
        kr.why = (
            "kept: past the range the next clean rewrites"
            if map_end is not None
            else "kept: no clean is due to rewrite it"
        )
        return
    if aborted:
        kr.removed, kr.why = True, "removed: part of an aborted transaction"
        return
    horizon = -1 if kr.delete_horizon_ms is None else kr.delete_horizon_ms
    keep = bool(
        rule.retain_records(
            np.array([kr.offset], np.int64),
            np.array([latest], np.int64),
            np.array([False]),
            np.array([kr.tombstone]),
            np.array([horizon], np.int64),
            map_latest_offset=(map_end or 0) - 1,
            now=now,
        )[0]
    )
    kr.removed = not keep
    if keep:
        if kr.tombstone and kr.delete_horizon_ms is None:
            kr.why = "kept: the latest record of its key (the clean stamps its delete horizon)"
            kr.horizon_note = (
                f"the next clean sets its delete horizon to about "
                f"{iso(now + retention)} (now + delete.retention.ms {duration(retention)})"
            )
        elif kr.tombstone:
            kr.why = "kept: tombstone until its delete horizon passes"
        else:
            kr.why = "kept: the latest record of its key"
    elif kr.offset < latest:
        kr.why = f"removed: superseded by offset {latest}"
    else:
        kr.why = "removed: tombstone past its delete horizon"


# -- message browser -------------------------------------------------------------------------


@dataclass
class Message:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    def value_as(self, mode: str, limit: int = 4000) -> str:
        return render_bytes(self.value, mode, limit)

    def to_json(self, mode: str = "text") -> dict[str, Any]:
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": render_bytes(self.key),
            "value": self.value_as(mode),
            "headers": header_pairs(self.headers),
        }


@dataclass
class MessagePage:
    topic: str
    partition: int
    start_offset: int  # where reading began
    log_start_offset: int
    high_watermark: int
    messages: list[Message] = field(default_factory=list)
    next_offset: int | None = None  # where the next page starts (None: end of log)
    bytes_scanned: int = 0
    notes: list[str] = field(default_factory=list)


def resolve_start(
    plog: PartitionLog, offset: str | None, timestamp: str | None
) -> tuple[int, str | None]:
    """Where to start: an offset typed (clamped into the log, with a note) or the first
    offset whose timestamp is at or after one typed (ListOffsets by timestamp, Kafka's
    ``fetchOffsetByTimestamp``). Neither: the log start offset."""
    start, hw = plog.log_start_offset, plog.high_watermark
    if timestamp not in (None, ""):
        ts = parse_timestamp(timestamp)
        found = plog.offset_for_timestamp(ts)
        if found is None:
            return hw, f"no record at or after {iso(ts)}: starting at the end of the log ({hw})"
        return found[0], None
    if offset in (None, ""):
        return start, None
    off = parse_int(offset, "offset")
    if off < start:
        return start, f"offset {off} is below the log start offset {start}: starting there"
    if off > hw:
        return hw, f"offset {off} is past the end of the log ({hw}): nothing to show"
    return off, None


def _records_from(
    plog: PartitionLog, offset: int, end: int, budget: int, page: MessagePage
) -> Iterator[Any]:
    """Records at or after ``offset`` below ``end`` (data batches only), through
    :meth:`PartitionLog.read` one chunk at a time, until ``budget`` bytes are read."""
    from kompakt.record.decode import iter_batches

    pos = offset
    while pos < end and page.bytes_scanned < budget:
        data = plog.read(pos, min(READ_CHUNK, budget - page.bytes_scanned) or 1)
        if not data:
            return
        page.bytes_scanned += len(data)
        last = pos - 1
        for b in iter_batches(data):
            last = b.header.last_offset
            if b.header.is_control or b.header.last_offset < pos:
                continue
            for r in b.records():
                if pos <= r.offset < end:
                    yield r
        if last < pos:
            return
        pos = last + 1


def browse_messages(
    plog: PartitionLog,
    *,
    offset: str | None = None,
    timestamp: str | None = None,
    key: bytes | None = None,
    limit: str | int | None = None,
    max_scan_bytes: int = SCAN_BYTES,
    max_page_bytes: int = PAGE_BYTES,
) -> MessagePage:
    """A page of records of ``plog`` (see the module doc): at most ``limit`` records
    (default :data:`PAGE_RECORDS`) and ``max_page_bytes`` of keys and values, reading at
    most ``max_scan_bytes`` of the log; ``key`` keeps only records with that key."""
    n = (
        PAGE_RECORDS
        if limit in (None, "")
        else parse_int(limit, "records per page", minimum=1, maximum=MAX_PAGE_RECORDS)
    )
    first, note = resolve_start(plog, offset, timestamp)
    hw = plog.high_watermark
    page = MessagePage(plog.topic, plog.partition, first, plog.log_start_offset, hw)
    if note:
        page.notes.append(note)
    size = 0
    next_offset = first
    try:
        for r in _records_from(plog, first, hw, max_scan_bytes, page):
            next_offset = r.offset + 1
            if key is not None and r.key != key:
                continue
            page.messages.append(Message(r.offset, r.timestamp, r.key, r.value, r.headers))
            size += len(r.key or b"") + len(r.value or b"")
            if len(page.messages) >= n or size >= max_page_bytes:
                break
    except KompaktError as exc:  # out of range after a retention, a corrupt batch
        page.notes.append(f"reading stopped at offset {next_offset}: {exc}")
    if page.messages and (len(page.messages) >= n or size >= max_page_bytes):
        page.next_offset = page.messages[-1].offset + 1
    elif page.bytes_scanned >= max_scan_bytes and next_offset < hw:
        page.next_offset = next_offset
        page.notes.append(
            f"read {page.bytes_scanned} bytes of the log (the most one page reads); "
            f"continue from offset {next_offset}"
        )
    if page.next_offset is not None and page.next_offset >= hw:
        page.next_offset = None
    return page


# -- consumer groups --------------------------------------------------------------------------


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None
    lag: int | None
    member_id: str | None = None


@dataclass
class GroupMemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[tuple[str, int]]


@dataclass
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    members: list[GroupMemberView] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """A ConsumerProtocolAssignment's topic-partitions (read as v0, the prefix of every
    version, as Kafka's ``ConsumerProtocol.deserializeAssignment``); [] if not one."""
    from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
    from kio.serial import entity_reader

    if len(data) < 2:
        return []
    try:
        a, _used = entity_reader(ConsumerProtocolAssignment)(memoryview(data)[2:], 0)
    except Exception:  # another protocol's bytes (connect, a custom assignor)
        return []
    return sorted((t.topic, int(p)) for t in a.assigned_partitions for p in t.partitions)


def end_offset(logs: Any, topic: str, partition: int) -> int | None:
    """ListOffsets LATEST (read_uncommitted): the high watermark; None if gone."""
    try:
        return logs.get_log(topic, partition).high_watermark
    except KompaktError:
        return None


def group_lags(logs: Any, group: Any) -> list[PartitionLag]:
    """Committed offset, end offset and lag of each partition the group committed,
    as ``kafka-consumer-groups.sh --describe`` reports them (lag never below 0)."""
    out = []
    for (t, p), om in sorted(list(group.offsets.items())):
        end = end_offset(logs, t, p)
        lag = max(end - om.offset, 0) if end is not None and om.offset >= 0 else None
        out.append(PartitionLag(t, p, om.offset, end, lag))
    return out


def describe_group(logs: Any, coordinator: Any, group_id: str) -> GroupView | None:
    """One group as DescribeGroups + OffsetFetch show it, with lag; None if unknown."""
    if coordinator is None:
        return None
    g = coordinator.groups.get(group_id)
    if g is None or g.state.value == "Dead":
        return None
    stable = g.state.value == "Stable"
    view = GroupView(
        g.group_id, g.state.value, g.protocol_type or "", g.protocol or "", g.generation
    )
    owner = {}
    for m in list(g.members.values()):
        tps = decode_assignment(m.assignment) if stable and g.protocol_type == "consumer" else []
        for tp in tps:
            owner[tp] = m.member_id
        view.members.append(
            GroupMemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host, tps)
        )
    lags = {(x.topic, x.partition): x for x in group_lags(logs, g)}
    for tp, mid in owner.items():
        if tp not in lags:
            lags[tp] = PartitionLag(tp[0], tp[1], None, end_offset(logs, *tp), None)
        lags[tp].member_id = mid
    view.partitions = [lags[k] for k in sorted(lags)]
    view.members.sort(key=lambda m: m.member_id)
    return view


def describe_groups(logs: Any, coordinator: Any) -> list[GroupView]:
    """Every live group (ListGroups' list), each described with its lag."""
    if coordinator is None:
        return []
    out = []
    for gid in sorted(list(coordinator.groups)):
        v = describe_group(logs, coordinator, gid)
        if v is not None:
            out.append(v)
    return out


# -- topic configs ------------------------------------------------------------------------------

SOURCE_KIND = {
    "DYNAMIC_TOPIC_CONFIG": "topic",
    "DYNAMIC_BROKER_CONFIG": "broker",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "broker",
    "STATIC_BROKER_CONFIG": "broker",
    "DEFAULT_CONFIG": "default",
}


@dataclass
class ConfigRow:
    name: str
    value: str | None
    source: str  # default | broker | topic
    kafka_source: str  # DescribeConfigs' source name
    documentation: str
    sensitive: bool = False


def topic_configs(logs: Any, topic: str) -> list[ConfigRow]:
    """A topic's effective configs, as DescribeConfigs reports them."""
    from kompakt.log.config import CONFIG_DEFS

    if not topic or not logs.has_topic(topic):
        raise BrowseInputError(f"topic {(topic or '')[:200]!r} does not exist")
    rows = []
    for e in logs.topic_config(topic).describe():
        d = CONFIG_DEFS.get(e.name)
        rows.append(
            ConfigRow(
                e.name,
                None if e.sensitive else e.value,
                SOURCE_KIND.get(e.source, e.source.lower()),
                e.source,
                d.documentation if d is not None else "",
                e.sensitive,
            )
        )
    return sorted(rows, key=lambda r: r.name)


# Kafka's ConfigResource.Type.TOPIC and AlterConfigOp.OpType ids (the handler's own
# enums live in kompakt.broker.handlers.configs, which this module must not import: the
# admin listener imports the console, and the handlers import the broker config)
RESOURCE_TOPIC = 2
OP_SET = 0
OP_DELETE = 1


async def alter_topic_config_async(
    broker: Any,
    topic: str,
    name: str,
    value: str | None,
    *,
    delete: bool = False,
    principal: str = "User:ANONYMOUS",
    peer: str = "console:0",
    validate_only: bool = False,
) -> str | None:
    """Set (or, with ``delete``, remove) one topic config as an IncrementalAlterConfigs
    request through the broker's API table (:meth:`Broker.dispatch`, the authorizer's
    check included): Kafka's validation, Kafka's messages. None on success, else the
    error message to show next to the field."""
    from kio.schema.errors import ErrorCode
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )
    from kio.static.primitive import i8

    if not name:
        return "choose a config"
    if not delete and value is None:
        return f"enter a value for {name}"
    req = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(RESOURCE_TOPIC),
                resource_name=topic,
                configs=(
                    AlterableConfig(
                        name=name,
                        config_operation=i8(OP_DELETE if delete else OP_SET),
                        value=None if delete else value,
                    ),
                ),
            ),
        ),
        validate_only=validate_only,
    )
    resp = await broker.dispatch(
        IncrementalAlterConfigsRequest.__api_key__, 1, req, principal=principal, peer=peer
    )
    r = resp["responses"][0]
    if r["error_code"] == ErrorCode.none:
        return None
    return r["error_message"] or ErrorCode(r["error_code"]).name.upper()


def alter_topic_config(
    broker: Any,
    topic: str,
    name: str,
    value: str | None,
    **kw: Any,
) -> str | None:
    """:func:`alter_topic_config_async` from a thread without a running event loop."""
    import asyncio

    return asyncio.run(alter_topic_config_async(broker, topic, name, value, **kw))


# -- Prometheus ----------------------------------------------------------------------------------


def lag_samples(logs: Any, coordinator: Any) -> Iterator[tuple[str, str, int, int]]:
    """(group, topic, partition, lag) of every committed offset of every live group,
    for ``kompakt_consumer_group_lag`` (computed at scrape, like the other gauges)."""
    if coordinator is None or logs is None:
        return
    for g in list(coordinator.groups.values()):
        if g.state.value == "Dead":
            continue
        for x in group_lags(logs, g):
            if x.lag is not None:
                yield g.group_id, x.topic, x.partition, x.lag
