"""The blob interface the remote tier writes through, its errors, and the local directory.

Tiered storage needs five things of a store, and no more: put a whole object (optionally
only if absent, or only if it is still the version read: the conditional put the
manifests rely on so two writers cannot both win), get a whole object with its version
(ETag), get a byte range, list the objects under a folder, delete (idempotent). Both
backends offer exactly that: :class:`FileObjectStore` here (the embedded default, like
Kafka's ``LocalTieredStorage`` in its tests) and :class:`kompakt.remote.s3.S3ObjectStore`.
:func:`kompakt.remote.open_store` picks one from ``kompakt.remote.storage.url``.

Keys are ``/``-separated relative paths (:mod:`kompakt.remote.layout` names them).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from kompakt.errors import InvalidConfigError, KafkaStorageError
from kompakt.log.checkpoint import fsync_dir


class RemoteStorageError(KafkaStorageError):
    """The remote tier failed (Kafka's ``RemoteStorageException``): clients see
    KAFKA_STORAGE_ERROR, as Kafka answers a Fetch whose remote read failed."""


class ObjectNotFoundError(RemoteStorageError):
    """A key the caller expected is not in the store."""


class PreconditionFailedError(RemoteStorageError):
    """A conditional put lost: the object exists (create) or changed (match)."""


class ChecksumMismatchError(RemoteStorageError):
    """Bytes read back differ from the checksum recorded when they were uploaded."""


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key, size and last-modified time (store clock, ms)."""

    key: str
    size: int
    modified_ms: int


Data = bytes | Path


class ObjectStore(Protocol):
    """What the remote tier needs of a store; see the module docstring."""

    url: str

    def put(self, key: str, data: Data, *, create: bool = False, match: str | None = None) -> str:
        """Write ``data`` whole and atomically; return the new version (ETag).

        ``create``: fail with :class:`PreconditionFailedError` if the key exists
        (If-None-Match: *). ``match``: fail unless the current version is ``match``
        (If-Match). Readers see the old object or the new one, never a part.
        """
        ...

    def get(self, key: str) -> tuple[bytes, str]:
        """The whole object and its version; :class:`ObjectNotFoundError` if absent."""
        ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (fewer if the object ends first)."""
        ...

    def list(self, under: str) -> list[ObjectInfo]:
        """Every object whose key lies below the folder ``under`` (all depths)."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error (deletes are retried)."""
        ...


def check_key(key: str) -> str:
    """A key is a relative ``/`` path without empty, ``.`` or ``..`` parts (so the file
    backend can never write outside its folder) and without hidden names (its temp and
    lock files start with a dot)."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        raise RemoteStorageError(f"invalid remote object key {key!r}")
    return key


@dataclass(frozen=True)
class StorageUrl:
    """``kompakt.remote.storage.url`` taken apart: ``file`` + path, or ``s3`` + bucket
    + prefix."""

    scheme: str
    location: str  # the folder (file) or the bucket (s3)
    prefix: str = ""


def parse_storage_url(url: str, name: str = "kompakt.remote.storage.url") -> StorageUrl:
    """The one parser of the storage URL (the config validator calls it too)."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        path = unquote(parsed.path)
        if parsed.netloc not in ("", "localhost") or not path.startswith("/"):
            raise InvalidConfigError(
                f"Invalid value {url} for configuration {name}: a file URL names an "
                "absolute local folder, e.g. file:///var/lib/kompakt-remote"
            )
        return StorageUrl("file", path)
    if parsed.scheme == "s3":
        if not parsed.netloc or parsed.query or parsed.fragment:
            raise InvalidConfigError(
                f"Invalid value {url} for configuration {name}: an S3 URL is "
                "s3://bucket or s3://bucket/prefix"
            )
        return StorageUrl("s3", parsed.netloc, parsed.path.strip("/"))
    raise InvalidConfigError(
        f"Invalid value {url} for configuration {name}: the scheme must be file:// or s3://"
    )


class FileObjectStore:
    """Objects as files below one folder, each written to a temp file, fsynced, then
    renamed (or hard-linked, for a create-only put) into place and the folder fsynced,
    so a crash leaves the old object or the new one (Kafka's checkpoint-file protocol).

    A put with ``match`` holds an ``flock`` on a hidden lock file beside the object while
    it compares and replaces, so writers in other processes on this host (or sharing the
    folder over a filesystem with working locks) cannot both win. The version is the
    file's inode, size and mtime: every put makes a new inode.
    """

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    @staticmethod
    def _version(st: os.stat_result) -> str:
        return f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"

    def put(self, key: str, data: Data, *, create: bool = False, match: str | None = None) -> str:
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self._create(key, tmp) as out:
                if isinstance(data, Path):
                    with open(data, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                else:
                    out.write(data)
                out.flush()
                os.fsync(out.fileno())
                # the object's version is its file's, which a rename or link keeps: read
                # here, as a delete may remove the object the moment it is in place
                version = self._version(os.fstat(out.fileno()))
            if match is not None:
                self._replace_if(path, tmp, match)
            elif create:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise PreconditionFailedError(f"{key} already exists") from None
            else:
                os.replace(tmp, path)
            with contextlib.suppress(FileNotFoundError):  # a delete since pruned the folder
                fsync_dir(path.parent)
            return version
        except PreconditionFailedError:
            tmp.unlink(missing_ok=True)
            if not path.exists():  # a match on a deleted object: no folder left behind
                self._prune(path.parent)
            raise
        finally:
            tmp.unlink(missing_ok=True)

    def _create(self, key: str, tmp: Path) -> BinaryIO:
        """``tmp`` opened for writing, its folders made; made again when a delete
        removed the emptied folder between the two (:meth:`delete` prunes them)."""
        for attempt in range(3):
            try:
                tmp.parent.mkdir(parents=True, exist_ok=True)
                return open(tmp, "xb")
            except FileNotFoundError:
                if attempt == 2:
                    raise
            except FileExistsError as e:  # mkdir saw the folder, then a delete pruned it
                if attempt == 2 or os.path.lexists(tmp.parent):  # or a file is in its place
                    raise RemoteStorageError(f"cannot write {key} in {self.url}: {e}") from e
            except OSError as e:  # a file where a folder must be, no space, no permission
                raise RemoteStorageError(f"cannot write {key} in {self.url}: {e}") from e
        raise AssertionError("unreachable")

    @staticmethod
    def _lock_path(path: Path) -> Path:
        return path.with_name(f".{path.name}.lock")

    def _replace_if(self, path: Path, tmp: Path, match: str) -> None:
        lock = self._lock_path(path)
        with open(lock, "a") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)
            try:
                current = self._version(path.stat())
            except FileNotFoundError:
                current = None
            if current != match:
                if current is None:  # nothing left to guard: no lock file left behind
                    lock.unlink(missing_ok=True)
                raise PreconditionFailedError(f"{path.name} changed (version {current})")
            os.replace(tmp, path)

    def get(self, key: str) -> tuple[bytes, str]:
        with self._open(key) as f:
            return f.read(), self._version(os.fstat(f.fileno()))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self._open(key) as f:
            f.seek(start)
            return f.read(max(0, end - start))

    def _open(self, key: str) -> BinaryIO:
        try:
            return open(self._path(key), "rb")
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(f"{key} is not in {self.url}") from None
        except OSError as e:
            raise RemoteStorageError(f"cannot read {key} in {self.url}: {e}") from e

    def list(self, under: str) -> list[ObjectInfo]:
        base = self._path(under)
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue  # a temp or lock file, not an object
                p = Path(dirpath, name)
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue  # deleted while listing
                key = p.relative_to(self.root).as_posix()
                out.append(ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000))
        return sorted(out, key=lambda o: o.key)

    def delete(self, key: str) -> None:
        """Remove the object, then its compare-and-swap lock file (under that lock, so a
        writer waiting on it finds the object gone and fails its match) and the folders
        this left empty: a deleted topic leaves nothing behind in the folder."""
        path = self._path(key)
        lock = self._lock_path(path)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # no folder: no object either
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            path.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
        self._prune(path.parent)

    def _prune(self, folder: Path) -> None:
        """Remove ``folder`` and its parents below the root while they are empty."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone with a concurrent delete)
                if folder.exists():
                    break
            folder = folder.parent
