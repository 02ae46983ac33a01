"""SaslHandshake (17) and SaslAuthenticate (36) after authentication, and the SCRAM user
APIs DescribeUserScramCredentials (50) / AlterUserScramCredentials (51).

The SASL exchange itself runs in the connection's authenticator
(:mod:`kompakt.broker.security.sasl`) before any request reaches a handler; what gets here
is a SASL request on a connection already authenticated or on a listener without SASL,
which Kafka's ``KafkaApis`` answers ILLEGAL_SASL_STATE. Registering them here also makes
ApiVersions advertise them, from the same table.
"""

from __future__ import annotations

from typing import Any

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

from kompakt.broker.registry import ApiRegistry
from kompakt.broker.security.scram_store import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramStore,
    check_iterations,
)
from kompakt.broker.state import RequestContext

SCRAM_STORE = "scram_store"
# Kafka's ScramMechanism type bytes in the SCRAM user APIs
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_OF = {v: k for k, v in MECHANISM_TYPES.items()}


def scram_store(ctx: RequestContext) -> ScramStore:
    store = ctx.state.extra.get(SCRAM_STORE)
    if store is None:
        store = ctx.state.extra[SCRAM_STORE] = ScramStore(ctx.config.data_dir)
    return store


def handle_sasl_handshake(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}


def handle_sasl_authenticate(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
    }


def handle_describe_user_scram_credentials(ctx: RequestContext, req: Any) -> dict[str, Any]:
    users = scram_store(ctx).users()
    wanted = [u.name for u in req.users] if req.users else None
    results = []
    seen: set[str] = set()
    for name in wanted if wanted is not None else list(users):
        if name in seen:  # Kafka: DUPLICATE_RESOURCE for a user asked twice
            results.append(
                _describe(
                    name,
                    ErrorCode.duplicate_resource,
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            )
            continue
        seen.add(name)
        if name not in users:
            results.append(
                _describe(
                    name,
                    ErrorCode.resource_not_found,
                    f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
            continue
        infos = [
            {"mechanism": TYPE_OF[m], "iterations": it} for m, it in sorted(users[name].items())
        ]
        results.append({**_describe(name, ErrorCode.none, None), "credential_infos": infos})
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": results,
    }


def _describe(name: str, code: int, message: str | None) -> dict[str, Any]:
    return {"user": name, "error_code": code, "error_message": message, "credential_infos": []}


def handle_alter_user_scram_credentials(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """Kafka's ``ControllerApis``/``ScramControlManager`` checks: a user at most once
    per request (DUPLICATE_RESOURCE), a known mechanism (UNSUPPORTED_SASL_MECHANISM),
    iterations in range, a non-empty user; a deletion of a missing credential is
    RESOURCE_NOT_FOUND."""
    store = scram_store(ctx)
    ops = [("delete", d) for d in req.deletions] + [("upsert", u) for u in req.upsertions]
    pairs: dict[tuple[str, int], int] = {}
    for _kind, op in ops:
        pairs[(op.name, int(op.mechanism))] = pairs.get((op.name, int(op.mechanism)), 0) + 1
    # one result per user: its first error, else success (Kafka's per-user results)
    results: dict[str, tuple[int, str | None]] = {}
    duplicated = {name for (name, _m), n in pairs.items() if n > 1}
    for kind, op in ops:
        name = op.name
        if results.get(name, (ErrorCode.none,))[0] != ErrorCode.none:
            continue
        if name in duplicated:
            results[name] = (
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        results[name] = _alter_one(store, kind, op)
    return {
        "throttle_time": 0,
        "results": [
            {"user": n, "error_code": c, "error_message": m} for n, (c, m) in results.items()
        ],
    }


def _alter_one(store: ScramStore, kind: str, op: Any) -> tuple[int, str | None]:
    name = op.name
    mech = MECHANISM_TYPES.get(int(op.mechanism))
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mech is None:
        return ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {op.mechanism}"
    if kind == "delete":
        if store.delete(name, mech):
            return ErrorCode.none, None
        return (
            ErrorCode.resource_not_found,
            f"Attempt to delete a user credential that does not exist: {name} {mech}",
        )
    try:
        check_iterations(mech, int(op.iterations))
        if not op.salt or not op.salted_password:
            raise ValueError("salt and salted password must not be empty")
    except ValueError as exc:
        return ErrorCode.unacceptable_credential, str(exc)
    cred = ScramCredential.from_salted_password(
        mech, bytes(op.salt), bytes(op.salted_password), int(op.iterations)
    )
    store.put(name, mech, cred)
    return ErrorCode.none, None


def register(registry: ApiRegistry) -> None:
    registry.register(SaslHandshakeRequest.__api_key__, 0, 1, handle_sasl_handshake)
    registry.register(SaslAuthenticateRequest.__api_key__, 0, 2, handle_sasl_authenticate)
    registry.register(
        DescribeUserScramCredentialsRequest.__api_key__,
        0,
        0,
        handle_describe_user_scram_credentials,
    )
    registry.register(
        AlterUserScramCredentialsRequest.__api_key__, 0, 0, handle_alter_user_scram_credentials
    )


__all__ = ["register", "SCRAM_MECHANISMS"]
