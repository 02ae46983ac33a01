"""Secrets at rest: the SCRAM credentials and the ACLs are the broker owner's alone from
their first byte (created 0600), under the usual umask 022, through every rewrite."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from kompakt.broker.acls import AclBinding, AclStore, Op, PatternType, Permission, ResourceType
from kompakt.broker.security.scram_store import ScramCredential, ScramStore

OTHERS = stat.S_IRWXG | stat.S_IRWXO


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


class Poller(threading.Thread):
    """Stats a file and its temp file as fast as it can, keeping every mode that lets
    group or others in (what a local user polling the data dir would catch)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.paths = (path, path.with_name(path.name + ".tmp"))
        self.stop = threading.Event()
        self.seen: set[tuple[str, str]] = set()
        self.stats = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for p in self.paths:
                try:
                    mode = os.stat(p).st_mode
                except FileNotFoundError:
                    continue
                self.stats += 1
                if mode & OTHERS:
                    self.seen.add((p.name, oct(mode & 0o777)))

    def __enter__(self) -> Poller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


def test_scram_store_is_never_readable_by_others_while_written(tmp_path, umask_022):
    """The issue's race: the temp file was written 0644 and chmod-ed after the rename (a
    local user read the store in 25 of 30 writes). Now it is made 0600 before a byte."""
    store = ScramStore(tmp_path)
    cred = ScramCredential.from_password("SCRAM-SHA-256", "secret")
    with Poller(store.path) as poller:
        for i in range(60):
            store.put(f"user{i}", "SCRAM-SHA-256", cred)
    assert poller.stats > 0
    assert poller.seen == set()
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_acl_file_is_the_owners_alone(tmp_path, umask_022):
    store = AclStore(tmp_path)
    with Poller(store.path) as poller:
        for i in range(30):
            topic, literal = ResourceType.TOPIC, PatternType.LITERAL
            row = AclBinding(topic, f"t{i}", literal, f"User:u{i}", "*", Op.READ, Permission.ALLOW)
            store.add([row])
    assert poller.stats > 0
    assert poller.seen == set()
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_a_leftover_readable_temp_file_is_not_reused(tmp_path, umask_022):
    """A temp file left by a crash (or planted) with 0644 is removed and made anew (the
    0600 file is created exclusively): the write succeeds and the store reads back."""
    store = ScramStore(tmp_path)
    tmp = store.path.with_name(store.path.name + ".tmp")
    tmp.write_text("{}")
    os.chmod(tmp, 0o644)
    store.put("alice", "SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", "x"))
    assert not tmp.exists()
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert ScramStore(tmp_path).get("alice", "SCRAM-SHA-256") is not None
