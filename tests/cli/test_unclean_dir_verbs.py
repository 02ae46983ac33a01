"""Verbs not aimed at a topic's data leave a data dir that was not shut down cleanly as
it is: opening it to write runs its recovery, which truncates a segment at its first
corrupt batch, as a broker's start does (Kafka's ``LogSegment.recover``). ``user list``
did, and so did a write verb failing its own check (a typo): a topic lost the valid
batches after a flipped byte, and every checkpoint was rewritten. Now the SCRAM verbs
take the dir's lock without opening the logs, and a write verb checks its target on
the dir read-only first."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_kit import assert_one_line_error
from tree_kit import changed, snapshot
from typer.testing import CliRunner

from kompakt.broker.security.scram_store import SCRAM_FILE
from kompakt.cli.main import app
from kompakt.log.manager import CLEAN_SHUTDOWN_FILE

runner = CliRunner()


@pytest.fixture
def unclean(tmp_path: Path) -> Path:
    """A data dir with topic ``a`` whose first segment has a flipped byte mid-way and
    no clean-shutdown marker, as after a crash."""
    d = tmp_path / "data"
    assert runner.invoke(app, ["topic", "create", "a", "-d", str(d), "-p", "2"]).exit_code == 0
    lines = "".join(f"k{i % 50}\tv{i}\n" for i in range(200))
    produced = runner.invoke(app, ["produce", "a", "-d", str(d), "--batch-size", "20"], input=lines)
    assert produced.exit_code == 0, produced.output
    seg = d / "a-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[data.index(b"v95")] ^= 0xFF  # inside a record: under the batch's CRC
    seg.write_bytes(bytes(data))
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    return d


def test_user_list_and_a_user_change_leave_the_topics_of_an_unclean_dir_alone(unclean):
    before = snapshot(unclean)
    listed = runner.invoke(app, ["user", "list", "-d", str(unclean)])
    assert listed.exit_code == 0, listed.output
    assert changed(before, snapshot(unclean)) == set()
    made = runner.invoke(
        app, ["user", "create", "alice", "-d", str(unclean), "--password-stdin"], input="pw\n"
    )
    assert made.exit_code == 0, made.output
    assert changed(before, snapshot(unclean)) <= {".", ".lock", SCRAM_FILE}


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["topic", "delete", "typo"], "unknown topic 'typo'"),
        (["topic", "alter", "typo", "-c", "retention.ms=5"], "unknown topic 'typo'"),
        (["topic", "create", "a"], "Topic 'a' already exists."),
        (["topic", "create", "t9", "-c", "cleanup.policy=compactt"], "Invalid value compactt"),
        (["topic", "create", "bad name"], "bad name"),
        (["compact", "nosuch"], "unknown topic 'nosuch'"),
        (["user", "create", ""], "the user name must not be empty"),
    ],
)
def test_a_write_verb_failing_its_own_check_changes_nothing(unclean, argv, fragment):
    before = snapshot(unclean)
    result = runner.invoke(app, [*argv, "-d", str(unclean)], input="pw\n")
    assert_one_line_error(result, fragment)
    assert changed(before, snapshot(unclean)) == set()


def test_offline_consume_refuses_a_corrupt_batch_instead_of_printing_it(unclean):
    """The flipped byte was printed as a record's value with exit 0; Kafka's consumer
    checks each batch's CRC (``check.crcs``, true by default) and raises
    CorruptRecordException. Records before the corrupt batch are printed, as a
    consumer returns them before the error."""
    (unclean / CLEAN_SHUTDOWN_FILE).touch()  # no recovery warning: just the corrupt batch
    result = runner.invoke(app, ["consume", "a", "-d", str(unclean), "-p", "0"])
    assert_one_line_error(result, "CRC mismatch")
    assert 0 < len(result.stdout.splitlines()) < 100
