"""The admin listener's one gate: who is asking (the principal) and whether the broker's
authorizer lets them, for every route, as for a Kafka request (issue 26).

A request's principal is found exactly as a Kafka connection's: with
``kompakt.admin.auth=basic`` HTTP Basic credentials checked against the broker's SCRAM
store (``ScramStore.verify_password``) give ``User:<name>``; without auth the listener is
a PLAINTEXT one and every request is ``User:ANONYMOUS``, or, on https asking client
certificates (``listener.name.admin.ssl.client.auth``), an SSL one: the certificate's
subject through ``ssl.principal.mapping.rules`` (the Kafka port's
:func:`~kompakt.broker.security.principal.cert_principal`), ``User:ANONYMOUS`` without a
certificate, 401 for a subject no rule maps (Kafka fails that authentication). With
Basic as well, Basic names the principal, as SASL does on a SASL_SSL listener. No header
that nothing verified names a principal: with ``auth=none`` an ``Authorization`` header
is ignored.

Each route then asks the broker's authorizer (:func:`kompakt.broker.acls.authorize`,
the check every Kafka API's policy makes) for the Kafka operation it amounts to, from
:data:`RULES`, the one route -> (resource type, operation) table; a test walks every
route of the app and fails on one missing here. Without an authorizer
(``authorizer.class.name`` empty) Kafka allows everything, and so does the gate.

Listing pages (the overview, ``/v1/partitions``, groups) hide what the principal may
not describe, as Metadata of all topics and ListGroups hide it (Kafka's
``logIfDenied = false``); a page about one named resource refuses it with 403, as Kafka
answers TOPIC_AUTHORIZATION_FAILED for a named topic whether it exists or not.

Browser safety lives in :mod:`kompakt.broker.http_browser` (Host allow-list, Origin
checks, form tokens, security headers, failed-login delay).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from kompakt.broker.acls import CLUSTER_NAME, Authorizer, Op, ResourceType, authorize
from kompakt.broker.security.principal import NoMatchingRule, PrincipalMapper, cert_principal

ANONYMOUS = "User:ANONYMOUS"
PEER_CERT = "kompakt.peer_cert"  # scope["state"] key: the https client's DER certificate

# where a rule's resource name comes from
PATH = "path"  # a path parameter named after the resource type: {topic}, {group}
QUERY = "query"  # ?topic=: checked when given; without it the page lists what is allowed
BODY = "body"  # the JSON body's "topic": the handler asks (require) once it has parsed it
LISTING = "listing"  # a list: the handler keeps what is allowed (visible)
CLUSTER = "cluster"  # the cluster resource, kafka-cluster
NONE = "none"  # authenticated only, no ACL (as ApiVersions / DescribeCluster)

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP


@dataclass(frozen=True)
class Rule:
    """What one route needs: ``op`` on a ``rtype`` resource whose name comes from
    ``source``; ``lists`` is what the lists a page shows beside it are filtered by (a
    group's committed offsets are per topic: OffsetFetch's DESCRIBE on each topic);
    ``body`` is the content a state-changing route takes (json, or a form with a token)."""

    rtype: ResourceType | None
    op: Op | None
    source: str
    lists: tuple[ResourceType, Op] | None = None
    body: str = ""

    @property
    def own(self) -> tuple[ResourceType, Op] | None:
        if self.rtype is None or self.op is None:
            return None
        return self.rtype, self.op


# (method, Starlette route path) -> Rule: the one table. HEAD follows GET.
RULES: dict[tuple[str, str], Rule] = {
    # Prometheus text: cluster-wide state, as DescribeCluster/DescribeLogDirs need
    # DESCRIBE on CLUSTER; kompakt.admin.metrics.public=true opens it for a scraper
    ("GET", "/metrics"): Rule(ResourceType.CLUSTER, Op.DESCRIBE, CLUSTER),
    ("GET", "/v1"): Rule(None, None, NONE),  # the endpoint list: no data
    ("GET", "/static"): Rule(None, None, NONE),  # the console's CSS and JavaScript
    # partition and topic state: DESCRIBE, unauthorised topics hidden (Metadata)
    ("GET", "/v1/partitions"): Rule(TOPIC, Op.DESCRIBE, LISTING),
    ("GET", "/"): Rule(TOPIC, Op.DESCRIBE, LISTING),
    ("GET", "/topics/{topic}/{partition}"): Rule(TOPIC, Op.DESCRIBE, PATH),
    ("GET", "/console/progress"): Rule(TOPIC, Op.DESCRIBE, QUERY),
    # records (values, keys, what a clean would remove): READ, as Fetch
    ("GET", "/messages"): Rule(TOPIC, Op.READ, QUERY),
    ("GET", "/keys"): Rule(TOPIC, Op.READ, QUERY),
    ("GET", "/console/dry-run"): Rule(TOPIC, Op.READ, QUERY),
    # a clean changes the topic's state: ALTER (see compaction_rule)
    ("POST", "/v1/compact"): Rule(TOPIC, Op.ALTER, BODY, body="json"),
    ("POST", "/console/compact"): Rule(TOPIC, Op.ALTER, BODY, body="json"),
    # consumer groups: DescribeGroups' DESCRIBE on the GROUP; offsets per topic as
    # OffsetFetch shows them, topics the principal may not DESCRIBE left out
    ("GET", "/groups"): Rule(GROUP, Op.DESCRIBE, LISTING, lists=(TOPIC, Op.DESCRIBE)),
    ("GET", "/groups/{group:path}"): Rule(GROUP, Op.DESCRIBE, PATH, lists=(TOPIC, Op.DESCRIBE)),
    # configs: DescribeConfigs / IncrementalAlterConfigs
    ("GET", "/configs"): Rule(TOPIC, Op.DESCRIBE_CONFIGS, LISTING),
    ("GET", "/configs/{topic}"): Rule(TOPIC, Op.DESCRIBE_CONFIGS, PATH),
    ("POST", "/configs/{topic}"): Rule(TOPIC, Op.ALTER_CONFIGS, PATH, body="form"),
}


def compaction_rule() -> Rule:
    """Why a clean is ALTER on the TOPIC: Kafka has no compaction API, so there is no
    operation of its own to borrow. A clean rewrites the topic's segments and moves its
    log start and cleaner checkpoint, i.e. it changes the topic's state, and ALTER is
    the operation Kafka gives for that (CreatePartitions; ALTER implies DESCRIBE). READ
    would let every consumer rewrite logs; ALTER_CONFIGS is about configs, not data."""
    return RULES[("POST", "/v1/compact")]


def rule_key(method: str, path: str) -> tuple[str, str]:
    return ("GET" if method == "HEAD" else method, path)


# -- the principal ----------------------------------------------------------------------


def basic_credentials(header: str) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic`` value; None if it is not one."""
    if not header.startswith("Basic "):
        return None
    try:
        user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


@dataclass
class RequestGate:
    """One request's principal and its questions to the authorizer."""

    principal: str = ANONYMOUS
    host: str = "?"
    rule: Rule | None = None
    authorizer: Authorizer | None = None
    what: str = "admin HTTP"

    def allowed(
        self,
        name: str,
        rtype: ResourceType | None = None,
        op: Op | None = None,
        log_denied: bool = True,
    ) -> bool:
        """May the principal do the rule's operation (or ``rtype``/``op``) on ``name``?"""
        if self.authorizer is None:
            return True
        rtype = rtype if rtype is not None else (self.rule.rtype if self.rule else None)
        op = op if op is not None else (self.rule.op if self.rule else None)
        if rtype is None or op is None:
            return True
        return authorize(
            self.authorizer, self.principal, self.host, op, rtype, name, self.what, log_denied
        )

    def visible(
        self, names: Iterable[Any], key: Callable[[Any], str] = str, beside: bool = False
    ) -> list[Any]:
        """The items of a listing the principal may see, by the rule's operation (or,
        ``beside``, by its ``lists``: the topics on a group's page), unlogged as Kafka's
        filtered listings are."""
        items = list(names)
        if self.authorizer is None or self.rule is None:
            return items
        by = self.rule.lists if beside else self.rule.own
        if by is None:
            return items
        rtype, op = by
        return [x for x in items if self.allowed(key(x), rtype, op, log_denied=False)]

    def refusal(self, name: str) -> dict[str, Any] | None:
        """The 403 body when the rule's operation on ``name`` is refused, else None."""
        if self.allowed(name):
            return None
        return denied_body(self.principal, self.rule, name)


def denied_body(principal: str, rule: Rule | None, name: str) -> dict[str, Any]:
    """Kafka's *_AUTHORIZATION_FAILED, named, without a byte of the resource."""
    if rule is None or rule.rtype is None or rule.op is None:
        return {"error": "not authorized"}
    code = {
        TOPIC: "TOPIC_AUTHORIZATION_FAILED",
        GROUP: "GROUP_AUTHORIZATION_FAILED",
    }.get(rule.rtype, "CLUSTER_AUTHORIZATION_FAILED")
    return {"error": f"{code}: {principal} may not {rule.op.name} {rule.rtype.name} {name[:200]!r}"}


def gate_of(request: Any) -> RequestGate:
    """The request's gate (a bare app without the gate: anonymous, all allowed)."""
    return request.scope.get("kompakt.gate") or RequestGate()


def named_resource(rule: Rule, path_params: dict[str, Any], query: dict[str, str]) -> str | None:
    """The resource name the gate checks before the handler runs (None: nothing to check
    up front: a listing, a body, or a page asked without ?topic=)."""
    if rule.source == CLUSTER:
        return CLUSTER_NAME
    if rule.source == PATH and rule.rtype is not None:
        return str(path_params.get(rule.rtype.name.lower(), ""))
    if rule.source == QUERY:
        return query.get("topic") or None
    return None


# -- the form token --------------------------------------------------------------------


@dataclass
class FormTokens:
    """A per-principal token for the forms the console posts (HMAC of the principal
    under a secret made at start): a page of another origin cannot read it, so it
    cannot forge a form. Not stored anywhere; a restart makes a new one."""

    secret: bytes = field(default_factory=lambda: os.urandom(32))

    def token(self, principal: str) -> str:
        return hmac.new(self.secret, principal.encode(), hashlib.sha256).hexdigest()[:40]

    def ok(self, principal: str, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.token(principal), given or "")


def form_token(request: Any) -> str:
    """The token the console's forms carry for this request's principal."""
    tokens: FormTokens | None = request.scope.get("kompakt.form_tokens")
    return tokens.token(gate_of(request).principal) if tokens is not None else ""


def form_token_ok(request: Any, given: str | None) -> bool:
    tokens: FormTokens | None = request.scope.get("kompakt.form_tokens")
    return tokens is None or tokens.ok(gate_of(request).principal, given)


FORBIDDEN = HTTPStatus.FORBIDDEN


# -- the middleware ------------------------------------------------------------------------


@dataclass
class GateSettings:
    """What the gate needs from the broker: ``authenticate`` (None: no auth, every
    request is User:ANONYMOUS, or its client certificate's through ``mapper``), the broker's authorizer (looked up per request: None
    allows all), whether /metrics is open, the Host names served and the base of the
    failed-login delay."""

    authenticate: Callable[[str, str], str | None] | None = None
    authorizer: Callable[[], Authorizer | None] = lambda: None
    metrics_public: bool = False
    allowed_hosts: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})
    on_failure: Callable[[str], None] = lambda reason: None
    failed_delay_ms: int = 100
    mapper: PrincipalMapper | None = None  # https asking client certificates: their rules


def _json_error(_request: Any, status: int, message: str) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=int(status))


class Gate:
    """ASGI middleware in front of the Starlette app: Host, Origin and content type
    (:mod:`kompakt.broker.http_browser`), then the principal, then the route's rule
    for a resource named in the path or query; the handler asks for the rest."""

    def __init__(
        self, app: Any, settings: GateSettings, error_page: Callable[..., Any] | None = None
    ):
        """``error_page(request, status, message)`` renders a refusal (the console's,
        passed in by the app: the gate sits below the console and imports none of it)."""
        from kompakt.broker.http_browser import LoginThrottle

        self.app = app
        self.s = settings
        self.error_page = error_page or _json_error
        self.throttle = LoginThrottle(settings.failed_delay_ms)
        self.tokens = FormTokens()

    def match(self, scope: dict[str, Any]) -> tuple[bool, Rule | None, dict[str, Any]]:
        """(a route matched, its rule, its path parameters)."""
        from starlette.routing import Match

        for route in self.app.routes:
            found, child = route.matches(scope)
            if found == Match.FULL:
                key = rule_key(scope["method"], route.path)
                return True, RULES.get(key), child.get("path_params", {})
        return False, None, {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.datastructures import QueryParams

        from kompakt.broker import http_browser as browser

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = browser.with_security_headers(send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refused = browser.host_refusal(headers.get("host"), scope, self.s.allowed_hosts)
        if refused:
            await self.answer(scope, receive, send, HTTPStatus.MISDIRECTED_REQUEST, refused)
            return
        matched, rule, params = self.match(scope)
        if scope["method"] in browser.UNSAFE_METHODS:
            refused = browser.origin_refusal(headers, scope)
            if refused:
                await self.answer(scope, receive, send, FORBIDDEN, refused)
                return
            refused = browser.content_refusal(
                headers.get("content-type"), rule.body if rule else ""
            )
            if refused:
                status = HTTPStatus.UNSUPPORTED_MEDIA_TYPE
                await self.answer(scope, receive, send, status, refused)
                return
        public = self.s.metrics_public and rule is RULES[("GET", "/metrics")]
        principal = ANONYMOUS
        if self.s.authenticate is not None and not public:
            principal = await self.authenticate(scope, receive, send, headers)
            if principal is None:
                return
        elif self.s.mapper is not None and not public:
            principal = await self.certificate(scope, receive, send)
            if principal is None:
                return
        client = (scope.get("client") or ("?",))[0]
        gate = RequestGate(
            principal,
            client,
            rule,
            None if public else self.s.authorizer(),
            f"{scope['method']} {scope['path'][:200]}",
        )
        scope["kompakt.gate"] = gate
        scope["kompakt.form_tokens"] = self.tokens
        if matched and rule is None:  # a route nobody gave a rule: nobody's but a super user's
            if gate.authorizer is not None and principal not in gate.authorizer.super_users:
                await self.answer(scope, receive, send, FORBIDDEN, "route has no rule")
                return
        if rule is not None:
            name = named_resource(rule, params, dict(QueryParams(scope["query_string"])))
            if name is not None and not gate.allowed(name):
                body = denied_body(principal, rule, name)
                await self.answer(scope, receive, send, FORBIDDEN, body["error"])
                return
        await self.app(scope, receive, send)

    async def authenticate(
        self, scope: Any, receive: Any, send: Any, headers: dict[str, str]
    ) -> str | None:
        """``User:<name>`` for good Basic credentials; else answers 401 and None.
        A failure is counted (``kompakt_auth_failures_total{mechanism="HTTP_BASIC"}``)
        and makes the address's next attempt wait (:class:`LoginThrottle`)."""
        import asyncio
        import logging

        from starlette.concurrency import run_in_threadpool

        client = (scope.get("client") or ("?",))[0]
        header = headers.get("authorization", "")
        creds = basic_credentials(header)
        reason = "malformed" if header else "no_credentials"
        if creds is not None:
            wait = self.throttle.delay_s(client)
            if wait:
                await asyncio.sleep(wait)
            assert self.s.authenticate is not None
            failed = await run_in_threadpool(self.s.authenticate, *creds)
            if failed is None:
                self.throttle.success(client)
                return f"User:{creds[0]}"
            reason = failed
        if reason != "no_credentials":  # a browser's first request asks without any
            self.throttle.failure(client)
        logging.getLogger(__name__).info("admin request from %s refused: %s", client, reason)
        self.s.on_failure(reason)
        await self.answer(
            scope,
            receive,
            send,
            HTTPStatus.UNAUTHORIZED,
            "authentication required",
            {"WWW-Authenticate": 'Basic realm="kompakt", charset="UTF-8"'},
        )
        return None

    async def certificate(self, scope: Any, receive: Any, send: Any) -> str | None:
        """The client certificate's principal (User:ANONYMOUS without one, as a Kafka SSL
        listener with ``ssl.client.auth=requested``); a subject no rule maps answers 401
        and None, counted as Kafka counts that failed authentication."""
        import logging

        assert self.s.mapper is not None
        der = (scope.get("state") or {}).get(PEER_CERT)
        if not der:
            return ANONYMOUS
        try:
            return cert_principal(self.s.mapper, der)
        except NoMatchingRule as exc:
            client = (scope.get("client") or ("?",))[0]
            logging.getLogger(__name__).info("admin request from %s refused: %s", client, exc)
            self.s.on_failure("no_matching_rule")
            status = HTTPStatus.UNAUTHORIZED
            await self.answer(scope, receive, send, status, "no principal for the certificate")
            return None

    async def answer(
        self,
        scope: Any,
        receive: Any,
        send: Any,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        """A refusal: JSON, or the console's error page for a browser; never data."""
        from starlette.requests import Request

        scope.setdefault("app", self.app)
        response = self.error_page(Request(scope, receive), status, message)
        for k, v in (headers or {}).items():
            response.headers[k] = v
        await response(scope, receive, send)
