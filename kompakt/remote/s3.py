"""The S3 backend of the remote tier (``s3://bucket/prefix``), through obstore.

Why obstore (the Python binding of the Apache Arrow project's Rust ``object_store``)
rather than the two other well-kept clients:

- **Conditional writes.** The manifests need a put that only one of two racing writers
  can win. obstore has it natively: ``mode="create"`` sends ``If-None-Match: *`` and
  ``mode={"e_tag": ...}`` sends ``If-Match``, mapped to ``AlreadyExistsError`` /
  ``PreconditionError``. ``pyarrow.fs.S3FileSystem`` has no conditional put at all (a
  second writer silently overwrites), so it would need a lock service beside the bucket.
  boto3 can send ``IfNoneMatch``/``IfMatch`` on ``put_object`` too, but brings botocore
  (large, slow to import) for what is four calls here.
- **Range GETs** (a Fetch below the local log start reads chunks of a remote ``.log``):
  ``obstore.get_range`` in all three; obstore returns a zero-copy buffer.
- **Large uploads**: obstore streams a file path as a multipart upload by itself.
- **Spark executors** (the remote clean) can build the same store from the URL, with no
  Hadoop s3a jars; its stores pickle.

Credentials and region come from the usual AWS environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``/``AWS_DEFAULT_REGION``), read by obstore's S3 config; the endpoint of an
S3-compatible server comes from ``kompakt.remote.storage.s3.endpoint.url`` (plain
``http://`` is allowed only when that URL says so).
"""

from __future__ import annotations

from pathlib import Path

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store

from kompakt.remote.store import (
    Data,
    ObjectInfo,
    ObjectNotFoundError,
    PreconditionFailedError,
    RemoteStorageError,
    check_key,
)


class S3ObjectStore:
    """:class:`kompakt.remote.store.ObjectStore` on one bucket and key prefix."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None):
        self.url = f"s3://{bucket}/{prefix}".rstrip("/")
        options = {"allow_http": True} if (endpoint_url or "").startswith("http://") else None
        config = {"endpoint": endpoint_url} if endpoint_url else {}
        try:
            self._store = S3Store(
                bucket, prefix=prefix or None, config=config, client_options=options
            )
        except Exception as e:  # obstore reports a bad config as its own error types
            raise RemoteStorageError(f"cannot open {self.url}: {e}") from e

    def put(self, key: str, data: Data, *, create: bool = False, match: str | None = None) -> str:
        check_key(key)
        if match is not None:
            mode: object = {"e_tag": match}
        else:
            mode = "create" if create else "overwrite"
        # a conditional put goes as one PUT (S3 checks the condition on that request);
        # an unconditional file upload may go multipart
        multipart = None if mode == "overwrite" and isinstance(data, Path) else False
        try:
            result = obstore.put(self._store, key, data, mode=mode, use_multipart=multipart)  # type: ignore[arg-type]
        except (AlreadyExistsError, PreconditionError) as e:
            raise PreconditionFailedError(f"{self.url}/{key}: {_first_line(e)}") from None
        except Exception as e:
            raise RemoteStorageError(f"put {self.url}/{key} failed: {_first_line(e)}") from e
        return result["e_tag"] or ""

    def get(self, key: str) -> tuple[bytes, str]:
        check_key(key)
        try:
            result = obstore.get(self._store, key)
            return bytes(result.bytes()), result.meta["e_tag"] or ""
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{key} is not in {self.url}") from None
        except Exception as e:
            raise RemoteStorageError(f"get {self.url}/{key} failed: {_first_line(e)}") from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        check_key(key)
        if end <= start:
            return b""
        try:
            return bytes(obstore.get_range(self._store, key, start=start, end=end))
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{key} is not in {self.url}") from None
        except Exception as e:
            raise RemoteStorageError(f"read {self.url}/{key} failed: {_first_line(e)}") from e

    def list(self, under: str) -> list[ObjectInfo]:
        check_key(under)
        out = []
        try:
            for batch in obstore.list(self._store, under):
                for meta in batch:
                    modified = int(meta["last_modified"].timestamp() * 1000)
                    out.append(ObjectInfo(meta["path"], meta["size"], modified))
        except Exception as e:
            raise RemoteStorageError(f"list {self.url}/{under} failed: {_first_line(e)}") from e
        return sorted(out, key=lambda o: o.key)

    def delete(self, key: str) -> None:
        check_key(key)
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise RemoteStorageError(f"delete {self.url}/{key} failed: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    """obstore's messages carry the whole HTTP exchange; the first line says what failed."""
    return (str(e).splitlines() or [type(e).__name__])[0][:300]
