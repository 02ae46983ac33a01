"""Which ACL each Kafka API needs: one policy per API key, applied around the handler.

With an authorizer configured, :func:`install` puts :func:`guard` around every handler of
the registry (DESIGN: "the authorizer is one check called by the dispatch table for every
API, never inside handlers one by one"). A policy reads the request, asks the authorizer
what ``KafkaApis`` asks for that API, and returns ``(request, finish)``: the request with
the refused parts removed (None: do not call the handler at all) and a function that adds
the refused parts, with Kafka's error code, to the handler's answer. So a refused topic is
never seen by the handler, and nothing is written for it. A policy only decides: the
refused entries are the handlers' own errored entries (each handler module builds them).

One module per API family: :mod:`.data` (Produce, Fetch, ListOffsets, Metadata,
DeleteRecords, DescribeProducers), :mod:`.groups`, :mod:`.txn`, :mod:`.admin`; the
building blocks are :mod:`.check`.

The rules, after Kafka's ``KafkaApis`` (4.x):

=========================  ==========================================================
Produce                    WRITE topic; transactional batches WRITE transactional id
                           (idempotence is checked once, at InitProducerId: KIP-679)
Fetch                      READ topic
ListOffsets                DESCRIBE topic
Metadata                   DESCRIBE topic (unlisted when all topics are asked for);
                           auto-creation CREATE on cluster or topic
OffsetCommit               READ group, READ topic
OffsetFetch                DESCRIBE group, DESCRIBE topic (all topics: filtered)
OffsetDelete               DELETE group, READ topic
FindCoordinator            DESCRIBE group / transactional id
Join/Sync/Heartbeat/Leave  READ group
DescribeGroups             DESCRIBE group
ListGroups                 DESCRIBE cluster, else the groups one may DESCRIBE
DeleteGroups               DELETE group
CreateTopics               CREATE cluster or topic
DeleteTopics/DeleteRecords DELETE topic
CreatePartitions           ALTER topic
DescribeConfigs            DESCRIBE_CONFIGS topic / group / cluster (broker, broker logger)
(Incremental)AlterConfigs  ALTER_CONFIGS topic / group / cluster
InitProducerId             WRITE transactional id; without one IDEMPOTENT_WRITE cluster
                           or WRITE on some topic
AddPartitionsToTxn         WRITE transactional id, WRITE topic
AddOffsetsToTxn            WRITE transactional id, READ group
EndTxn                     WRITE transactional id
TxnOffsetCommit            WRITE transactional id, READ group, READ topic
DescribeAcls               DESCRIBE cluster;  CreateAcls/DeleteAcls ALTER cluster
DescribeLogDirs            DESCRIBE cluster
ApiVersions, SASL          none (before authentication)
DescribeCluster            none; its authorized operations need DESCRIBE cluster
=========================  ==========================================================

An API with no policy here is refused to everyone but super users and closes the
connection: a new API must say what it needs (the ACL matrix test iterates the registry).
The admin HTTP listener is not a Kafka API, but its requests have a principal as a Kafka
connection's and each route asks :func:`authorize` for the operation it amounts to (its
table is :data:`kompakt.broker.http_gate.RULES`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from kompakt.broker.acls import Authorizer, Op
from kompakt.broker.authz import admin, data, groups, txn
from kompakt.broker.authz.check import (
    CLUSTER_DENIED,
    DENIED_MESSAGE,
    Check,
    Decision,
    Finish,
    Policy,
    cluster,
    public,
    same,
    top,
)
from kompakt.broker.handlers.acls import AUTHORIZER_KEY
from kompakt.broker.registry import ApiRegistry, DelayedResponse, Handler
from kompakt.broker.state import BrokerState, RequestContext
from kompakt.errors import KompaktError

POLICIES: dict[int, Policy] = {
    0: data.produce,
    1: data.fetch,
    2: data.list_offsets,
    3: data.metadata,
    8: groups.offset_commit,
    9: groups.offset_fetch,
    10: groups.find_coordinator,
    11: groups.join_group,
    12: groups.member_call,  # SyncGroup
    13: groups.member_call,  # Heartbeat
    14: groups.member_call,  # LeaveGroup
    15: groups.describe_groups,
    16: groups.list_groups,
    17: public,  # SaslHandshake: before authentication
    18: public,  # ApiVersions
    19: admin.create_topics,
    20: admin.delete_topics,
    21: data.delete_records,
    22: txn.init_producer_id,
    24: txn.add_partitions_to_txn,
    25: txn.add_offsets_to_txn,
    26: txn.end_txn,
    28: txn.txn_offset_commit,
    29: cluster(Op.DESCRIBE, top(CLUSTER_DENIED, error_message=DENIED_MESSAGE)),  # DescribeAcls
    30: cluster(Op.ALTER, admin.each_result("results", "creations")),  # CreateAcls
    31: cluster(Op.ALTER, admin.each_result("filter_results", "filters")),  # DeleteAcls
    32: admin.configs(Op.DESCRIBE_CONFIGS, "results"),
    33: admin.configs(Op.ALTER_CONFIGS, "responses"),
    35: cluster(Op.DESCRIBE, top(CLUSTER_DENIED, results=[])),  # DescribeLogDirs
    36: public,  # SaslAuthenticate
    37: admin.create_partitions,
    42: groups.delete_groups,
    44: admin.configs(Op.ALTER_CONFIGS, "responses"),  # IncrementalAlterConfigs
    47: groups.offset_delete,
    50: cluster(Op.DESCRIBE, admin.scram_describe_refusal),
    51: cluster(Op.ALTER, admin.scram_alter_refusal),
    60: admin.describe_cluster,
    61: data.describe_producers,
    65: txn.describe_transactions,
    66: txn.list_transactions,
}


class NoPolicyError(KompaktError):
    """An API without a policy, called by someone not a super user (closes the
    connection: there is no safe generic answer)."""


def _unlisted(api_key: int) -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        if c.principal in c.authorizer.super_users:
            return req, same
        raise NoPolicyError(f"API {api_key} has no authorization policy; refused")

    return policy


def _done(result: Any, finish: Finish) -> Any:
    if isinstance(result, DelayedResponse):
        inner = result.poll

        def poll() -> tuple[Any, bool]:
            resp, complete = inner()
            return finish(resp), complete

        return dataclasses.replace(result, poll=poll)
    if result is None:  # Produce acks=0: no answer
        return None
    return finish(result)


def guard(authorizer: Authorizer) -> Callable[[int, Handler], Handler]:
    """The registry guard: each handler behind its API's policy."""

    def wrap(api_key: int, handler: Handler) -> Handler:
        policy = POLICIES.get(api_key) or _unlisted(api_key)
        if policy is public:
            return handler
        if inspect.iscoroutinefunction(handler):

            async def guarded_async(ctx: RequestContext, req: Any) -> Any:
                request, finish = policy(Check(ctx, authorizer), req)
                if request is None:
                    return finish(None)
                return _done(await handler(ctx, request), finish)  # type: ignore[misc]

            return guarded_async

        def guarded(ctx: RequestContext, req: Any) -> Any:
            request, finish = policy(Check(ctx, authorizer), req)
            if request is None:
                return finish(None)
            return _done(handler(ctx, request), finish)

        return guarded

    return wrap


def install(registry: ApiRegistry, state: BrokerState, authorizer: Authorizer | None) -> None:
    """Turn authorization on (or off, with None) for every API of ``registry``."""
    if authorizer is None:
        state.extra.pop(AUTHORIZER_KEY, None)
        registry.set_guard(None)
        return
    state.extra[AUTHORIZER_KEY] = authorizer
    registry.set_guard(guard(authorizer))


def unpoliced(keys: Iterable[int]) -> list[int]:
    """The API keys among ``keys`` that have no policy (the matrix test's guard)."""
    return [k for k in keys if k not in POLICIES]
