"""The remote tier (tiered storage, KIP-405's roles): segments in a folder or an S3
bucket, described by per-partition manifests kept in the same place.

Layer: above :mod:`kompakt.log` (it uploads the log's rolled segment files and uses its
file suffixes) and below :mod:`kompakt.cleaner` (which will clean remote ranges); the
broker's remote log manager (:mod:`kompakt.broker.tiering`) drives it. One idea a
module:

- :mod:`.store`: the blob interface, its errors, the local-folder backend, the URL
  (:func:`open_store` opens the store a URL names);
- :mod:`.s3`: the S3 backend (obstore; why in its docstring);
- :mod:`.layout`: every object's key;
- :mod:`.manifest`: partition manifests and topic records as values and JSON;
- :mod:`.storage`: ``RemoteStorageManager``, segments up and verified reads down;
- :mod:`.metadata`: ``RemoteLogMetadataManager``, compare-and-swap commits, orphans;
- :mod:`.cache`: the bounded chunk cache;
- :mod:`.reads`: a fetch's reads of a remote segment (batches from an offset, aborted
  transactions, offsets by time);
- :mod:`.config`: the config keys and Kafka's rules across them.

docs/tiered-storage.md describes the object layout and the crash-safety order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kompakt.remote.cache import ChunkCache
from kompakt.remote.config import RemoteSettings
from kompakt.remote.metadata import RemoteLogMetadataManager
from kompakt.remote.storage import RemoteStorageManager
from kompakt.remote.store import FileObjectStore, ObjectStore, parse_storage_url


def open_store(url: str, s3_endpoint_url: str | None = None) -> ObjectStore:
    """The store ``url`` names; S3 credentials come from the AWS environment variables."""
    where = parse_storage_url(url)
    if where.scheme == "file":
        return FileObjectStore(Path(where.location))
    from kompakt.remote.s3 import S3ObjectStore  # obstore is loaded only for S3

    return S3ObjectStore(where.location, where.prefix, s3_endpoint_url)


@dataclass(frozen=True)
class RemoteTier:
    """The store, the segment and metadata managers and the cache of one broker."""

    store: ObjectStore
    segments: RemoteStorageManager
    metadata: RemoteLogMetadataManager
    cache: ChunkCache

    @classmethod
    def open(cls, settings: RemoteSettings) -> RemoteTier:
        store = open_store(settings.storage_url, settings.s3_endpoint_url)
        cache = ChunkCache(settings.cache_bytes)
        segments = RemoteStorageManager(store, cache)
        # one count of every store request, segment objects and metadata alike
        metadata = RemoteLogMetadataManager(store, stats=segments.stats, cache=cache)
        return cls(store, segments, metadata, cache)
