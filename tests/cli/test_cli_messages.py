"""What the CLI says where a newcomer's mistake or a Ctrl-C met a message that was
wrong or did not name its cause (found by using the verbs from outside)."""

from __future__ import annotations

from cli_kit import assert_one_line_error
from typer.testing import CliRunner

from kompakt.cli.backend import partial_write_error
from kompakt.cli.compact import OfflineInterruptedError
from kompakt.cli.main import app
from kompakt.errors import KompaktError

runner = CliRunner()


def test_a_data_dir_from_the_environment_beside_bootstrap_server_is_named(tmp_path):
    """``KOMPAKT_DATA_DIR`` set and only ``-b`` typed said "use either --data-dir or
    --bootstrap-server, not both" of an option the user never typed."""
    env = {"KOMPAKT_DATA_DIR": str(tmp_path)}
    result = runner.invoke(app, ["topic", "list", "-b", "127.0.0.1:1"], env=env)
    assert_one_line_error(result, "KOMPAKT_DATA_DIR is set", "unset it")
    typed = runner.invoke(app, ["topic", "list", "-d", str(tmp_path), "-b", "127.0.0.1:1"])
    assert_one_line_error(typed, "not both")
    user = runner.invoke(app, ["user", "list", "-b", "127.0.0.1:1"], env=env)
    assert_one_line_error(user, "KOMPAKT_DATA_DIR is set")


def test_an_interrupted_dry_run_says_nothing_is_to_recover():
    """A dry run opens the dir read-only: "nothing changed; the next open of the data
    dir recovers" contradicted itself."""
    assert str(OfflineInterruptedError(cleaned=False, dry_run=True)) == (
        "interrupted: the dry run stopped, nothing changed"
    )
    assert "recovers" in str(OfflineInterruptedError(cleaned=False))


def test_a_failed_produce_does_not_call_what_was_written_a_prefix():
    """Partitions send on their own, so "550300 earlier records were written" was not
    the first 550300 lines; resuming from there lost some and repeated others."""
    said = str(partial_write_error(KompaktError("Message timed out"), 550300))
    assert "550300 records were written, not necessarily the first 550300 lines" in said


def test_a_url_where_host_port_goes_and_the_reverse_say_what_is_wanted():
    """``-b http://127.0.0.1:9092`` said "Name or service not known" and ``--admin
    127.0.0.1:9644`` "unknown url type: 127.0.0.1"."""
    r = runner.invoke(app, ["topic", "list", "-b", "http://127.0.0.1:1"])
    assert_one_line_error(r, "--bootstrap-server takes HOST:PORT")
    r = runner.invoke(app, ["compact", "t", "--admin", "127.0.0.1:1"])
    assert_one_line_error(r, "--admin takes http(s)://HOST:PORT")
