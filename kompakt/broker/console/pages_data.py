"""The data pages of the console: key inspector, message browser, consumer groups and
topic configs (``/keys``, ``/messages``, ``/groups``, ``/groups/{group}``,
``/configs``, ``/configs/{topic}``).

Each page is a thin view over its data module (:mod:`~kompakt.broker.console.keys`,
:mod:`~kompakt.broker.console.messages`, :mod:`~kompakt.broker.console.groups`,
:mod:`~kompakt.broker.console.topic_configs`: plain functions, no web), rendered on the
ASGI threadpool so a page never runs on an event loop. Input a page cannot use (a key that is not hex, an offset "abc", an unknown topic, a bad config
value) is a message on the page with status 400, never a traceback.

Every list (topics to pick, groups, a group's offsets) shows only what the request's
principal may see, by the route's rule in :mod:`kompakt.broker.http_gate`.

The one write, a config edit (``POST /configs/{topic}``), is refused unless the admin
endpoint allows console actions (``kompakt.admin.console.writes``), carries the form
token of the page it came from, and is an IncrementalAlterConfigs request dispatched
through the broker's API table (its validation, its authorizer check with the gate's
principal, its messages).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from kompakt.broker.console import browse, common, key_find, keys, messages, topic_configs
from kompakt.broker.console import groups as group_views
from kompakt.broker.console.actions import BodyError, read_body
from kompakt.broker.http_gate import form_token_ok, gate_of
from kompakt.broker.seams import BrokerView
from kompakt.errors import KompaktError

FORM_LIMIT = 16 * 1024


def _broker(request: Request) -> BrokerView:
    broker = common.broker_of(request)
    if broker is None or broker.logs is None or broker.state is None:
        raise browse.BrowseInputError("the broker is not running")
    return broker


def _now(broker: BrokerView) -> int:
    assert broker.logs is not None  # _broker checked
    return int(broker.logs.clock())


def _topics(request: Request, broker: Any) -> list[str]:
    """The topics a page offers: not internal, and those the route's operation allows."""
    topics = sorted(t for t in broker.logs.topics() if not t.startswith("__"))
    return gate_of(request).visible(topics)


def _q(request: Request, name: str, limit: int = 4096) -> str:
    return (request.query_params.get(name) or "")[:limit]


def _check_lengths(request: Request, limits: dict[str, int]) -> None:
    """A query field longer than the page accepts is refused (not silently cut)."""
    for name, limit in limits.items():
        if len(request.query_params.get(name) or "") > limit:
            raise browse.BrowseInputError(f"{name} is longer than {limit} characters")


def _page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    context.setdefault("error", None)
    context.setdefault("notes", [])
    context.setdefault("iso", browse.iso)
    context.setdefault("duration", browse.duration)
    return common.render(request, template, status, **context)


# -- key inspector ---------------------------------------------------------------------------


def keys_page(request: Request) -> Response:
    topic, partition = _q(request, "topic", 300), _q(request, "partition", 40)
    key_text, encoding = _q(request, "key"), _q(request, "encoding", 20) or "text"
    ctx: dict[str, Any] = {
        "title": "kompakt · key inspector",
        "topic": topic,
        "partition": partition,
        "key": key_text,
        "encoding": encoding,
        "encodings": browse.KEY_ENCODINGS,
        "report": None,
        "topics": [],
    }
    try:
        _check_lengths(request, {"topic": 300, "partition": 40, "key": 4096, "encoding": 20})
        broker = _broker(request)
        ctx["topics"] = _topics(request, broker)
        if not topic and not key_text:
            return _page(request, "keys.html", **ctx)
        browse.partition_log(broker.logs, topic, partition or "0")  # input checks first
        key = browse.parse_key(key_text, encoding)
        names = ("kompakt.cleaner.engine", "log.cleaner.dedupe.buffer.size")
        settings = {k: str(broker.config.get(k)) for k in names}
        settings["log.cleaner.io.buffer.load.factor"] = str(
            broker.config.get("log.cleaner.io.buffer.load.factor")
        )
        ctx["report"] = key_find.find_key(
            broker.logs,
            topic,
            partition,
            key,
            _now(broker),
            map_entries=keys.key_map_entries(settings),
        )
    except browse.BrowseInputError as exc:
        return _page(request, "keys.html", 400, error=str(exc), **ctx)
    except key_find.InspectorBusyError as exc:
        return _page(request, "keys.html", 503, error=str(exc), **ctx)
    except (KompaktError, OSError) as exc:  # a corrupt batch, a log deleted meanwhile
        return _page(request, "keys.html", 409, error=f"cannot read the log: {exc}", **ctx)
    return _page(request, "keys.html", **ctx)


# -- message browser ------------------------------------------------------------------------


def messages_page(request: Request) -> Response:
    render = _q(request, "render", 10) or "text"
    ctx: dict[str, Any] = {
        "title": "kompakt · messages",
        "topic": _q(request, "topic", 300),
        "partition": _q(request, "partition", 40) or "0",
        "offset": _q(request, "offset", 40),
        "timestamp": _q(request, "timestamp", 60),
        "key": _q(request, "key"),
        "encoding": _q(request, "encoding", 20) or "text",
        "limit": _q(request, "limit", 10) or str(browse.PAGE_RECORDS),
        "render": render,
        "renders": browse.VALUE_MODES,
        "encodings": browse.KEY_ENCODINGS,
        "page": None,
        "topics": [],
        "next_url": None,
    }
    try:
        _check_lengths(
            request,
            {"topic": 300, "partition": 40, "offset": 40, "timestamp": 60, "key": 4096},
        )
        broker = _broker(request)
        ctx["topics"] = _topics(request, broker)
        if render not in browse.VALUE_MODES:
            raise browse.BrowseInputError(
                f"unknown rendering {render!r}: use one of {', '.join(browse.VALUE_MODES)}"
            )
        if not ctx["topic"]:
            return _page(request, "messages.html", **ctx)
        plog = browse.partition_log(broker.logs, ctx["topic"], ctx["partition"])
        key = browse.parse_key(ctx["key"], ctx["encoding"]) if ctx["key"] else None
        page = messages.browse_messages(
            plog,
            offset=ctx["offset"],
            timestamp=ctx["timestamp"],
            key=key,
            limit=ctx["limit"],
        )
        ctx["page"] = page
        if page.next_offset is not None:
            params = {
                k: ctx[k] for k in ("topic", "partition", "key", "encoding", "limit", "render")
            }
            params["offset"] = str(page.next_offset)
            ctx["next_url"] = "/messages?" + "&".join(
                f"{k}={quote(str(v), safe='')}" for k, v in params.items() if v
            )
    except browse.BrowseInputError as exc:
        return _page(request, "messages.html", 400, error=str(exc), **ctx)
    except (KompaktError, OSError) as exc:
        return _page(request, "messages.html", 409, error=f"cannot read the log: {exc}", **ctx)
    return _page(request, "messages.html", **ctx)


# -- consumer groups --------------------------------------------------------------------------


def _coordinator(broker: Any) -> Any:
    """A frozen copy of the coordinator's groups, made on the Kafka loop that owns them
    (this page runs on a worker thread); None before the coordinator starts."""
    gc = broker.group_coordinator()
    return gc.snapshot() if gc is not None else None


def groups_page(request: Request) -> Response:
    try:
        broker = _broker(request)
    except browse.BrowseInputError as exc:
        return _page(request, "groups.html", 503, error=str(exc), groups=[], group=None)
    gate = gate_of(request)
    groups = gate.visible(
        group_views.describe_groups(broker.logs, _coordinator(broker)), lambda g: g.group_id
    )
    for g in groups:  # committed offsets: OffsetFetch's DESCRIBE on each topic
        g.partitions = gate.visible(g.partitions, lambda p: p.topic, beside=True)
    return _page(request, "groups.html", title="kompakt · groups", groups=groups, group=None)


def group_page(request: Request) -> Response:
    gid = request.path_params["group"]
    try:
        broker = _broker(request)
        group = group_views.describe_group(broker.logs, _coordinator(broker), gid)
        if group is None:
            raise browse.BrowseInputError(f"consumer group {gid[:200]!r} does not exist")
        group.partitions = gate_of(request).visible(
            group.partitions, lambda p: p.topic, beside=True
        )
    except browse.BrowseInputError as exc:
        return _page(request, "groups.html", 404, error=str(exc), groups=[], group=None)
    return _page(request, "groups.html", title=f"kompakt · group {gid}", groups=[], group=group)


# -- topic configs ------------------------------------------------------------------------------


def configs_index(request: Request) -> Response:
    try:
        broker = _broker(request)
        topics = _topics(request, broker)
    except browse.BrowseInputError as exc:
        return _page(request, "configs.html", 503, error=str(exc), topic=None, topics=[], rows=[])
    pick = _q(request, "topic", 300)
    if pick:
        return RedirectResponse(f"/configs/{quote(pick, safe='')}", status_code=303)
    return _page(
        request, "configs.html", title="kompakt · configs", topic=None, topics=topics, rows=[]
    )


def _configs_context(request: Request, broker: Any, topic: str) -> dict[str, Any]:
    return {
        "title": f"kompakt · configs of {topic}",
        "topic": topic,
        "topics": _topics(request, broker),
        "rows": topic_configs.topic_configs(broker.logs, topic),
        "field_error": None,
        "field": None,
        "value": "",
        "saved": None,
    }


def configs_page(request: Request) -> Response:
    topic = request.path_params["topic"]
    try:
        broker = _broker(request)
        ctx = _configs_context(request, broker, topic)
    except browse.BrowseInputError as exc:
        return _page(request, "configs.html", 404, error=str(exc), topic=None, topics=[], rows=[])
    ctx["saved"] = _q(request, "saved", 200) or None
    return _page(request, "configs.html", **ctx)


async def configs_edit(request: Request) -> Response:
    topic = request.path_params["topic"]
    if not common.api_of(request).writes:
        return common.error_page(
            request,
            403,
            "the console is read-only: config edits need kompakt.admin.console.writes=true "
            "(and, with kompakt.admin.auth=basic, a user)",
        )
    try:
        body = await read_body(request, FORM_LIMIT)
    except BodyError as exc:
        return common.error_page(request, int(exc.status), f"the form: {exc}")
    form = {k: v[0] for k, v in parse_qs(bytes(body).decode("utf-8", "replace")).items()}
    if not form_token_ok(request, form.get("csrf")):
        return common.error_page(
            request, 403, "the form's token is missing or stale: reload the page and retry"
        )
    name, value = form.get("name", "").strip(), form.get("value", "")
    delete = form.get("action") == "delete"
    try:
        broker = _broker(request)
        await run_in_threadpool(topic_configs.topic_configs, broker.logs, topic)  # unknown topic
    except browse.BrowseInputError as exc:
        return common.error_page(request, 404, str(exc))
    error = await topic_configs.alter_topic_config_async(
        broker,
        topic,
        name,
        None if delete else value,
        delete=delete,
        principal=gate_of(request).principal,  # verified by the gate, never a header
        peer=f"{(request.client.host if request.client else 'console')}:0",
    )
    if error is None:
        return RedirectResponse(
            f"/configs/{quote(topic, safe='')}?saved={quote(name, safe='')}", status_code=303
        )
    ctx = await run_in_threadpool(_configs_context, request, broker, topic)
    ctx.update(field_error=error, field=name, value=value)
    return _page(request, "configs.html", 400, **ctx)


ROUTES: list[BaseRoute] = [
    Route("/keys", keys_page, methods=["GET"]),
    Route("/messages", messages_page, methods=["GET"]),
    Route("/groups", groups_page, methods=["GET"]),
    Route("/groups/{group:path}", group_page, methods=["GET"]),
    Route("/configs", configs_index, methods=["GET"]),
    Route("/configs/{topic}", configs_page, methods=["GET"]),
    Route("/configs/{topic}", configs_edit, methods=["POST"]),
]
