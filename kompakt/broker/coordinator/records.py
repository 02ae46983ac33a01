"""``__consumer_offsets`` record formats (Kafka's GroupCoordinatorRecordSerde, classic part).

Keys start with an int16 version: 0/1 = offset commit (group, topic, partition), 2 = group
metadata (group). Offset commit values: v0 (offset, metadata, commit ts), v1 (+ expire
ts), v2 (offset, metadata, commit ts), v3 (offset, leader epoch, metadata, commit ts).
We write key v1 and value v3, or value v1 when the commit carries an explicit expire
timestamp (OffsetCommit v2-v4 ``retention_time``), as Kafka does. A null value is a
tombstone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None
    """Set only by old clients' ``retention_time``: then it alone decides expiry (Kafka)."""


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


class _Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def i64(self) -> int:
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            return ""
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(1) + _str(group) + _str(topic) + _I32.pack(partition)


def offset_value(om: OffsetAndMetadata) -> bytes:
    if om.expire_timestamp is not None:  # v1 is the only version with an expire timestamp
        return (
            _I16.pack(1)
            + _I64.pack(om.offset)
            + _str(om.metadata or "")
            + _I64.pack(om.commit_timestamp)
            + _I64.pack(om.expire_timestamp)
        )
    return (
        _I16.pack(3)
        + _I64.pack(om.offset)
        + _I32.pack(om.leader_epoch)
        + _str(om.metadata or "")
        + _I64.pack(om.commit_timestamp)
    )


def parse_key(key: bytes) -> tuple[str, tuple] | None:
    """("offset", (group, topic, partition)) or ("group", (group,)) or None if unknown."""
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        return "offset", (r.string(), r.string(), r.i32())
    if version == 2:
        return "group", (r.string(),)
    return None


def parse_offset_value(value: bytes) -> OffsetAndMetadata:
    r = _Reader(value)
    version = r.i16()
    offset = r.i64()
    epoch = -1
    if version >= 3:
        epoch = r.i32()
    metadata = r.string()
    ts = r.i64()
    expire = r.i64() if version == 1 else None
    return OffsetAndMetadata(offset, epoch, metadata, ts, expire)


def subscription_topics(metadata: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription, read as v0 (the prefix of every version,
    as Kafka's ``ClassicGroup.computeSubscribedTopics`` does). Raises on bad bytes."""
    r = _Reader(metadata)
    r.i16()
    n = r.i32()
    if n < 0 or n * 2 > len(metadata):
        raise ValueError("bad subscription")
    topics = {r.string() for _ in range(n)}
    if r.pos > len(metadata):
        raise ValueError("truncated subscription")
    return topics


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    h = java_string_hash(group)
    return (0 if h == -(2**31) else abs(h)) % partitions


# -- group metadata (key version 2, value version 3) --------------------------------------


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[tuple, ...] = ()
    """(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
    subscription, assignment) per member."""


def _nstr(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else _str(s)


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def group_key(group: str) -> bytes:
    return _I16.pack(2) + _str(group)


def group_value(v: GroupMetadataValue) -> bytes:
    out = [
        _I16.pack(3),
        _str(v.protocol_type),
        _I32.pack(v.generation),
        _nstr(v.protocol),
        _nstr(v.leader),
        _I64.pack(v.state_timestamp),
        _I32.pack(len(v.members)),
    ]
    for mid, iid, cid, host, rb, sess, sub, asg in v.members:
        out += [
            _str(mid),
            _nstr(iid),
            _str(cid),
            _str(host),
            _I32.pack(rb),
            _I32.pack(sess),
            _bytes(sub),
            _bytes(asg),
        ]
    return b"".join(out)


def parse_group_value(value: bytes) -> GroupMetadataValue:
    r = _Reader(value)
    version = r.i16()

    def nstr() -> str | None:
        (n,) = _I16.unpack_from(r.buf, r.pos)
        if n < 0:
            r.pos += 2
            return None
        return r.string()

    def raw() -> bytes:
        n = r.i32()
        if n < 0:
            return b""
        b = r.buf[r.pos : r.pos + n]
        r.pos += n
        return bytes(b)

    protocol_type = r.string()
    generation = r.i32()
    protocol = nstr()
    leader = nstr()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        mid = r.string()
        iid = nstr() if version >= 3 else None
        cid = r.string()
        host = r.string()
        rb = r.i32() if version >= 1 else 0
        sess = r.i32()
        members.append((mid, iid, cid, host, rb, sess, raw(), raw()))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))
