"""The object-store contract, run against both backends (a local folder and moto's S3
server): the five operations the remote tier builds on, with S3's semantics for
conditional puts (If-None-Match: * / If-Match, RFC 9110 preconditions) and range GETs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kompakt.errors import InvalidConfigError
from kompakt.remote import open_store
from kompakt.remote.store import (
    FileObjectStore,
    ObjectNotFoundError,
    ObjectStore,
    PreconditionFailedError,
    RemoteStorageError,
    parse_storage_url,
)


def test_put_get_and_versions(store: ObjectStore) -> None:
    v1 = store.put("a/b/one", b"first")
    assert store.get("a/b/one") == (b"first", v1)
    v2 = store.put("a/b/one", b"second")
    assert v2 != v1 and store.get("a/b/one") == (b"second", v2)


def test_put_uploads_a_file_path(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(bytes(range(256)) * 100)
    store.put("f/x.log", src, create=True)
    assert store.get("f/x.log")[0] == src.read_bytes()


def test_create_only_put_refuses_an_existing_object_if_none_match(store: ObjectStore) -> None:
    store.put("k", b"one", create=True)
    with pytest.raises(PreconditionFailedError):
        store.put("k", b"two", create=True)
    assert store.get("k")[0] == b"one"


def test_matching_put_needs_the_current_version_if_match(store: ObjectStore) -> None:
    v1 = store.put("m", b"one", create=True)
    v2 = store.put("m", b"two", match=v1)
    with pytest.raises(PreconditionFailedError):
        store.put("m", b"three", match=v1)  # a writer still holding the old version
    with pytest.raises(PreconditionFailedError):
        store.put("absent", b"x", match=v2)
    assert store.get("m") == (b"two", v2)


def test_get_range_is_end_exclusive_and_clipped(store: ObjectStore) -> None:
    store.put("r", bytes(range(100)))
    assert store.get_range("r", 10, 20) == bytes(range(10, 20))
    assert store.get_range("r", 95, 200) == bytes(range(95, 100))
    assert store.get_range("r", 7, 7) == b""


def test_missing_objects_are_reported_and_deletes_are_idempotent(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        store.get("nope")
    with pytest.raises(ObjectNotFoundError):
        store.get_range("nope", 0, 10)
    store.put("d", b"x")
    store.delete("d")
    store.delete("d")
    with pytest.raises(ObjectNotFoundError):
        store.get("d")


def test_list_returns_objects_below_a_folder_only(store: ObjectStore) -> None:
    for key in ("t/a/1", "t/a/2/deep", "t/ab/3", "u/4"):
        store.put(key, b"12345")
    listed = store.list("t/a")
    assert [o.key for o in listed] == ["t/a/1", "t/a/2/deep"]
    assert {o.size for o in listed} == {5}
    assert store.list("missing") == []


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "..", "a/.hidden"])
def test_keys_that_could_escape_or_collide_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(RemoteStorageError, match="invalid remote object key"):
        store.put(key, b"x")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file://relative/dir", "absolute local folder"),
        ("file:relative", "absolute local folder"),
        ("s3://", "s3://bucket"),
        ("s3://bucket?x=1", "s3://bucket"),
        ("gs://bucket", "scheme must be file:// or s3://"),
        ("/plain/path", "scheme must be file:// or s3://"),
    ],
)
def test_a_bad_storage_url_is_one_clear_line(url: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as e:
        open_store(url)
    assert "\n" not in str(e.value) and "kompakt.remote.storage.url" in str(e.value)


def test_storage_urls_are_taken_apart() -> None:
    assert parse_storage_url("file:///var/lib/r").location == "/var/lib/r"
    s3 = parse_storage_url("s3://bucket/some/prefix/")
    assert (s3.scheme, s3.location, s3.prefix) == ("s3", "bucket", "some/prefix")


def test_file_store_leaves_no_temp_file_and_survives_a_torn_temp(tmp_path: Path) -> None:
    """A crash mid-put leaves a hidden temp file: never listed, never read as the object
    (Kafka's checkpoint protocol: temp, fsync, rename)."""
    store = FileObjectStore(tmp_path)
    store.put("p/obj", b"whole")
    (tmp_path / "p" / ".obj.deadbeef.tmp").write_bytes(b"torn")
    assert [o.key for o in store.list("p")] == ["p/obj"]
    assert store.get("p/obj")[0] == b"whole"
    store.put("p/obj", b"again", create=False)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [".obj.deadbeef.tmp", "obj"]


def race(n: int, put: Callable[[bytes], object]) -> tuple[list[bytes], list[bytes]]:
    """``n`` threads released together by a barrier each try ``put(their byte)``;
    (winners, losers)."""
    barrier = threading.Barrier(n)
    won: list[bytes] = []
    lost: list[bytes] = []

    def write(me: bytes) -> None:
        barrier.wait()
        try:
            put(me)
            won.append(me)
        except PreconditionFailedError:
            lost.append(me)

    threads = [threading.Thread(target=write, args=(bytes([i]),)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won, lost


@pytest.mark.parametrize("mode", ["create", "match"])
def test_file_store_racing_writers_exactly_one_wins(tmp_path: Path, mode: str) -> None:
    """Many threads put the same key at once: each round exactly one conditional put
    succeeds, and the object is the winner's."""
    store = FileObjectStore(tmp_path)
    for round_ in range(20):
        key = f"race/{round_}"
        if mode == "match":
            base = store.put(key, b"base")
            won, lost = race(6, lambda me, key=key, base=base: store.put(key, me, match=base))
        else:
            won, lost = race(6, lambda me, key=key: store.put(key, me, create=True))
        assert len(won) == 1 and len(lost) == 5
        assert store.get(key)[0] == won[0]


def test_file_store_delete_leaves_no_lock_file_or_empty_folder(tmp_path: Path) -> None:
    """Deleting an object a compare-and-swap put replaced also removes its hidden lock
    file and the folders it leaves empty (S3 has neither: a deleted topic leaves
    nothing), while a sibling keeps its folder; the key is written afresh afterwards."""
    store = FileObjectStore(tmp_path)
    v = store.put("topics/t/0/manifest.json", b"one", create=True)
    store.put("topics/t/0/manifest.json", b"two", match=v)
    store.put("topics/u/topic.json", b"u")
    store.delete("topics/t/0/manifest.json")
    assert not (tmp_path / "topics" / "t").exists()
    assert [o.key for o in store.list("topics")] == ["topics/u/topic.json"]
    store.delete("topics/u/topic.json")
    assert list(tmp_path.iterdir()) == []
    v = store.put("topics/t/0/manifest.json", b"three", create=True)
    store.put("topics/t/0/manifest.json", b"four", match=v)
    assert store.get("topics/t/0/manifest.json")[0] == b"four"


def test_file_store_a_writer_waiting_on_a_deleted_lock_fails_its_match(tmp_path: Path) -> None:
    """A delete takes the object's lock before removing it and the lock file: a matching
    put racing it either replaced the object first (and the delete removes it) or finds
    it gone (If-Match on a missing object fails, S3's 412) and leaves no lock file or
    folder; the object never comes back after the delete returned."""
    store = FileObjectStore(tmp_path)
    for round_ in range(20):
        key = f"race/{round_}/manifest.json"
        base = store.put(key, b"base", create=True)
        barrier = threading.Barrier(2)
        outcome: list[str] = []
        t = threading.Thread(target=_put_after, args=(store, key, base, barrier, outcome))
        t.start()
        barrier.wait()
        store.delete(key)
        t.join()
        assert outcome in (["put"], ["refused"])
        with pytest.raises(ObjectNotFoundError):
            store.get(key)
        assert not (tmp_path / "race" / str(round_)).exists()


def _put_after(
    store: FileObjectStore, key: str, base: str, barrier: threading.Barrier, outcome: list[str]
) -> None:
    barrier.wait()
    try:
        store.put(key, b"new", match=base)
        outcome.append("put")
    except PreconditionFailedError:
        outcome.append("refused")
