"""Producer-state snapshots: Kafka's ``<20-digit offset>.snapshot`` files.

Kafka's ``ProducerStateManager`` writes the idempotent/transactional producers' state of
a partition to a snapshot file when a segment rolls (``LocalLog.roll`` ->
``takeSnapshot``) and at a clean shutdown, and reads the latest one at load, replaying
only the batches after it. Retention and the cleaner may have removed the batches the
state was built from; the snapshot still has it, so a producer retrying its last batch
after a restart is answered as a duplicate rather than appended twice (KIP-360).

The snapshot named ``N`` holds the state built from every batch below offset ``N``.
The log layer owns the files (naming, writing, the ones to keep); what goes into them is
its owner's (:mod:`kompakt.log.producer_state`).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c

from kompakt.errors import KompaktError
from kompakt.log.checkpoint import fsync_dir
from kompakt.log.segment import filename_prefix

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
"""Kafka's ``LogFileUtils.PRODUCER_SNAPSHOT_FILE_SUFFIX``."""

PRODUCER_SNAPSHOT_VERSION = 1
"""Kafka's ``ProducerStateManager.PRODUCER_SNAPSHOT_VERSION``."""

NO_OFFSET = -1
"""An entry without a data batch (only a marker) or without an open transaction."""

_HEAD = struct.Struct(">hIi")  # version int16, crc uint32, entry count int32
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_END = 6  # the CRC covers everything after version and crc (PRODUCER_ENTRIES_OFFSET)


class CorruptSnapshotError(KompaktError):
    """A snapshot that fails its CRC, its version or its framing (Kafka's
    ``CorruptSnapshotException``): the caller ignores it and rebuilds from the log."""


@dataclass(frozen=True)
class SnapshotEntry:
    """One producer, as Kafka's ``PRODUCER_SNAPSHOT_ENTRY_SCHEMA`` holds it: only the
    last batch's metadata (``ProducerStateEntry.lastSeq``, ``lastDataOffset``,
    ``lastOffsetDelta``, ``lastTimestamp``)."""

    producer_id: int
    epoch: int
    last_sequence: int  # -1: no data batch
    last_offset: int  # NO_OFFSET: no data batch
    offset_delta: int  # last_sequence - first sequence of that batch
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET


def encode(entries: list[SnapshotEntry]) -> bytes:
    """The file's bytes (Kafka's ``ProducerStateManager.writeSnapshot``)."""
    body = bytearray(_HEAD.size + _ENTRY.size * len(entries))
    _HEAD.pack_into(body, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(entries))
    pos = _HEAD.size
    for e in entries:
        _ENTRY.pack_into(
            body,
            pos,
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        pos += _ENTRY.size
    struct.pack_into(">I", body, 2, _crc32c.crc32c(bytes(body[_CRC_END:])))
    return bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    """The entries of a snapshot file (Kafka's ``ProducerStateManager.readSnapshot``);
    raises :class:`CorruptSnapshotError`."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    computed = _crc32c.crc32c(bytes(data[_CRC_END:]))
    if crc != computed:
        raise CorruptSnapshotError(
            f"snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
            f"Computed crc: {computed}"
        )
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)
    ]


class ProducerSnapshotFile:
    """``<20-digit offset>.snapshot`` in a partition dir (Kafka's ``SnapshotFile``).

    Layout (big-endian, Kafka's ``PID_SNAPSHOT_MAP_SCHEMA``, version 1)::

        version            int16   1
        crc                uint32  CRC32C of every byte after this field
        entry count        int32
        entries, each 50 bytes:
          producer_id      int64
          epoch            int16
          last_sequence    int32
          last_offset      int64   -1: the producer's last entry is a marker
          offset_delta     int32   last_sequence - first sequence of the last batch
          timestamp        int64   max timestamp of the last batch
          coordinator_epoch int32
          current_txn_first_offset int64   -1: no open transaction

    Written to ``<name>.tmp``, fsynced, renamed, dir fsynced: a crash leaves the old
    set of snapshots or the new one (the loader removes a stray ``.tmp``)."""

    def __init__(self, directory: Path | str, offset: int):
        self.offset = offset
        self.path = Path(directory) / f"{filename_prefix(offset)}{SNAPSHOT_SUFFIX}"

    def write(self, entries: list[SnapshotEntry]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode(entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def read(self) -> list[SnapshotEntry]:
        return decode(self.path.read_bytes())

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"ProducerSnapshotFile({self.path})"


def snapshot_offset(name: str) -> int | None:
    """The offset if ``name`` is a snapshot file (digits + ``.snapshot``), else None."""
    stem, _dot, ext = name.partition(".")
    return int(stem) if "." + ext == SNAPSHOT_SUFFIX and stem.isdigit() else None


def list_snapshots(directory: Path | str) -> list[ProducerSnapshotFile]:
    """The snapshot files of a partition dir, oldest first (Kafka's
    ``listSnapshotFiles``)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    offsets = sorted(o for o in map(snapshot_offset, names) if o is not None)
    return [ProducerSnapshotFile(directory, o) for o in offsets]


def load_latest(
    directory: Path | str, upto: int, delete_corrupt: bool = True
) -> tuple[int, list[SnapshotEntry]] | None:
    """The latest readable snapshot at or below ``upto`` (the log end offset) as
    ``(offset, entries)``; a corrupt one is logged and deleted (kept by a read-only
    open: ``delete_corrupt`` off) and the next older one tried (Kafka's
    ``loadFromSnapshot``); None when none is left."""
    for snap in reversed(list_snapshots(directory)):
        if snap.offset > upto:
            continue
        try:
            return snap.offset, snap.read()
        except CorruptSnapshotError as exc:
            log.warning("failed to load producer snapshot from %s: %s", snap.path, exc)
            if delete_corrupt:
                snap.delete()
        except FileNotFoundError:
            continue
    return None


def delete_snapshots_before(directory: Path | str, offset: int) -> None:
    """Remove the snapshots below ``offset`` (the log start offset) but the newest one
    (Kafka's ``deleteSnapshotsBefore``; ``removeStraySnapshots`` keeps the latest)."""
    snaps = list_snapshots(directory)
    for snap in snaps[:-1]:
        if snap.offset < offset:
            snap.delete()


def delete_snapshots_at(directory: Path | str, offsets: list[int]) -> None:
    """Remove the snapshots at ``offsets`` (the base offsets of segments a clean merged
    away) but the newest one (Kafka's ``deleteProducerSnapshots`` in
    ``UnifiedLog.replaceSegments``); a clean never rewrites a snapshot."""
    doomed = set(offsets)
    snaps = list_snapshots(directory)
    for snap in snaps[:-1]:
        if snap.offset in doomed:
            snap.delete()


def delete_snapshots_above(directory: Path | str, offset: int) -> None:
    """Remove the snapshots past ``offset`` (the log end after truncation): they
    describe batches the log no longer has (Kafka's ``truncateAndReload``)."""
    for snap in list_snapshots(directory):
        if snap.offset > offset:
            snap.delete()
