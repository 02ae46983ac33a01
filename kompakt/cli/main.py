"""The ``kompakt`` command: the typer app, its sub-commands and the one error handler.

Each verb lives in its own module and is registered below (see "Commands"). Errors a
user can cause (``KompaktError`` and subclasses, ``OSError``, the broker's refusal as
confluent-kafka's ``KafkaException``: ``common.is_user_error``) are turned into one red
line on stderr, ``error: <message>``, and exit code 1, in :class:`ErrorHandlingGroup`,
so every command, present and future, gets it without doing anything. Ctrl-C
(``KeyboardInterrupt``) is one ``interrupted`` line and exit code 130 (128 + SIGINT, as
shells report it); the ``with`` blocks of the verb have closed what they held by then
(an offline data dir is flushed and unlocked), so what was written stays written.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from .common import INTERRUPTED, describe_exception, is_user_error, print_error


def _interrupted() -> None:
    """The one line for Ctrl-C."""
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class ErrorHandlingGroup(TyperGroup):
    """A click group whose invocation turns expected errors into ``error: ...`` lines.

    Nested groups (``topic``) run inside the root group's ``invoke``, so handling it
    here covers every command.
    """

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # Reader went away (`kompakt consume ... | head`): stop quietly.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            _interrupted()
            raise typer.Exit(INTERRUPTED) from None
        except Exception as exc:
            if not is_user_error(exc):
                raise
            print_error(describe_exception(exc))
            raise typer.Exit(1) from None


app = typer.Typer(
    name="kompakt",
    cls=ErrorHandlingGroup,
    help="kompakt: a Kafka-compatible, compaction-first log store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    command_config: Annotated[
        Path | None,
        typer.Option(
            "--command-config",
            metavar="FILE",
            help="Client settings for the broker verbs, as Kafka's tools take them: a "
            "properties file of librdkafka keys (security.protocol, ssl.ca.location, "
            "sasl.mechanism, sasl.username, sasl.password ...); or KOMPAKT_COMMAND_CONFIG.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """kompakt: a Kafka-compatible, compaction-first log store."""
    from .client_config import set_path

    set_path(command_config)


# -- Commands ------------------------------------------------------------------------------
# One line per verb or verb group. Modules define a typer.Typer (sub-commands) or plain
# functions (single commands); they must not import this module.
from kompakt.cli import (  # noqa: E402
    acl,
    compact,
    dump,
    export,
    group,
    records,
    serve,
    topic,
    txn,
    user,
)

app.add_typer(topic.app, name="topic")
app.add_typer(group.app, name="group")
app.add_typer(acl.app, name="acl")
app.add_typer(user.app, name="user")
app.add_typer(txn.app, name="txn")
app.command("produce")(records.produce)
app.command("consume")(records.consume)
app.command("dump")(dump.dump)
app.command("compact")(compact.compact)
app.command("export")(export.export)
app.command("serve")(serve.serve)


def _keep_caches_out_of_the_working_dir() -> None:
    """kio registers Hypothesis strategies when Hypothesis is installed (the test
    extras), and Hypothesis then caches its unicode tables in ``./.hypothesis``: a folder
    left in whatever directory the user ran ``kompakt`` from. Send it to the user's cache
    dir instead, unless they chose a place."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(cache / "kompakt" / "hypothesis"))


def main() -> None:
    """Console-script entry point (``kompakt = kompakt.cli.main:main``).

    Ctrl-C outside a command (while arguments are parsed, modules imported, or the
    output is flushed at exit) is handled like inside one.
    """
    _keep_caches_out_of_the_working_dir()
    try:
        app(prog_name="kompakt")
    except KeyboardInterrupt:
        _interrupted()
        sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
