"""A request fuzzer built from kio's request schemas.

For every API key the broker advertises it fills kio request dataclasses with random
values of each field's Kafka type (ints at and beyond the edges, hostile topic names,
valid and broken record batches, arrays of random length), encodes them, and sometimes
rewrites one length/count field of an otherwise valid frame to a huge value (a
declared array of 2^31-1 elements in a 60-byte request must not make the broker
allocate). Versions just outside the advertised range and kio versions with no schema
are sent too. Importable as ``reliability.fuzz_kit``.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from reliability.wire_kit import HOSTILE_NAMES, header_bytes, recv_frame

from kompakt.record.encode import build_simple_batch

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "timedelta_i32": (-(2**31), 2**31 - 1),
    "timedelta_i64": (-(2**40), 2**40),
}


def _flexible(req_cls: type) -> bool:
    """Flexible versions use request header v2 (compact strings and arrays)."""
    return "v2" in req_cls.__header_schema__.__module__


@dataclass
class FuzzStats:
    sent: int = 0
    answered: int = 0
    closed: int = 0
    timeouts: int = 0
    encode_skipped: int = 0
    by_api: dict[int, int] = field(default_factory=dict)


class RequestFuzzer:
    """Random requests for the (api_key, min, max) triples a broker advertises."""

    def __init__(self, seed: int, apis: list[tuple[int, int, int]], topics: list[str]):
        self.rnd = random.Random(seed)
        self.apis = apis
        self.topics = topics
        now = int(time.time() * 1000)
        self.batches = [
            build_simple_batch([(b"k", b"v")], timestamp=now),
            build_simple_batch([(None, b"v")], timestamp=now),
            build_simple_batch([(b"k%d" % i, b"x" * i) for i in range(20)], timestamp=now),
        ]

    # -- values ---------------------------------------------------------------------------
    def _int(self, kind: str) -> int:
        lo, hi = INT_RANGES[kind]
        r = self.rnd.random()
        if r < 0.35:
            return self.rnd.choice([0, 1, -1, 2, 3, lo, hi, lo + 1, hi - 1])
        if r < 0.7:
            return self.rnd.randint(max(lo, -5), min(hi, 100))
        return self.rnd.randint(lo, hi)

    def _string(self) -> str:
        r = self.rnd.random()
        if r < 0.3:
            return self.rnd.choice(self.topics)
        if r < 0.55:
            return self.rnd.choice(HOSTILE_NAMES)
        if r < 0.65:
            return self.rnd.choice(["cleanup.policy", "segment.bytes", "retention.ms", "1"])
        if r < 0.75:
            return "".join(chr(self.rnd.randint(1, 0x2FFF)) for _ in range(self.rnd.randint(0, 9)))
        if r < 0.8:
            return "z" * self.rnd.choice([249, 250, 1000, 30000])
        return "".join(self.rnd.choice("abc.-_/") for _ in range(self.rnd.randint(0, 12)))

    def _bytes(self, records: bool) -> bytes:
        r = self.rnd.random()
        if records and r < 0.5:
            b = bytearray(self.rnd.choice(self.batches))
            if self.rnd.random() < 0.5 and b:
                i = self.rnd.randrange(len(b))
                b[i] ^= 1 << self.rnd.randrange(8)
            if self.rnd.random() < 0.2:
                b = b[: self.rnd.randrange(len(b) + 1)]
            return bytes(b)
        if r < 0.7:
            return b""
        return self.rnd.randbytes(self.rnd.randint(0, 200))

    def _scalar(self, kind: str) -> Any:
        if kind in ("int8", "int16", "int32", "int64", "uint16"):
            return self._int(kind)
        if kind in ("timedelta_i32", "timedelta_i64"):
            return datetime.timedelta(milliseconds=self._int(kind))
        if kind == "string":
            return self._string()
        if kind in ("bytes", "records"):
            return self._bytes(kind == "records")
        if kind == "bool":
            return self.rnd.random() < 0.5
        if kind == "uuid":
            return self.rnd.choice([uuid.UUID(int=0), uuid.uuid4(), uuid.UUID(int=1)])
        if kind == "float64":
            return self.rnd.choice([0.0, -1.0, 1e308, float("nan"), 0.5])
        if kind == "error_code":
            return self.rnd.choice(list(ErrorCode))
        raise ValueError(f"no generator for {kind}")

    def _count(self) -> int:
        r = self.rnd.random()
        if r < 0.2:
            return 0
        if r < 0.9:
            return self.rnd.randint(1, 3)
        return self.rnd.randint(4, 40)

    def entity(self, cls: type, depth: int = 0) -> Any:
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            c = classify_field(f)
            kind = f.metadata.get("kafka_type", "")
            optional = is_optional(f)
            if optional and self.rnd.random() < 0.15:
                kwargs[f.name] = None
            elif isinstance(c, EntityTupleField):
                n = self._count() if depth < 3 else 0
                kwargs[f.name] = tuple(self.entity(c.type_, depth + 1) for _ in range(n))
            elif isinstance(c, EntityField):
                kwargs[f.name] = self.entity(c.type_, depth + 1)
            elif f.name in ("num_partitions", "count") and kind == "int32":
                # partition counts: small (real work) or far beyond the per-request cap
                kwargs[f.name] = self.rnd.choice([-2, -1, 0, 1, 3, 20_000, 2**31 - 1])
            elif isinstance(c, PrimitiveTupleField):
                kwargs[f.name] = tuple(self._scalar(kind) for _ in range(self._count()))
            else:
                kwargs[f.name] = self._scalar(kind)
        return cls(**kwargs)

    # -- frames ---------------------------------------------------------------------------
    def pick(self) -> tuple[int, int]:
        """(api_key, version): mostly advertised versions, sometimes one just outside,
        sometimes a key nobody serves."""
        key, lo, hi = self.rnd.choice(self.apis)
        r = self.rnd.random()
        if r < 0.85:
            return key, self.rnd.randint(lo, hi)
        if r < 0.95:
            return key, self.rnd.choice([lo - 1, hi + 1, hi + 7, -1, 32767])
        return self.rnd.choice([99, 1000, -1, 32767]), self.rnd.randint(0, 20)

    def frame(self, corr: int) -> tuple[int, int, bytes]:
        api, version = self.pick()
        try:
            req_cls = load_request_schema(api, version)
        except Exception:
            req_cls = None
        if req_cls is None:
            # no schema: a v2-style header and random body bytes
            hdr = struct.pack(">hhih", api, version, corr, 3) + b"fzz" + b"\x00"
            body = hdr + self.rnd.randbytes(self.rnd.randint(0, 64))
            return api, version, struct.pack(">i", len(body)) + body
        entity = self.entity(req_cls)
        buf = io.BytesIO()
        buf.write(header_bytes(api, version, corr, client_id=self.rnd.choice(["fz", None, ""])))
        entity_writer(req_cls)(buf, entity)
        data = bytearray(buf.getvalue())
        if self.rnd.random() < 0.3:
            self._mutate(data)
        return api, version, struct.pack(">i", len(data)) + bytes(data)

    def _mutate(self, data: bytearray) -> None:
        """Overwrite a few bytes with a huge length/count, or flip bits (framing stays)."""
        if len(data) < 9:
            return
        i = self.rnd.randrange(8, len(data))
        patch = self.rnd.choice(
            [
                b"\x7f\xff\xff\xff",  # int32 count/length 2^31-1
                b"\xff\xff\xff\xff\x07",  # uvarint 2^31-1 (compact arrays and strings)
                b"\xff\xff\xff\xff\x0f",  # uvarint 2^32-1
                b"\x7f\xff",  # int16 string length
                b"\xff\xff\xff\xfe",  # -2 as int32
                bytes([self.rnd.getrandbits(8)]),
            ]
        )
        data[i : i + len(patch)] = patch


def huge_count_frames(apis: list[tuple[int, int, int]], topic: str) -> list[tuple[str, bytes]]:
    """For every advertised (api, version), a valid request whose first top-level array
    (or string/bytes) field declares 2^31-1 elements but carries none: found by encoding
    the field empty and with one element and diffing the two frames."""
    out = []
    for key, lo, hi in apis:
        for version in range(lo, hi + 1):
            try:
                req_cls = load_request_schema(key, version)
            except Exception:
                continue
            flexible = _flexible(req_cls)
            for f in dataclasses.fields(req_cls):
                c = classify_field(f)
                kind = f.metadata.get("kafka_type", "")
                if isinstance(c, EntityTupleField):
                    pair = ((), (_zero_entity(c.type_),))
                elif isinstance(c, PrimitiveTupleField):
                    pair = ((), (_zero_scalar(kind),))
                elif kind == "string":
                    pair = ("", "a")
                elif kind in ("bytes", "records"):
                    pair = (b"", b"a")
                else:
                    continue
                a = _encode_with(req_cls, key, version, f.name, pair[0], topic)
                b = _encode_with(req_cls, key, version, f.name, pair[1], topic)
                if a is None or b is None:
                    continue
                a, b = a[4:], b[4:]  # the size prefixes differ too
                d = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
                if d is None:
                    continue
                if flexible:  # uvarint N+1: one byte for 0 elements
                    frame = a[:d] + b"\xff\xff\xff\xff\x07" + a[d + 1 :]
                elif kind == "string":  # int16 length
                    frame = a[: d - 1] + b"\x7f\xff" + a[d + 1 :]
                else:  # int32 length/count
                    frame = a[: d - 3] + b"\x7f\xff\xff\xff" + a[d + 1 :]
                out.append(
                    (f"api {key} v{version} {f.name}", struct.pack(">i", len(frame)) + frame)
                )
                break
    return out


def _zero_scalar(kind: str) -> Any:
    return {"string": "", "uuid": uuid.UUID(int=0), "bytes": b"", "bool": False}.get(kind, 0)


def _zero_entity(cls: type) -> Any:
    from kompakt.broker.protocol import build

    return build(cls, {})


def _encode_with(
    req_cls: type, key: int, version: int, name: str, value: Any, topic: str
) -> bytes | None:
    from kompakt.broker.protocol import build

    try:
        entity = build(req_cls, {})
        entity = dataclasses.replace(entity, **{name: value})
        buf = io.BytesIO()
        buf.write(header_bytes(key, version, 7))
        entity_writer(req_cls)(buf, entity)
    except Exception:
        return None
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


class Sender:
    """One connection at a time; a closed or silent connection is replaced."""

    def __init__(self, port: int, timeout: float = 0.5):
        self.port = port
        self.timeout = timeout
        self.sock: socket.socket | None = None

    def _conn(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            self.sock.settimeout(self.timeout)
        return self.sock

    def reset(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def send(self, frame: bytes) -> str:
        """'answered', 'closed' or 'timeout' (acks=0 produce, a long-poll fetch)."""
        try:
            s = self._conn()
            s.sendall(frame)
            got = recv_frame(s)
        except TimeoutError:
            self.reset()
            return "timeout"
        except OSError:
            self.reset()
            return "closed"
        if got is None:
            self.reset()
            return "closed"
        return "answered"


def run_fuzz(
    port: int,
    apis: list[tuple[int, int, int]],
    topics: list[str],
    seed: int,
    seconds: float,
    on_tick: Callable[[FuzzStats], None] | None = None,
) -> FuzzStats:
    """Send random requests for ``seconds``; returns what happened to them."""
    fz = RequestFuzzer(seed, apis, topics)
    sender = Sender(port)
    stats = FuzzStats()
    deadline = time.monotonic() + seconds
    corr = 0
    while time.monotonic() < deadline:
        corr += 1
        try:
            api, _version, frame = fz.frame(corr)
        except Exception:  # kio refused to encode this combination of values
            stats.encode_skipped += 1
            continue
        stats.sent += 1
        stats.by_api[api] = stats.by_api.get(api, 0) + 1
        outcome = sender.send(frame)
        if outcome == "answered":
            stats.answered += 1
        elif outcome == "closed":
            stats.closed += 1
        else:
            stats.timeouts += 1
        if on_tick is not None and corr % 200 == 0:
            on_tick(stats)
    sender.reset()
    return stats
