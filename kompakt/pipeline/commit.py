"""Appending staged batch files to a topic, in whichever process owns the data dir.

Spark runs a writer's ``commit`` in a fresh Python worker, not in the process that
holds the data dir's ``.lock`` (a broker, or an application embedding kompakt). That
process calls :func:`attach_manager`, which serves a tiny request loop on a Linux
abstract Unix socket named after the data dir; ``commit`` sends it the staged files and
it appends them with its own :class:`LogManager`, so all appends to a partition still
go through one writer. With nobody attached, ``commit`` opens the data dir itself
(refused, with the lock error, if another process holds it). Requests are accepted only
from the same user and only for files inside the data dir's staging folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from kompakt import errors
from kompakt.log.manager import LogManager
from kompakt.record.decode import iter_batches

STAGING_DIR = ".kompakt-staging"
APPEND_SLICE = 4 << 20  # append staged batches a few MiB at a time

StagedFile = tuple[int, str]  # (partition, path)


def append_staged(manager: LogManager, topic: str, files: Sequence[StagedFile]) -> int:
    """Append staged files in the order given; returns the number of batches appended."""
    staging = (Path(manager.dir) / STAGING_DIR).resolve()
    count = 0
    for part, path in files:
        resolved = Path(path).resolve()
        if staging not in resolved.parents:
            raise errors.KompaktError(f"refusing to append {path}: not a staged file")
        plog = manager.get_log(topic, part)
        data = resolved.read_bytes()
        start = 0
        for b in iter_batches(data):
            count += 1
            end = b.position + b.header.size
            if end - start >= APPEND_SLICE:
                plog.append(data[start:end])
                start = end
        if start < len(data):
            plog.append(data[start:])
    return count


def _address(data_dir: str | os.PathLike) -> str:
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:32]
    return f"\0kompakt-commit-{digest}"


class CommitServer:
    """Serves append requests for one attached LogManager on a daemon thread."""

    def __init__(self, manager: LogManager):
        self.manager = manager
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(_address(manager.dir))
        self.sock.listen(8)
        self._thread = threading.Thread(target=self._serve, name="kompakt-commit", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    self._handle(conn)
                except Exception:  # a broken client must not stop the server
                    pass

    def _handle(self, conn: socket.socket) -> None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            return
        request = json.loads(_recv_all(conn))
        try:
            n = append_staged(
                self.manager, request["topic"], [(int(p), str(f)) for p, f in request["files"]]
            )
            reply = {"ok": True, "batches": n}
        except errors.KompaktError as exc:
            reply = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
        conn.sendall(json.dumps(reply).encode())

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _recv_all(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


_servers: dict[str, CommitServer] = {}
_servers_lock = threading.Lock()


class Attachment:
    """Returned by :func:`attach_manager`; leaving its ``with`` block detaches."""

    def __init__(self, manager: LogManager):
        self.manager = manager

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        detach_manager(self.manager)


def attach_manager(manager: LogManager) -> Attachment:
    """Let Spark writes to ``manager``'s data dir commit through it (idempotent)."""
    key = str(Path(manager.dir).resolve())
    with _servers_lock:
        if key not in _servers:
            _servers[key] = CommitServer(manager)
    return Attachment(manager)


def detach_manager(manager: LogManager) -> None:
    with _servers_lock:
        server = _servers.pop(str(Path(manager.dir).resolve()), None)
    if server is not None:
        server.close()


def commit_staged(data_dir: str | os.PathLike, topic: str, files: Sequence[StagedFile]) -> None:
    """Append through the attached owner of ``data_dir`` if any, else open it here."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(_address(data_dir))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        with LogManager(data_dir) as manager:
            append_staged(manager, topic, files)
        return
    with sock:
        sock.sendall(json.dumps({"topic": topic, "files": list(files)}).encode())
        sock.shutdown(socket.SHUT_WR)
        reply = json.loads(_recv_all(sock) or b"{}")
    if not reply.get("ok"):
        cls = getattr(errors, reply.get("type", ""), errors.KompaktError)
        if not (isinstance(cls, type) and issubclass(cls, errors.KompaktError)):
            cls = errors.KompaktError
        raise cls(reply.get("message", "commit failed: the data dir owner did not answer"))
