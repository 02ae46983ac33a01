"""The compaction pages: the overview (``/``) and the partition page
(``/topics/{topic}/{partition}``), with the JSON they poll and the "compact now".

Everything shown comes from the code the rest of kompakt uses: the cleaning status
(:class:`~kompakt.cleaner.status.CleaningStatus`: dirty ratio, first uncleanable offset
and why, tombstones, eligibility), the cleaner (:attr:`Cleaner.running` with progress,
:attr:`Cleaner.last_stats`), the broker's cleaner thread (backoff) and the console's
:class:`~kompakt.broker.console.history.History`. "Compact now" and the dry run call
``AdminApi.compact``, the code behind ``POST /v1/compact`` and ``kompakt compact``; the
real clean only when ``kompakt.admin.console.writes=true``. Each page shows only the
topics the principal may DESCRIBE (:mod:`kompakt.broker.http_gate`).
"""

from __future__ import annotations

import logging
import time
from http import HTTPStatus
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kompakt.broker.console import charts, common
from kompakt.broker.console.actions import parse_json_body, run_compact
from kompakt.broker.console.remote_tier import tier_view
from kompakt.broker.console.tombstones import horizons_of
from kompakt.broker.http_gate import gate_of
from kompakt.broker.seams import BrokerView
from kompakt.errors import KompaktError

log = logging.getLogger(__name__)


# -- what the pages show --------------------------------------------------------------------
def cleaner_state(broker: BrokerView, statuses: list[tuple[Any, Any]]) -> dict[str, Any]:
    """The cleaner's state: enabled, running cleans with progress, the queue of due
    partitions in the order a background pass picks them (highest dirty ratio first,
    Kafka's ``grabFilthiestCompactedLog``), and the backoff."""
    cleaner = broker.cleaner_if_started()
    thread = broker.background.cleaner_thread if broker.background is not None else None
    running = []
    if cleaner is not None:
        running = [r.to_json() for r in list(cleaner.running.values())]
    busy = {(r["topic"], r["partition"]) for r in running}
    due = [
        st
        for _plog, st in statuses
        if st.due and not st.uncleanable_reason and (st.topic, st.partition) not in busy
    ]
    due.sort(key=lambda st: -(st.dirty_ratio or 0.0))  # stable: log order on ties
    queue = [
        {
            "topic": st.topic,
            "partition": st.partition,
            "dirty_ratio": st.dirty_ratio,
            "cleanable_bytes": st.cleanable_bytes,
            "why": "max.compaction.lag.ms passed"
            if st.need_compaction_now
            else "dirty ratio above min.cleanable.dirty.ratio",
        }
        for st in due
    ]
    next_run = thread.next_run_s if thread is not None else None
    return {
        "enabled": thread is not None,
        "started": cleaner is not None,
        "engine": cleaner.engine.name
        if cleaner is not None
        else str(broker.config.get("kompakt.cleaner.engine")),
        "running": running,
        "queue": queue,
        "backoff_ms": int(broker.config.get("log.cleaner.backoff.ms")),
        "backing_off": bool(thread is not None and not thread.running and next_run),
        "next_pass_in_ms": max(0, int((next_run - time.time()) * 1000)) if next_run else None,
        "last_pass_ms": cleaner.last_run_ms if cleaner is not None else None,
        "compactions_total": cleaner.compactions_total if cleaner is not None else 0,
        "cleaned_bytes_total": cleaner.cleaned_bytes_total if cleaner is not None else 0,
    }


def topic_rows(statuses: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """One row per topic, summed over its partitions."""
    topics: dict[str, dict[str, Any]] = {}
    for plog, st in statuses:
        row = topics.get(plog.topic)
        if row is None:
            row = topics[plog.topic] = {
                "name": plog.topic,
                "policy": ",".join(plog.config.cleanup_policy),
                "compacted": st.compacted,
                "partitions": 0,
                "size": 0,
                "records": 0,
                "clean_bytes": 0,
                "cleanable_bytes": 0,
                "last_clean_ms": None,
                "tombstones": 0,
                "uncleanable": 0,
                "due": 0,
            }
        row["partitions"] += 1
        row["size"] += plog.size_bytes()
        row["records"] += (
            st.records
            if st.records is not None
            else max(0, plog.log_end_offset - plog.log_start_offset)
        )
        row["uncleanable"] += 1 if st.uncleanable_reason else 0
        if st.compacted:
            row["clean_bytes"] += st.clean_bytes or 0
            row["cleanable_bytes"] += st.cleanable_bytes or 0
            row["tombstones"] += st.tombstones_pending or 0
            row["due"] += 1 if st.due else 0
            if st.last_clean is not None:
                row["last_clean_ms"] = max(row["last_clean_ms"] or 0, st.last_clean.started_ms)
    for row in topics.values():
        total = row["clean_bytes"] + row["cleanable_bytes"]
        row["dirty_ratio"] = (
            (row["cleanable_bytes"] / total if total else 0.0) if row["compacted"] else None
        )
    return sorted(topics.values(), key=lambda r: r["name"])


def all_statuses(broker: Any, tombstones: bool = True) -> list[tuple[Any, Any]]:
    """(log, status) of every partition (``tombstones``: count records and tombstones,
    cached per sealed segment)."""
    return list(broker.cleaning_status().partitions(tombstones=tombstones))


def visible_state(request: Request, tombstones: bool = True) -> tuple[list, dict[str, Any]]:
    """(statuses, cleaner state) of the partitions whose topic the principal may
    DESCRIBE, the others left out as Metadata leaves them out."""
    broker = common.broker_of(request)
    gate = gate_of(request)
    statuses = gate.visible(all_statuses(broker, tombstones), lambda s: s[0].topic)
    state = cleaner_state(broker, statuses)
    state["running"] = gate.visible(state["running"], lambda r: r["topic"])
    return statuses, state


def segment_strip(plog: Any, st: Any) -> list[dict[str, Any]]:
    """Each segment with its part of the log: clean head, dirty (cleanable) tail,
    dirty but not yet cleanable, active; widths in proportion to size."""
    segments = plog.segments_snapshot()
    total = sum(s.size for s in segments) or 1
    out = []
    for i, seg in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else plog.log_end_offset
        if i == len(segments) - 1:
            kind = "active"
        elif not st.compacted:
            kind = "plain"
        elif end <= (st.first_dirty_offset or 0):
            kind = "clean"
        elif seg.base_offset >= (st.first_uncleanable_offset or 0):
            kind = "held"
        else:
            kind = "dirty"
        out.append(
            {
                "base": seg.base_offset,
                "end": end,
                "size": seg.size,
                "kind": kind,
                "width": max(2.0, 100.0 * seg.size / total),
            }
        )
    return out


def why_line(plog: Any, st: Any, queue: list[dict[str, Any]]) -> str:
    """Why the partition is, or is not, going to be cleaned."""
    cfg = plog.config
    if not st.compacted:
        return f"cleanup.policy={','.join(cfg.cleanup_policy)}: this log is never compacted"
    if st.uncleanable_reason:
        return f"marked uncleanable, skipped by the cleaner: {st.uncleanable_reason}"
    if not st.cleanable_bytes:
        return (
            f"nothing to clean: no dirty bytes below the first uncleanable offset "
            f"{st.first_uncleanable_offset} ({st.first_uncleanable_reason})"
        )
    for i, q in enumerate(queue):
        if (q["topic"], q["partition"]) == (plog.topic, plog.partition):
            return f"due: position {i + 1} in the cleaner's queue ({q['why']})"
    if not st.due:
        return (
            f"not due: dirty ratio {100 * (st.dirty_ratio or 0):.1f}% is not above "
            f"min.cleanable.dirty.ratio {100 * cfg.min_cleanable_dirty_ratio:.1f}% and "
            f"max.compaction.lag.ms ({cfg.max_compaction_lag_ms}) has not passed"
        )
    return "being cleaned now"


def summary(doc: dict[str, Any]) -> str:
    """One line for a "compact now" / dry-run answer (``kompakt.cleaner.report``).

    "records" are those a newer record of their key supersedes (a superseded tombstone
    too) and unkeyed ones; "tombstones" those dropped because their delete horizon
    passed (``CleanStats.tombstones_removed``)."""
    lines = []
    for r in doc.get("results", []):
        name = f"{r['topic']}-{r['partition']}"
        s = r.get("stats") or {}
        removed = s.get("records_read", 0) - s.get("records_written", 0)
        tombs = s.get("tombstones_removed", 0)
        if r["status"] == "dry-run":
            lines.append(
                f"This clean would remove {removed - tombs} records and {tombs} tombstones "
                f"past their delete horizon from {name} ({common._bytes(s.get('bytes_read'))} → "
                f"{common._bytes(s.get('bytes_written'))})."
            )
        elif r["status"] == "cleaned":
            lines.append(
                f"Cleaned {name}: removed {removed - tombs} records and {tombs} tombstones "
                f"past their delete horizon, "
                f"{common._bytes(s.get('bytes_read'))} → {common._bytes(s.get('bytes_written'))} "
                f"in {s.get('duration_s', 0):.2f} s with engine {s.get('engine')}."
            )
        else:
            lines.append(f"{name}: {r['status']}: {r.get('reason')}")
    return " ".join(lines) or "Nothing to do."


# -- routes ---------------------------------------------------------------------------------
def overview(request: Request) -> Response:
    if common.wants_json(request):
        return common.endpoint_list()
    statuses, cleaner = visible_state(request)
    return common.render(
        request,
        "overview.html",
        title="kompakt · overview",
        topics=topic_rows(statuses),
        cleaner=cleaner,
        partitions=len(statuses),
    )


def partition_page(request: Request) -> Response:
    broker = common.broker_of(request)
    topic = request.path_params["topic"]
    try:
        partition = common.parse_int(request.path_params["partition"], "partition")
    except common.BadInput as exc:
        return common.error_page(request, HTTPStatus.BAD_REQUEST, str(exc))
    try:
        plog = broker.logs.get_log(topic, partition)
    except KompaktError as exc:
        return common.error_page(request, HTTPStatus.NOT_FOUND, str(exc))
    status = broker.cleaning_status()
    st = status.of_log(plog)
    _statuses, cleaner = visible_state(request, tombstones=False)
    tp = (topic, partition)
    history = broker.history
    samples = history.samples(tp)
    cleans = history.cleans(tp)
    if not cleans and st.last_clean is not None:  # before the history (a restart)
        cleans = [st.last_clean.to_json()]
    marks = [
        (
            c["started_ms"],
            f"clean: {c['records_read'] - c['records_written']} records removed",
        )
        for c in cleans
    ]
    size_chart = charts.line_chart(
        [(s.ms, s.size_bytes) for s in samples],
        label=f"size of {plog.name} over time",
        fmt=common._bytes,
        marks=marks,
        y_min=0,
        css="size",
    )
    ratio_chart = charts.line_chart(
        [(s.ms, s.dirty_ratio) for s in samples if s.dirty_ratio is not None],
        label=f"dirty ratio of {plog.name} over time",
        fmt=common._pct,
        marks=marks,
        y_min=0,
        y_max=1,
        css="ratio",
    )
    running = next((r for r in cleaner["running"] if (r["topic"], r["partition"]) == tp), None)
    cfg = plog.config
    horizons = None
    if st.compacted:
        horizons = horizons_of(status.tombstones, plog, broker.logs.clock())
    return common.render(
        request,
        "partition.html",
        horizons=horizons,
        title=f"kompakt · {plog.name}",
        plog=plog,
        st=st,
        cfg=cfg,
        policy=",".join(cfg.cleanup_policy),
        strip=segment_strip(plog, st),
        why=why_line(plog, st, cleaner["queue"]),
        size_chart=size_chart,
        ratio_chart=ratio_chart,
        cleans=list(reversed(cleans)),
        running=running,
        samples=len(samples),
        max_samples=history.max_samples,
        max_cleans=history.max_cleans,
        tier=tier_view(broker, plog),
    )


def progress(request: Request) -> Response:
    """The cleaner state as JSON (running cleans with progress, queue, backoff);
    ``?topic=&partition=`` adds that partition's clean count, so a page sees its clean
    finish."""
    broker = common.broker_of(request)
    _statuses, out = visible_state(request, tombstones=False)
    topic = request.query_params.get("topic")
    if topic is not None:
        try:
            part = common.parse_int(request.query_params.get("partition"), "partition")
        except common.BadInput as exc:
            return common.json_response(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        out["cleans"] = len(broker.history.cleans((topic, part)))
    return common.json_response(HTTPStatus.OK, out)


async def dry_run(request: Request) -> Response:
    """``GET /console/dry-run?topic=&partition=``: what a clean would remove (read-only,
    so no write permission is needed)."""
    q = request.query_params
    try:
        part = common.parse_int(q.get("partition"), "partition")
    except common.BadInput as exc:
        return common.json_response(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
    return await _with_summary(
        await run_compact(request, {"topic": q.get("topic"), "partition": part, "dry_run": True})
    )


async def compact_now(request: Request) -> Response:
    """``POST /console/compact``: the JSON API's compact, refused unless the console may
    change data (``kompakt.admin.console.writes``) for a real clean."""
    req, bad = await parse_json_body(request)
    if bad is not None:
        return bad
    real = not (isinstance(req, dict) and req.get("dry_run") is True)
    if real and not common.api_of(request).writes:
        return common.json_response(
            HTTPStatus.FORBIDDEN,
            {
                "error": "the console is read-only: set kompakt.admin.console.writes=true "
                "to compact from it (POST /v1/compact and kompakt compact still work)"
            },
        )
    return await _with_summary(await run_compact(request, req))


async def _with_summary(response: Response) -> Response:
    import json

    if response.status_code != HTTPStatus.OK:
        return response
    doc = json.loads(bytes(response.body))
    doc["summary"] = await run_in_threadpool(summary, doc)
    return common.json_response(HTTPStatus.OK, doc)


ROUTES: list[BaseRoute] = [
    Route("/", overview, methods=["GET"]),
    Route("/topics/{topic}/{partition}", partition_page, methods=["GET"]),
    Route("/console/progress", progress, methods=["GET"]),
    Route("/console/dry-run", dry_run, methods=["GET"]),
    Route("/console/compact", compact_now, methods=["POST"]),
]
