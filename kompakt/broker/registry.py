"""The table of Kafka APIs the broker answers, open to other modules.

A handler is ``handler(ctx: RequestContext, request) -> response``: it gets the decoded
kio request and returns the response body as plain data (see
:func:`kompakt.broker.protocol.build`), None for no response (Produce acks=0), or a
:class:`DelayedResponse` for an answer that waits for data (a long-polling Fetch). A
plain function may block on the log: the server runs it on a worker thread, as Kafka's
request handler threads do. A coroutine function is awaited on the event loop instead;
that is for code whose state the loop owns (the group coordinator).

Other modules (e.g. the group coordinator) add their APIs with :meth:`ApiRegistry.register`;
ApiVersions advertises exactly what is registered (h11-style dispatch from one table).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kio.schema.index import api_key_map

Response = Mapping[str, Any]


@dataclass(frozen=True)
class DelayedResponse:
    """An answer that waits until enough data is there or ``timeout`` (seconds) passes:
    Kafka's ``DelayedFetch`` in the fetch purgatory, watched on partition ``keys``.

    ``poll()`` reads once and returns ``(response, complete)``; the server calls it on a
    worker thread after it starts watching ``keys``, again after each append to one of
    them, and a last time at the timeout, and answers with the first complete response
    (or the last one). ``poll`` must be safe to call from any thread.
    """

    keys: tuple[tuple[str, int], ...]
    timeout: float
    poll: Callable[[], tuple[Response, bool]]


Result = Response | DelayedResponse | None
Handler = Callable[[Any, Any], Result] | Callable[[Any, Any], Awaitable[Result]]


@dataclass(frozen=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    advertised_min: int
    # a coroutine function, awaited on the loop (decided once, not per request)
    on_loop: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_loop", inspect.iscoroutinefunction(self.handler))

    @property
    def name(self) -> str:
        return api_name(self.api_key)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


@cache  # every request names its API (metrics, logs); keys are int16, so it stays small
def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Produce``, ``ApiVersions``), ``api_N`` for unknown keys."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"api_{api_key}"
    return "".join(p.capitalize() for p in name.split("_"))


# wraps a registered handler (api_key, handler) -> handler: the authorizer's one check
Guard = Callable[[int, Handler], Handler]


class ApiRegistry:
    def __init__(self) -> None:
        self._apis: dict[int, ApiHandler] = {}
        self._raw: dict[int, Handler] = {}
        self._guard: Guard | None = None

    def set_guard(self, guard: Guard | None) -> None:
        """Put ``guard`` around every handler, now and registered later (the authorizer:
        DESIGN's "one check called by the dispatch table for every API")."""
        self._guard = guard
        for key, a in list(self._apis.items()):
            handler = self._raw[key] if guard is None else guard(key, self._raw[key])
            self._apis[key] = ApiHandler(
                key, a.min_version, a.max_version, handler, a.advertised_min
            )

    def unguarded(self, api_key: int) -> Handler:
        """The handler as registered, without the guard."""
        return self._raw[api_key]

    def register(
        self,
        api_key: int,
        min_version: int,
        max_version: int,
        handler: Handler,
        *,
        advertised_min: int | None = None,
    ) -> None:
        """Serve ``api_key`` versions ``min_version..max_version`` with ``handler``.

        ``advertised_min`` lets ApiVersions advertise a lower minimum than is served
        (Kafka 4 advertises Produce from v0 but rejects v0-2; KAFKA-18659).
        """
        if min_version > max_version:
            raise ValueError(f"bad version range {min_version}..{max_version}")
        self._raw[api_key] = handler
        if self._guard is not None:
            handler = self._guard(api_key, handler)
        self._apis[api_key] = ApiHandler(
            api_key,
            min_version,
            max_version,
            handler,
            min_version if advertised_min is None else advertised_min,
        )

    def unregister(self, api_key: int) -> None:
        self._apis.pop(api_key, None)
        self._raw.pop(api_key, None)

    def keys(self) -> list[int]:
        return sorted(self._apis)

    def get(self, api_key: int) -> ApiHandler | None:
        return self._apis.get(api_key)

    def advertised(self) -> list[dict[str, int]]:
        return [
            {"api_key": a.api_key, "min_version": a.advertised_min, "max_version": a.max_version}
            for a in sorted(self._apis.values(), key=lambda a: a.api_key)
        ]

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._apis
