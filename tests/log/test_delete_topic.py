"""Deleting a topic renames its partition folders to ``TOPIC-N.<uuid>-delete`` under the
log manager's lock and removes them after it (Kafka's ``LogManager.asyncDelete``: the
rename is the deletion, the files go later), so readers of the log list never wait for
a large partition's files to be removed; a restart removes what a crash left."""

from __future__ import annotations

import shutil
import threading

from kompakt.log import topic_store
from kompakt.log.manager import LogManager, delete_dir_name
from kompakt.record.encode import build_simple_batch


def test_readers_of_the_log_list_do_not_wait_for_the_files_to_go(manager, monkeypatch) -> None:
    manager.create_topic("big", 2)
    manager.create_topic("other", 1)
    for part in (0, 1):
        manager.get_log("big", part).append(build_simple_batch([(b"k", b"v")], timestamp=1))
    answered: list[object] = []
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        """While the files are being removed, another thread lists the logs and asks
        for one (it would block until the deletion ends if the lock were held)."""
        reader = threading.Thread(
            target=lambda: answered.append(
                ([p.name for p in manager.logs()], manager.get_log("other", 0).name)
            ),
            daemon=True,
        )
        reader.start()
        reader.join(timeout=30)
        answered.append(not reader.is_alive())
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(topic_store.shutil, "rmtree", rmtree)
    manager.delete_topic("big")
    assert answered and all(done is True for done in answered[1::2]), answered
    assert answered[0] == (["other-0"], "other-0")  # the deleted topic is already gone
    assert manager.topics() == ["other"]
    assert not [p for p in manager.dir.iterdir() if p.name.startswith("big")]


def test_a_restart_removes_the_folders_a_crash_left_renamed(tmp_path, clock) -> None:
    """A crash after the rename, before the files were removed: the next start removes
    the ``-delete`` folder (Kafka's ``loadLogs`` deletes ``-delete`` dirs)."""
    m = LogManager(tmp_path / "data", clock=clock)
    m.create_topic("t", 1)
    m.get_log("t", 0).append(build_simple_batch([(b"k", b"v")], timestamp=1))
    m.close()
    left = tmp_path / "data" / delete_dir_name("gone", 0)
    shutil.copytree(tmp_path / "data" / "t-0", left)
    m = LogManager(tmp_path / "data", clock=clock)
    try:
        assert not left.exists()
        assert m.topics() == ["t"]
        assert m.get_log("t", 0).log_end_offset == 1
    finally:
        m.close()
