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

# Record versions (Kafka's generated OffsetCommitKey/Value, GroupMetadataKey/Value).
OFFSET_KEY_VERSIONS = (0, 1)
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_WITH_EXPIRY = 1
"""The only offset value version that carries an expire timestamp."""
OFFSET_VALUE_WITH_EPOCH = 3
"""The first offset value version with the leader epoch; the one we write by default."""
GROUP_VALUE_VERSION = 3
GROUP_VALUE_WITH_REBALANCE_TIMEOUT = 1
GROUP_VALUE_WITH_STATE_TIMESTAMP = 2
GROUP_VALUE_WITH_INSTANCE_ID = 3


NO_OFFSET = -1
"""OffsetFetch's committed offset when there is none (Kafka's ``INVALID_OFFSET``)."""
NO_LEADER_EPOCH = -1
"""A leader epoch not given (Kafka's ``RecordBatch.NO_PARTITION_LEADER_EPOCH``)."""
NO_TIMESTAMP = -1
"""A timestamp not known (Kafka's ``RecordBatch.NO_TIMESTAMP``)."""
NULL_LENGTH = -1
"""The length field of a null string or null bytes."""


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp: int = NO_TIMESTAMP
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
        """A string; a null one (length -1) reads as ""."""
        return self.nullable_string() or ""

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def nullable_bytes(self) -> bytes:
        """Bytes with an int32 length; null (-1) reads as b""."""
        n = self.i32()
        if n < 0:
            return b""
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(b)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_KEY_VERSION) + _str(group) + _str(topic) + _I32.pack(partition)


def offset_value(om: OffsetAndMetadata) -> bytes:
    if om.expire_timestamp is not None:
        return (
            _I16.pack(OFFSET_VALUE_WITH_EXPIRY)
            + _I64.pack(om.offset)
            + _str(om.metadata or "")
            + _I64.pack(om.commit_timestamp)
            + _I64.pack(om.expire_timestamp)
        )
    return (
        _I16.pack(OFFSET_VALUE_WITH_EPOCH)
        + _I64.pack(om.offset)
        + _I32.pack(om.leader_epoch)
        + _str(om.metadata or "")
        + _I64.pack(om.commit_timestamp)
    )


def parse_key(key: bytes) -> tuple[str, tuple] | None:
    """("offset", (group, topic, partition)) or ("group", (group,)) or None if unknown."""
    r = _Reader(key)
    version = r.i16()
    if version in OFFSET_KEY_VERSIONS:
        return "offset", (r.string(), r.string(), r.i32())
    if version == GROUP_KEY_VERSION:
        return "group", (r.string(),)
    return None


def parse_offset_value(value: bytes) -> OffsetAndMetadata:
    r = _Reader(value)
    version = r.i16()
    offset = r.i64()
    epoch = NO_LEADER_EPOCH
    if version >= OFFSET_VALUE_WITH_EPOCH:
        epoch = r.i32()
    metadata = r.string()
    ts = r.i64()
    expire = r.i64() if version == OFFSET_VALUE_WITH_EXPIRY else None
    return OffsetAndMetadata(offset, epoch, metadata, ts, expire)


def subscription_topics(metadata: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription, read as v0 (the prefix of every version,
    as Kafka's ``ClassicGroup.computeSubscribedTopics`` does). Raises on bad bytes."""
    r = _Reader(metadata)
    r.i16()  # the subscription's version: v0's layout is a prefix of every later one
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
    return _I16.pack(NULL_LENGTH) if s is None else _str(s)


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def group_key(group: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _str(group)


def group_value(v: GroupMetadataValue) -> bytes:
    out = [
        _I16.pack(GROUP_VALUE_VERSION),
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
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    ts = r.i64() if version >= GROUP_VALUE_WITH_STATE_TIMESTAMP else NO_TIMESTAMP
    members = []
    for _ in range(r.i32()):
        mid = r.string()
        iid = r.nullable_string() if version >= GROUP_VALUE_WITH_INSTANCE_ID else None
        cid = r.string()
        host = r.string()
        rb = r.i32() if version >= GROUP_VALUE_WITH_REBALANCE_TIMEOUT else 0
        sess = r.i32()
        members.append((mid, iid, cid, host, rb, sess, r.nullable_bytes(), r.nullable_bytes()))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))
