"""The driver's plan of a Spark remote clean, made from the manifest alone.

A remote clean must reach the same decisions as the in-process engine does on a local
copy of the remote range (:mod:`kompakt.cleaner.remote_clean`), without the driver
reading a segment: the cleaner's own planning functions
(:func:`kompakt.cleaner.cleanable.log_to_clean`, :meth:`CleanJob.groups_to`,
:meth:`CleanJob.round_context`) run over :class:`RemoteLogView`, the manifest seen as
the log they expect (segments with their sizes, index sizes and largest timestamps, an
empty active segment at the remote end, the last stable offset there: the tier holds
only segments below it). The producers' last batches come from the newest tiered
producer snapshot (the remote end's, unless a segment lacks one: then the producer
batches after it too, which the Spark engine has its executors read) and the aborted
transactions from the tiered ``.txnindex`` files, small files the driver reads whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from kompakt.cleaner import cleanable
from kompakt.cleaner.engine import CleanJob
from kompakt.cleaner.remote_clean import cleaner_configs
from kompakt.cleaner.rewrite import RoundContext
from kompakt.cleaner.transactions import ProducerSummary
from kompakt.log.config.topic import BrokerDefaults, TopicConfig
from kompakt.log.local_log import LocalLog
from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX, CorruptSnapshotError, decode
from kompakt.log.producer_state import LastRecord, ProducerStateManager
from kompakt.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX
from kompakt.log.txn_index import AbortedTxn, parse_entries
from kompakt.record.decode import iter_batches
from kompakt.record.header import NO_PRODUCER_ID, Header
from kompakt.remote.layout import file_base_offset
from kompakt.remote.manifest import PartitionManifest, RemoteSegment
from kompakt.remote.storage import RemoteStorageManager

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _IndexSize:
    nbytes: int

    def size_bytes(self) -> int:
        return self.nbytes


@dataclass(eq=False)
class RemoteSegmentView:
    """A remote segment as the cleaner's planning reads a segment: base offset (its
    file's), ``.log`` size, index sizes, largest timestamp."""

    base_offset: int
    size: int
    largest_timestamp: int
    offset_index: _IndexSize
    time_index: _IndexSize
    remote: RemoteSegment | None = None  # None: the empty active segment at the end
    rolling_timestamp: int | None = None  # not in the manifest (max.compaction.lag.ms)

    @property
    def next_offset(self) -> int:
        return self.base_offset if self.remote is None else self.remote.last_offset + 1

    @classmethod
    def of(cls, s: RemoteSegment) -> RemoteSegmentView:
        def size(suffix: str) -> int:
            f = s.files.get(suffix)
            return f.size if f is not None else 0

        return cls(
            file_base_offset(s.files[LOG_SUFFIX].key),
            size(LOG_SUFFIX),
            s.max_timestamp_ms,
            _IndexSize(size(INDEX_SUFFIX)),
            _IndexSize(size(TIMEINDEX_SUFFIX)),
            s,
        )


class RemoteLogView:
    """A partition manifest as the log the cleaner's planning functions read."""

    def __init__(
        self,
        m: PartitionManifest,
        overrides: Mapping[str, str],
        broker_config: Mapping[str, str] | None = None,
    ):
        self.topic, self.partition = m.topic, m.partition
        self.name = f"{m.topic}-{m.partition}"
        self.config = TopicConfig(
            cleaner_configs(overrides), BrokerDefaults.of(dict(broker_config or {}))
        )
        self.uncleanable_reason: str | None = None
        segments = [RemoteSegmentView.of(s) for s in m.segments]
        active = RemoteSegmentView(m.end_offset, 0, -1, _IndexSize(0), _IndexSize(0))
        self._segments = [*segments, active]
        first = segments[0].base_offset if segments else m.end_offset
        self.log_start_offset = max(m.log_start_offset, first)
        self.log_end_offset = self.last_stable_offset = m.end_offset

    def segments_snapshot(self) -> list[RemoteSegmentView]:
        return list(self._segments)

    def segment_kwargs(self) -> dict:
        """The index settings of a cleaned segment, by the log's own rule."""
        return LocalLog.segment_kwargs(self)  # type: ignore[arg-type]


HeaderReader = Callable[[list[RemoteSegment]], Iterable[Header]]


def driver_headers(segments: RemoteStorageManager) -> HeaderReader:
    """The producer batches' headers of some segments, fetched by the driver itself."""

    def read(remote: list[RemoteSegment]) -> Iterator[Header]:
        for s in remote:
            for b in iter_batches(segments.fetch_file(s, LOG_SUFFIX)):
                if b.header.producer_id > NO_PRODUCER_ID:
                    yield b.header

    return read


def last_records(
    segments: RemoteStorageManager,
    m: PartitionManifest,
    now: int,
    read_headers: HeaderReader | None = None,
) -> dict[int, LastRecord]:
    """The active producers' last batches (Kafka's ``lastRecordsOfActiveProducers``) at
    the remote end, as a log opened there builds them (Kafka's
    ``LogLoader.rebuildProducerState``, :meth:`ProducerStateManager.load_entries`): the
    newest readable snapshot among the segments' (each at its segment's end; a corrupt
    one is skipped for the next older, as ``load_latest`` does), then the producer
    batches of the segments after it, read by ``read_headers`` (the driver's own
    fetch unless given) only when there are any."""
    start, entries = 0, []
    for s in reversed(m.segments):
        if SNAPSHOT_SUFFIX not in s.files:
            continue
        try:
            start, entries = s.last_offset + 1, decode(segments.fetch_file(s, SNAPSHOT_SUFFIX))
            break
        except CorruptSnapshotError as exc:
            log.warning("%s-%d: skipping remote producer snapshot: %s", m.topic, m.partition, exc)
    above = [s for s in m.segments if s.last_offset >= start]
    headers = (read_headers or driver_headers(segments))(above) if above else ()
    state = ProducerStateManager()
    state.load_entries(entries, headers, start, now)
    return state.last_records_of_active_producers(now)


def aborted_transactions(segments: RemoteStorageManager, m: PartitionManifest) -> list[AbortedTxn]:
    """Every aborted transaction of the remote range, from its tiered ``.txnindex``
    files (Kafka's ``collectAbortedTransactions`` over the whole log)."""
    out: list[AbortedTxn] = []
    for s in m.segments:
        if TXNINDEX_SUFFIX in s.files:
            out += parse_entries(segments.fetch_file(s, TXNINDEX_SUFFIX))
    return sorted(out, key=lambda t: t.first_offset)


@dataclass
class GroupPlan:
    """One segment group of the remote range: the remote segments one rewrite reads
    (and the cleaned segment replaces), in order, and the offset the group ends at."""

    index: int
    segments: list[RemoteSegment]
    end: int

    @property
    def bases(self) -> list[int]:
        return [file_base_offset(s.files[LOG_SUFFIX].key) for s in self.segments]


@dataclass
class RemotePlan:
    """What the executors need to clean a remote range, and the clean point it reaches."""

    topic: str
    partition: int
    groups: list[GroupPlan]
    start: int  # first offset rewritten: the first segment's base
    first_dirty: int
    end: int  # first uncleanable offset: the key map's range ends there
    ctx: RoundContext
    seg_kwargs: dict
    aborted: list[AbortedTxn] = field(default_factory=list)  # of [start, end)
    txn_aborted: list[AbortedTxn] = field(default_factory=list)  # the transaction pass's

    @property
    def clean_point(self) -> int:
        return self.end


def plan(
    segments: RemoteStorageManager,
    m: PartitionManifest,
    overrides: Mapping[str, str],
    broker_config: Mapping[str, str] | None,
    now: int,
    force: bool,
    check_done: Callable[[], None] = lambda: None,
    read_headers: HeaderReader | None = None,
) -> RemotePlan | None:
    """The plan of a clean of ``m``'s remote range now (None: not eligible, or nothing
    to rewrite), by the cleaner's rules: the manifest's clean point is the checkpoint,
    the round reaches the first uncleanable offset (one pass: the Spark engine's
    dedup has no size limit, as in :class:`kompakt.pipeline.engine.SparkEngine`)."""
    view = RemoteLogView(m, overrides, broker_config)
    checkpoint = m.clean_point if m.clean_point > view.log_start_offset else None
    ltc = cleanable.log_to_clean(view, checkpoint, now)  # type: ignore[arg-type]
    if not cleanable.is_eligible(ltc, force=force):
        return None
    producers = ProducerSummary(
        last_records(segments, m, now, read_headers), aborted_transactions(segments, m)
    )
    job = CleanJob(
        ltc,
        view.segments_snapshot(),  # type: ignore[arg-type]
        view.log_start_offset,
        producers,
        now,
        False,
        check_done,
    )
    end = ltc.first_uncleanable_offset
    groups = job.groups_to(end)
    if not groups:
        return None
    # from the first segment's base, not the log start inside it: Kafka's cleanSegments
    # judges every record of the segment, those below the log start too (the key map
    # supersedes them like any other)
    start = groups[0][0].base_offset
    return RemotePlan(
        m.topic,
        m.partition,
        [
            GroupPlan(i, [s.remote for s in g], g[-1].next_offset)  # type: ignore[attr-defined]
            for i, g in enumerate(groups)
        ],
        start,
        ltc.first_dirty_offset,
        end,
        job.round_context(end),
        view.segment_kwargs(),
        producers.aborted_between(start, end),
        producers.aborted_between(start, groups[-1][-1].next_offset),
    )
