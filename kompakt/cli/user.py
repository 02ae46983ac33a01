"""``kompakt user create|delete|list``: SCRAM users, offline on a data dir or against a
broker (AlterUserScramCredentials / DescribeUserScramCredentials, as Kafka's
``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``).

Offline edits ``kompakt-scram-credentials.json`` of a stopped broker (a running broker
reads it at start). The password is asked for (no echo) unless ``--password-stdin``; it is
never an argument, so it stays out of shell history and ``ps``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from .backend import CliError
from .common import (
    BootstrapServer,
    DataDir,
    JsonFlag,
    check_transport,
    emit,
    emit_json,
    open_backend,
)

app = typer.Typer(
    help="Manage SCRAM users (SASL/SCRAM-SHA-256 and -512). With --data-dir it works offline "
    "on a stopped broker's data dir; otherwise it talks to --bootstrap-server.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MechanismOpt = Annotated[
    list[str] | None,
    typer.Option("--mechanism", "-m", help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (default: both)."),
]
ClientOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--client-config",
        "-X",
        help="librdkafka client property key=value for --bootstrap-server (repeatable): "
        "security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...",
    ),
]


def _mechanisms(given: list[str] | None) -> list[str]:
    mechs = [m.upper() for m in given] if given else list(MECHANISMS)
    for m in mechs:
        if m not in MECHANISMS:
            raise CliError(f"unknown SCRAM mechanism {m}; use {' or '.join(MECHANISMS)}")
    return mechs


def _password(stdin: bool) -> str:
    if stdin:
        pw = sys.stdin.readline().rstrip("\n")
    else:
        pw = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not pw:
        raise CliError("the password must not be empty")
    return pw


@contextlib.contextmanager
def _store(data_dir: Path, create: bool = False, write: bool = True) -> Iterator[Any]:
    """The data dir's SCRAM store, under the data dir's lock (refused while a broker owns
    it, as every offline verb is; shared for a read) and only for a kompakt data dir.

    The store is a file of its own, so its verbs never open the logs: opening them runs
    a dir's recovery, and ``user list`` on a dir not shut down cleanly truncated a
    topic's segment at a corrupt batch. Only ``create`` of a new data dir makes one."""
    from kompakt.broker.security.scram_store import ScramStore
    from kompakt.log.data_dir import require_data_dir
    from kompakt.log.dirs import lock_dir, shared_dir_lock
    from kompakt.log.manager import is_data_dir

    if create and not is_data_dir(data_dir):
        with open_backend(data_dir, create=True):  # a new data dir: nothing to recover
            pass
    require_data_dir(data_dir)
    if not write:
        with shared_dir_lock(data_dir):
            yield ScramStore(data_dir)
        return
    fd = lock_dir(data_dir, exclusive=True)
    try:
        yield ScramStore(data_dir)
    finally:
        os.close(fd)


def _client_conf(bootstrap: str | None, client: list[str] | None) -> dict[str, str]:
    from .client_config import settings

    conf = {**settings(), "bootstrap.servers": bootstrap or "127.0.0.1:9092"}
    for item in client or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise CliError(f"--client-config expects key=value, got {item!r}")
        conf[k.strip()] = v
    return conf


def _admin(bootstrap: str | None, client: list[str] | None):
    from confluent_kafka.admin import AdminClient

    return AdminClient(_client_conf(bootstrap, client))


def _describe_users(bootstrap: str | None, client: list[str] | None) -> dict[str, dict[str, int]]:
    """Every user's mechanisms and iterations: DescribeUserScramCredentials (API 50) sent
    by the CLI itself, not through confluent-kafka. librdkafka (2.2 to 2.16) frees the
    response's top-level error text, which is not its own (a static string or a stack
    copy), so a refusal - Kafka's CLUSTER_AUTHORIZATION_FAILED for a principal without
    DESCRIBE on the cluster - killed the CLI (exit 139)."""
    from confluent_kafka.admin import ScramMechanism

    from .kafka_errors import code_description
    from .raw_request import request

    conf = _client_conf(bootstrap, client)
    resp = request(conf["bootstrap.servers"], 50, 0, {"users": None}, conf=conf)
    errors = [(resp.error_code, resp.error_message)]
    errors += [(r.error_code, r.error_message) for r in resp.results]
    for code, message in errors:
        if code:
            raise CliError(message or code_description(code))
    return {
        r.user: {
            ScramMechanism(int(i.mechanism)).name.replace("_", "-"): i.iterations
            for i in r.credential_infos
        }
        for r in sorted(resp.results, key=lambda r: r.user)
    }


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="User name.")],
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    mechanism: MechanismOpt = None,
    iterations: Annotated[int, typer.Option(help="PBKDF2 iterations (4096..16384).")] = 4096,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
    client_config: ClientOpt = None,
) -> None:
    """Create or replace a user's SCRAM credentials (salted; the password is not kept)."""
    check_transport(data_dir, bootstrap_server)
    mechs = _mechanisms(mechanism)
    if not name:  # before the data dir or the broker is touched
        raise CliError("the user name must not be empty")
    if not 4096 <= iterations <= 16384:  # Kafka's ScramMechanism bounds
        raise CliError(f"Iterations {iterations} is outside [4096, 16384]")
    if data_dir is not None:  # before the password prompt: a bad dir fails first
        with _store(data_dir, create=True):
            pass
    password = _password(password_stdin)
    if data_dir is not None:
        from kompakt.broker.security.scram_store import ScramCredential

        try:
            creds = {m: ScramCredential.from_password(m, password, iterations) for m in mechs}
        except ValueError as exc:
            raise CliError(str(exc)) from exc
        with _store(data_dir, create=True) as store:
            for m, cred in creds.items():
                store.put(name, m, cred)
    else:
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = _admin(bootstrap_server, client_config)
        ups = [
            UserScramCredentialUpsertion(
                name,
                ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), iterations),
                password.encode(),
            )
            for m in mechs
        ]
        for fut in admin.alter_user_scram_credentials(ups).values():
            fut.result()
    emit(f"Created SCRAM credentials for {name}: {', '.join(mechs)}.")


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="User name.")],
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    mechanism: MechanismOpt = None,
    client_config: ClientOpt = None,
) -> None:
    """Delete a user's SCRAM credentials."""
    check_transport(data_dir, bootstrap_server)
    mechs = _mechanisms(mechanism)
    if data_dir is not None:
        with _store(data_dir) as store:
            removed = [m for m in mechs if store.delete(name, m)]
        if not removed:
            raise CliError(f"user {name} has no {' or '.join(mechs)} credentials")
    else:
        from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

        admin = _admin(bootstrap_server, client_config)
        dels = [
            UserScramCredentialDeletion(name, getattr(ScramMechanism, m.replace("-", "_")))
            for m in mechs
        ]
        for fut in admin.alter_user_scram_credentials(dels).values():
            fut.result()
        removed = mechs
    emit(f"Deleted SCRAM credentials of {name}: {', '.join(removed)}.")


@app.command("list")
def list_users(
    data_dir: DataDir = None,
    bootstrap_server: BootstrapServer = None,
    json_out: JsonFlag = False,
    client_config: ClientOpt = None,
) -> None:
    """List SCRAM users with their mechanisms and iterations (never a secret)."""
    check_transport(data_dir, bootstrap_server)
    if data_dir is not None:
        with _store(data_dir, write=False) as store:
            users = store.users()
    else:
        users = _describe_users(bootstrap_server, client_config)
    if json_out:
        emit_json(users)
        return
    for user, mechs in users.items():
        emit(f"{user}\t" + ", ".join(f"{m} (iterations {it})" for m, it in sorted(mechs.items())))
