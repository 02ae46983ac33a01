"""Policies of the transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, Describe/ListTransactions (Kafka's ``KafkaApis`` rules, 4.x)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kompakt.broker.acls import Op
from kompakt.broker.authz.check import (
    CLUSTER_DENIED,
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    TXN,
    TXN_DENIED,
    Check,
    Decision,
    Policy,
    all_topics_error,
    append,
    describable_only,
    refuse,
    same,
    split,
)
from kompakt.broker.authz.groups import commit_part, read_topics
from kompakt.broker.handlers.txn import add_partitions_result, describe_transactions_entry
from kompakt.broker.txn.coordinator import TransactionDescription


def init_producer_id(c: Check, req: Any) -> Decision:
    """WRITE transactional id; without one IDEMPOTENT_WRITE cluster or WRITE on some
    topic (idempotence is checked here once, KIP-679)."""
    refusal = {"producer_id": -1, "producer_epoch": -1}
    tid = req.transactional_id
    if tid is not None:
        if c.ok(Op.WRITE, TXN, tid):
            return req, same
        return refuse({**refusal, "error_code": TXN_DENIED})
    if c.cluster(Op.IDEMPOTENT_WRITE, log_denied=False) or c.any_of(Op.WRITE, TOPIC):
        return req, same
    return refuse({**refusal, "error_code": CLUSTER_DENIED})


def add_partitions_to_txn(c: Check, req: Any) -> Decision:
    """WRITE transactional id, WRITE topic."""
    topics = req.v3_and_below_topics or ()

    def refuse_all(code_of: Callable[[Any], ErrorCode]) -> Decision:
        return refuse(
            {
                "results_by_topic_v3_and_below": [
                    {
                        "name": t.name,
                        "results_by_partition": [
                            add_partitions_result(i, code_of(t)) for i in t.partitions
                        ],
                    }
                    for t in topics
                ]
            }
        )

    if not c.ok(Op.WRITE, TXN, req.v3_and_below_transactional_id):
        return refuse_all(lambda _t: TXN_DENIED)
    denied = {t.name for t in topics if not c.ok(Op.WRITE, TOPIC, t.name)}
    if denied:  # KafkaApis: the refused topics' error, the rest OPERATION_NOT_ATTEMPTED
        return refuse_all(
            lambda t: TOPIC_DENIED if t.name in denied else ErrorCode.operation_not_attempted
        )
    return req, same


def add_offsets_to_txn(c: Check, req: Any) -> Decision:
    """WRITE transactional id, READ group."""
    if not c.ok(Op.WRITE, TXN, req.transactional_id):
        return refuse({"error_code": TXN_DENIED})
    if not c.ok(Op.READ, GROUP, req.group_id):
        return refuse({"error_code": GROUP_DENIED})
    return req, same


def _txn_id(refusal: dict[str, Any]) -> Policy:
    def policy(c: Check, req: Any) -> Decision:
        if c.ok(Op.WRITE, TXN, req.transactional_id):
            return req, same
        return refuse(refusal)

    return policy


end_txn = _txn_id({"error_code": TXN_DENIED})


def txn_offset_commit(c: Check, req: Any) -> Decision:
    """WRITE transactional id, READ group, READ topic."""
    for ok, code in (
        (lambda: c.ok(Op.WRITE, TXN, req.transactional_id), TXN_DENIED),
        (lambda: c.ok(Op.READ, GROUP, req.group_id), GROUP_DENIED),
    ):
        if not ok():
            return all_topics_error(
                req, "topics", "topics", "partitions", "partitions", commit_part, code
            )
    return read_topics(c, req)


def describe_transactions(c: Check, req: Any) -> Decision:
    """DESCRIBE transactional id; the partitions listed only of topics one may DESCRIBE."""
    kept, refused = split(req, "transactional_ids", lambda t: c.ok(Op.DESCRIBE, TXN, t))
    extra = [
        describe_transactions_entry(TransactionDescription.failed(t, TXN_DENIED)) for t in refused
    ]
    return kept, append("transaction_states", extra, lambda r: _describable_topics(c, r))


def _describable_topics(c: Check, resp: dict[str, Any]) -> dict[str, Any]:
    """Kafka's handleDescribeTransactionsRequest: a described transaction lists only the
    partitions of topics the caller may DESCRIBE (a refusal there is not logged)."""

    def ok(t: dict[str, Any]) -> bool:
        return c.ok(Op.DESCRIBE, TOPIC, t["topic"], log_denied=False)

    resp["transaction_states"] = [
        {**s, "topics": [t for t in s["topics"] if ok(t)]} for s in resp["transaction_states"]
    ]
    return resp


def list_transactions(c: Check, req: Any) -> Decision:
    """Only the transactional ids one may DESCRIBE."""
    return req, describable_only(c, "transaction_states", TXN, "transactional_id")
