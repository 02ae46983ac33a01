"""Fixtures of the remote-tier tests: both backends behind one ``store`` fixture.

The S3 backend runs against moto's standalone S3 server (``moto[server]`` from PyPI,
installed by ``make test-deps``), started once per session on a free 127.0.0.1 port:
it speaks the S3 REST API over HTTP, so obstore's real client code (request signing,
range GETs, ``If-None-Match``/``If-Match`` headers, multipart, error mapping) is what the
tests exercise. What moto does NOT prove:

- real S3's consistency and concurrency: moto checks a conditional put's precondition
  and then stores the object in two Python steps without a lock, so two truly
  simultaneous conditional puts could both pass there. The S3 race tests therefore let
  both writers read the same manifest and then commit one after the other (the second
  must be refused); the atomic simultaneous race is tested on the file backend, whose
  compare-and-swap is a kernel ``link``/``flock``. AWS documents conditional writes as
  atomic; that is taken on trust here;
- latency, throttling (503 SlowDown), partial failures and retries of a real endpoint;
- last-modified times from a clock other than this machine's (the orphan sweep's grace
  period assumes the broker's and the store's clocks roughly agree);
- authentication: moto accepts any credentials.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kompakt.log.producer_snapshot import SNAPSHOT_SUFFIX
from kompakt.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX
from kompakt.remote import open_store
from kompakt.remote.storage import LocalSegmentFiles
from kompakt.remote.store import ObjectStore

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "kompakt-test",
    "AWS_SECRET_ACCESS_KEY": "kompakt-test-secret",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server for the session; the AWS variables the backend reads are set
    for its duration (credentials come from the environment, as in production)."""
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    """A fresh bucket per test, addressed with a key prefix as users would."""
    import boto3  # moto's own dependency; obstore cannot create buckets

    bucket = f"kompakt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/tier"


@pytest.fixture(params=["file", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """(storage URL, S3 endpoint) of one backend."""
    if request.param == "file":
        return (tmp_path / "remote").as_uri(), None
    return request.getfixturevalue("s3_url"), request.getfixturevalue("s3_endpoint")


@pytest.fixture
def store(backend: tuple[str, str | None]) -> ObjectStore:
    return open_store(*backend)


SegmentMaker = Callable[..., LocalSegmentFiles]


@pytest.fixture
def make_segment(tmp_path: Path) -> SegmentMaker:
    """Local segment files of given sizes filled with random bytes (the remote tier
    moves files whole and never parses them, so their content is arbitrary)."""
    folder = tmp_path / "local"
    folder.mkdir()

    def make(
        base: int, last: int, log_bytes: int = 10_000, txnindex: bool = True
    ) -> LocalSegmentFiles:
        sizes = {
            LOG_SUFFIX: log_bytes,
            INDEX_SUFFIX: 96,
            TIMEINDEX_SUFFIX: 120,
            SNAPSHOT_SUFFIX: 70,
        }
        if txnindex:
            sizes[TXNINDEX_SUFFIX] = 34
        files = {}
        for suffix, size in sizes.items():
            path = folder / f"{base:020d}{suffix}"
            path.write_bytes(os.urandom(size))
            files[suffix] = path
        return LocalSegmentFiles(base, last, max_timestamp_ms=1_700_000_000_000 + base, files=files)

    return make
