"""Pieces shared by the CLI verbs: options, ``key=value`` parsing, output helpers."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kompakt.errors import KompaktError

from .backend import Backend, CliError
from .kafka_errors import is_kafka_exception, kafka_error_text

if TYPE_CHECKING:
    from .broker_backend import BrokerBackend

_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """One line on stderr: ``error: <message>`` (red on a terminal)."""
    message = " ".join(str(message).split()) or "unknown error"
    _stderr.print(f"[bold red]error:[/] [red]{escape(message)}[/]")


def describe_exception(exc: BaseException) -> str:
    """The one-line text of an error a user can cause (see :func:`is_user_error`)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": '{exc.filename}'" if exc.filename else ""
        return f"{exc.strerror}{where}"
    if is_kafka_exception(exc) and exc.args:
        return kafka_error_text(exc.args[0])
    return str(exc) or type(exc).__name__


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's to fix, printed as one line rather than a traceback:
    a refusal of kompakt's own, a file system error, or the broker's answer to a
    request (confluent-kafka's ``KafkaException``: an ACL's CLUSTER_AUTHORIZATION_FAILED,
    a bad config), whichever verb let it through."""
    return isinstance(exc, KompaktError | OSError) or is_kafka_exception(exc)


INTERRUPTED = 130  # exit code after Ctrl-C: 128 + SIGINT, as shells report it

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
TRANSPORT_HELP = (
    "With --data-dir it works offline on that data dir; otherwise it talks to the broker "
    f"at --bootstrap-server (default {DEFAULT_BOOTSTRAP})."
)

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        "-d",
        help="Work offline on this data dir (the broker's log.dirs; it must not be in use) "
        "instead of talking to a broker.",
        envvar="KOMPAKT_DATA_DIR",
        show_default=False,
    ),
]
BootstrapServer = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-server",
        "-b",
        metavar="HOST:PORT",
        help=f"Broker to talk to (default {DEFAULT_BOOTSTRAP} when no --data-dir is given).",
        show_default=False,
    ),
]
BrokerOnly = Annotated[
    str,
    typer.Option("--bootstrap-server", "-b", metavar="HOST:PORT", help="Broker to talk to."),
]
AdminUrl = Annotated[
    str | None,
    typer.Option(
        "--admin-url",
        metavar="URL",
        help="The broker's admin endpoint, for size and compaction state "
        "(default http://<bootstrap host>:9644; https://USER@HOST:PORT with "
        "KOMPAKT_ADMIN_PASSWORD and KOMPAKT_ADMIN_CAFILE for a secured one).",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def open_backend(
    data_dir: Path | None,
    bootstrap_server: str | None = None,
    *,
    create: bool = False,
    read_only: bool = False,
    admin_url: str | None = None,
) -> Backend:
    """The backend the transport options select: ``--data-dir`` means offline, anything
    else the broker at ``--bootstrap-server`` (default 127.0.0.1:9092).

    Giving both is an error rather than a silent preference, so a forgotten
    ``KOMPAKT_DATA_DIR`` cannot send a command to the wrong place. ``read_only`` verbs
    get a reader that changes nothing in the data dir; only ``create`` may make one.
    """
    check_transport(data_dir, bootstrap_server)
    if data_dir is not None:
        # imported on use: they load the log and record layers (numba), which
        # `kompakt --help` and the broker verbs do not need
        if read_only:
            from .reader import DataDirReader

            return DataDirReader(data_dir)
        from .offline import OfflineBackend

        return OfflineBackend(data_dir, create=create)
    return open_broker(bootstrap_server, admin_url=admin_url)


def check_transport(data_dir: Path | None, bootstrap_server: str | None) -> None:
    """Refuse both transports at once, naming ``KOMPAKT_DATA_DIR`` when the data dir
    came from it (the user typed only --bootstrap-server)."""
    if data_dir is None or bootstrap_server is None:
        return
    env = os.environ.get("KOMPAKT_DATA_DIR")
    if env and Path(env) == Path(data_dir):
        raise CliError(
            f"KOMPAKT_DATA_DIR is set ({env}), which means --data-dir (offline): unset it "
            "to use --bootstrap-server, or leave --bootstrap-server out"
        )
    raise CliError("use either --data-dir (offline) or --bootstrap-server (a broker), not both")


def check_offline_first(
    data_dir: Path | None, bootstrap_server: str | None, check: Callable[[set[str]], None]
) -> None:
    """Offline, a write verb's own check on the data dir's topics, read without
    writing, before the writer opens the dir: opening runs its recovery (a dir not shut
    down cleanly has a corrupt or torn tail truncated) and rewrites its checkpoints,
    and a typo (an unknown topic, a bad config) must fail touching nothing."""
    if data_dir is None or bootstrap_server is not None:
        return
    from kompakt.log.manager import is_data_dir

    if not is_data_dir(data_dir):
        return  # the writer says what is wrong, or makes the new data dir
    with open_backend(data_dir, read_only=True) as reader:
        topics = {t.name for t in reader.list_topics()}
    check(topics)


def require_topic(name: str) -> Callable[[set[str]], None]:
    """:func:`check_offline_first`'s check of a verb aimed at an existing topic."""

    def check(topics: set[str]) -> None:
        if name not in topics:
            from kompakt.errors import UnknownTopicError

            raise UnknownTopicError(f"unknown topic {name!r}")

    return check


def open_broker(bootstrap_server: str | None, *, admin_url: str | None = None) -> BrokerBackend:
    """The Kafka-protocol backend (imported on use: offline verbs need no Kafka client)."""
    from .broker_backend import BrokerBackend

    for server in (bootstrap_server or "").split(","):
        if server.strip().lower().startswith(("http://", "https://")):
            raise CliError(  # librdkafka would say "Name or service not known"
                f"--bootstrap-server takes HOST:PORT (the Kafka port), not a URL: {server!r}"
            )
    return BrokerBackend(bootstrap_server or DEFAULT_BOOTSTRAP, admin_url=admin_url)


def print_warning(message: str) -> None:
    """One line on stderr: ``warning: <message>``."""
    message = " ".join(str(message).split())
    _stderr.print(f"[bold yellow]warning:[/] {escape(message)}")


def print_warnings(backend: Backend) -> None:
    """What the backend noted for the user (:attr:`Backend.warnings`), a line each."""
    for w in list(backend.warnings):
        print_warning(w)


def emit_listing(items: Sequence[Any], name: Callable[[Any], str], json_out: bool) -> None:
    """A ``list`` verb's output, as ``kafka-topics.sh --list`` and
    ``kafka-consumer-groups.sh --list``: one name a line; with ``--json`` every item as
    an object (its dataclass fields)."""
    if json_out:
        emit_json([dataclasses.asdict(i) for i in items])
        return
    for i in items:
        emit(name(i))


def parse_configs(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a pair without '=' or with an empty key is an error."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"invalid config {pair!r}: expected key=value")
        out[key] = value
    return out


def text(data: bytes | None) -> str | None:
    """Bytes as UTF-8 text, None for null; a byte that is not valid UTF-8 shows as
    ``\\xNN`` (backslashreplace) rather than being silently replaced by U+FFFD."""
    return None if data is None else data.decode("utf-8", "backslashreplace")


def emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def emit_json(obj: Any, *, indent: int | None = None) -> None:
    sys.stdout.write(json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Column:
    """A table column: its header and which side its cells keep to."""

    header: str
    justify: Literal["left", "right"] = "left"


def print_table(
    rows: Iterable[Sequence[object]],
    columns: Sequence[str | Column] | None = None,
    *,
    indent: str = "",
    ruled: bool = False,
) -> None:
    """Print rows (under their ``columns``' headers); every table the CLI prints goes
    through here.

    Rendered by rich, never wrapped to the terminal's width (a pipe or a test reads the
    same lines), cells separated by two spaces, no trailing blanks. ``ruled`` puts a line
    under the header (bold on a terminal), as ``topic describe``'s partitions; without
    it the header is a plain first row, as ``kafka-consumer-groups.sh`` prints its
    tables; without ``columns`` there is no header. Cells are text, never rich markup:
    a ``[`` in a topic name prints as it is.
    """
    rows = [[Text(str(v)) for v in row] for row in rows]
    if columns is None:
        cols = [Column("") for _ in (rows[0] if rows else [])]
    else:
        cols = [c if isinstance(c, Column) else Column(c) for c in columns]
        if not ruled:
            rows.insert(0, [Text(c.header) for c in cols])
    if not rows and not ruled:
        return
    tbl = Table(
        box=box.SIMPLE_HEAD if ruled else None,
        show_header=ruled,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
    )
    for c in cols:
        tbl.add_column(Text(c.header), justify=c.justify, no_wrap=True)
    for row in rows:
        tbl.add_row(*row)
    console = Console(file=sys.stdout, width=_NO_WRAP, highlight=False)
    with console.capture() as captured:
        console.print(tbl)
    for line in captured.get().splitlines():
        emit(indent + line.rstrip())


_NO_WRAP = 100_000  # columns: wider than any table, so rich never wraps one
