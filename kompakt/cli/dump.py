"""``kompakt dump``: print segment files like Kafka's ``kafka-dump-log.sh``.

Works on files directly (no data dir lock, nothing is modified). ``.log`` files are read
batch by batch from the raw bytes: a batch whose CRC fails is printed with
``crcValid: false``; a batch whose framing is broken (impossible length, cut off) ends
that file with an error line giving its position. ``.index``, ``.timeindex`` and
``.txnindex`` files print their entries (a ``.txnindex`` entry as Kafka's tool prints an
``AbortedTxn``: version, producerId, firstOffset, lastOffset, lastStableOffset), and a
producer-state ``.snapshot`` its producers (as Kafka's ``dumpProducerIdSnapshot``). Any
error makes the command exit 1 after printing everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kompakt.errors import CorruptRecordError

from .common import emit, emit_json, print_error, text

if TYPE_CHECKING:  # the record and log layers load when a file is dumped, not at start
    from kompakt.record.decode import RecordBatch


@dataclass
class FileDump:
    file: str
    type: str
    base_offset: int | None = None
    batches: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, int]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)


def _base_offset(path: Path) -> int | None:
    from kompakt.log.segment import offset_from_name

    try:
        return offset_from_name(path.name)
    except ValueError:
        return None


def batch_info(batch: RecordBatch, deep: bool) -> tuple[dict[str, Any], str | None]:
    """A batch's header fields (and records when ``deep``); second item: a record error."""
    from kompakt.record import codecs
    from kompakt.record.header import CONTROL_COMMIT, CONTROL_KEY, MAGIC, TIMESTAMP_TYPE_BIT

    h = batch.header
    crc_valid = h.magic == MAGIC and batch.compute_crc() == h.crc
    info: dict[str, Any] = {
        "baseOffset": h.base_offset,
        "lastOffset": h.last_offset,
        "count": h.record_count,
        "position": batch.position,
        "size": h.size,
        "magic": h.magic,
        "codec": codecs.NAMES.get(h.compression, f"unknown({h.compression})"),
        "crc": h.crc,
        "crcValid": crc_valid,
        "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch,
        "baseSequence": h.base_sequence,
        "partitionLeaderEpoch": h.partition_leader_epoch,
        "isTransactional": h.is_transactional,
        "isControl": h.is_control,
        "timestampType": "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_BIT else "CreateTime",
        "maxTimestamp": h.max_timestamp,
    }
    if h.has_delete_horizon:
        info["deleteHorizon"] = h.delete_horizon
    if not deep:
        return info, None
    records: list[dict[str, Any]] = []
    info["records"] = records
    try:
        for r in batch.records():
            rec: dict[str, Any] = {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "keySize": -1 if r.key is None else len(r.key),
                "valueSize": -1 if r.value is None else len(r.value),
                "key": text(r.key),
                "value": text(r.value),
                "headers": [{"key": k, "value": text(v)} for k, v in r.headers],
            }
            if h.is_control and r.key is not None and len(r.key) >= CONTROL_KEY.size:
                _version, ctype = CONTROL_KEY.unpack_from(r.key)
                rec["controlType"] = "COMMIT" if ctype == CONTROL_COMMIT else "ABORT"
            records.append(rec)
    except CorruptRecordError as exc:
        return info, f"cannot decode records of batch at position {batch.position}: {exc}"
    return info, None


def dump_log(path: Path, deep: bool) -> FileDump:
    from kompakt.log.syncs import is_written_ahead
    from kompakt.record.decode import RecordBatch
    from kompakt.record.header import HEADER_SIZE, LOG_OVERHEAD, batch_size, read_header

    out = FileDump(str(path), "log", _base_offset(path))
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        if len(data) - pos < LOG_OVERHEAD:
            out.errors.append(
                {"position": pos, "error": f"{len(data) - pos} trailing bytes, not a batch"}
            )
            break
        length = batch_size(data, pos) - LOG_OVERHEAD
        if length == 0 and is_written_ahead(data[pos:]):
            break  # zeros a live or crashed segment was written ahead with: no batch
        if length < HEADER_SIZE - LOG_OVERHEAD:
            out.errors.append(
                {"position": pos, "error": f"corrupt batch: length {length} is impossible"}
            )
            break
        size = length + LOG_OVERHEAD
        if pos + size > len(data):
            out.errors.append(
                {
                    "position": pos,
                    "error": f"truncated batch: {size} bytes needed, {len(data) - pos} left",
                }
            )
            break
        view = memoryview(data)[pos : pos + size]
        batch = RecordBatch(read_header(view), view, pos)
        info, err = batch_info(batch, deep)
        out.batches.append(info)
        if not info["crcValid"]:
            out.errors.append(
                {"position": pos, "error": f"CRC mismatch in batch at offset {info['baseOffset']}"}
            )
        if err:
            out.errors.append({"position": pos, "error": err})
        pos += size
    return out


def dump_index(path: Path, kind: str) -> FileDump:
    """Entries of an ``.index`` or ``.timeindex`` file (zero-filled preallocation ignored)."""
    from kompakt.log.offset_index import OffsetIndex
    from kompakt.log.time_index import TimeIndex

    out = FileDump(str(path), kind, _base_offset(path))
    base = out.base_offset or 0
    cls = OffsetIndex if kind == "index" else TimeIndex
    data = path.read_bytes()
    n = len(data) // cls.ENTRY_SIZE
    raw = [cls._ENTRY.unpack_from(data, i * cls.ENTRY_SIZE) for i in range(n)]
    while raw and raw[-1] == (0, 0) and (kind == "timeindex" or len(raw) > 1):
        raw.pop()
    if len(raw) == 1 and raw[0] == (0, 0) and kind == "index" and n > 1:
        raw.pop()
    if len(data) % cls.ENTRY_SIZE:
        out.errors.append(
            {"position": n * cls.ENTRY_SIZE, "error": "file size is not a whole number of entries"}
        )
    last = None
    for i, entry in enumerate(raw):
        if kind == "index":
            rel, position = entry
            out.entries.append({"offset": base + rel, "position": position})
            key = rel
        else:
            ts, rel = entry
            out.entries.append({"timestamp": ts, "offset": base + rel})
            key = rel
        if last is not None and key < last:
            out.errors.append(
                {"position": i * cls.ENTRY_SIZE, "error": f"entry {i} goes backwards"}
            )
        last = key
    return out


def dump_txn_index(path: Path) -> FileDump:
    """Entries of a ``.txnindex`` (Kafka's ``AbortedTxn``, 34 bytes each); a torn tail
    or an unknown version is an error after the whole entries."""
    from kompakt.log.txn_index import ENTRY, ENTRY_SIZE

    out = FileDump(str(path), "txnindex", _base_offset(path))
    data = path.read_bytes()
    n = len(data) // ENTRY_SIZE
    for i in range(n):
        version, pid, first, last, lso = ENTRY.unpack_from(data, i * ENTRY_SIZE)
        out.entries.append(
            {
                "version": version,
                "producerId": pid,
                "firstOffset": first,
                "lastOffset": last,
                "lastStableOffset": lso,
            }
        )
        if version != 0:
            out.errors.append({"position": i * ENTRY_SIZE, "error": f"unknown version {version}"})
    if len(data) % ENTRY_SIZE:
        out.errors.append(
            {"position": n * ENTRY_SIZE, "error": "file size is not a whole number of entries"}
        )
    return out


def dump_producer_snapshot(path: Path) -> FileDump:
    """The producers of a ``.snapshot`` (Kafka's ``DumpLogSegments.dumpProducerIdSnapshot``:
    the entry, then its last batch when it has one); a corrupt file is one error."""
    from kompakt.log.producer_snapshot import CorruptSnapshotError, decode

    out = FileDump(str(path), "snapshot", _base_offset(path))
    try:
        entries = decode(path.read_bytes())
    except CorruptSnapshotError as exc:
        out.errors.append({"position": None, "error": str(exc)})
        return out
    for e in entries:
        row = {
            "producerId": e.producer_id,
            "producerEpoch": e.epoch,
            "coordinatorEpoch": e.coordinator_epoch,
            "currentTxnFirstOffset": e.current_txn_first_offset,
            "lastTimestamp": e.timestamp,
        }
        if e.last_offset >= 0:
            first = e.last_sequence - e.offset_delta
            row.update(
                firstSequence=first if first >= 0 else first + 2**31,
                lastSequence=e.last_sequence,
                lastOffset=e.last_offset,
                offsetDelta=e.offset_delta,
                timestamp=e.timestamp,
            )
        out.entries.append(row)
    return out


def dump_file(path: Path, deep: bool) -> FileDump:
    name = path.name
    if name.endswith(".snapshot"):
        return dump_producer_snapshot(path)
    if name.endswith(".txnindex"):
        return dump_txn_index(path)
    if name.endswith(".log"):
        return dump_log(path, deep)
    if name.endswith(".timeindex"):
        return dump_index(path, "timeindex")
    if name.endswith(".index"):
        return dump_index(path, "index")
    out = FileDump(str(path), "unknown", None)
    out.errors.append(
        {
            "position": None,
            "error": "unsupported file type (use .log, .index, .timeindex, .txnindex or .snapshot)",
        }
    )
    return out


def _kv(d: dict[str, Any], keys: list[str]) -> str:
    return " ".join(f"{k}: {_fmt(d[k])}" for k in keys if k in d)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


BATCH_KEYS = [
    "baseOffset",
    "lastOffset",
    "count",
    "baseSequence",
    "producerId",
    "producerEpoch",
    "partitionLeaderEpoch",
    "isTransactional",
    "isControl",
    "deleteHorizon",
    "position",
    "timestampType",
    "maxTimestamp",
    "size",
    "magic",
    "codec",
    "crcValid",
]


def print_text(d: FileDump) -> None:
    emit(f"Dumping {d.file}")
    if d.type == "log" and d.base_offset is not None:
        emit(f"Log starting offset: {d.base_offset}")
    shown = set()
    for b in d.batches:
        emit(_kv(b, BATCH_KEYS))
        for r in b.get("records", []):
            line = f"| offset: {r['offset']} timestamp: {r['timestamp']}"
            line += f" keySize: {r['keySize']} valueSize: {r['valueSize']}"
            hkeys = ",".join(h["key"] for h in r["headers"])
            line += f" headerKeys: [{hkeys}]"
            if "controlType" in r:
                line += f" endTxnMarker: {r['controlType']}"
            else:
                line += f" key: {_show(r['key'])} payload: {_show(r['value'])}"
            emit(line)
    for e in d.entries:
        emit(" ".join(f"{k}: {v}" for k, v in e.items()))
    for e in d.errors:
        if (e["position"], e["error"]) in shown:
            continue
        shown.add((e["position"], e["error"]))
        where = f" at position {e['position']}" if e["position"] is not None else ""
        print_error(f"{d.file}{where}: {e['error']}")


def _show(s: str | None) -> str:
    return "null" if s is None else s.replace("\n", "\\n")


def dump(
    files: Annotated[
        list[Path], typer.Argument(help=".log, .index, .timeindex, .txnindex or .snapshot files.")
    ],
    deep: Annotated[
        bool, typer.Option("--deep", help="Also print every record of each batch.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help='One JSON document: {"files": [...]}.')
    ] = False,
) -> None:
    """Print segment files like kafka-dump-log.sh (batches, records, index entries).

    Exits 1 when a file cannot be read or holds a corrupt batch, after printing the rest.
    """
    dumps: list[FileDump] = []
    failed = False
    for path in files:
        try:
            d = dump_file(path, deep)
        except OSError as exc:
            d = FileDump(str(path), "unknown")
            d.errors.append({"position": None, "error": exc.strerror or str(exc)})
        dumps.append(d)
        failed = failed or bool(d.errors)
        if not json_out:
            print_text(d)
    if json_out:
        emit_json(
            {
                "files": [
                    {
                        "file": d.file,
                        "type": d.type,
                        "baseOffset": d.base_offset,
                        **({"batches": d.batches} if d.type == "log" else {}),
                        **(
                            {"entries": d.entries}
                            if d.type in ("index", "timeindex", "txnindex", "snapshot")
                            else {}
                        ),
                        "errors": d.errors,
                    }
                    for d in dumps
                ]
            }
        )
    if failed:
        raise typer.Exit(1)
