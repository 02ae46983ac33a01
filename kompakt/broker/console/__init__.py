"""The web console of the admin listener (issue 18).

:mod:`~kompakt.broker.console.app` builds the ASGI application (Starlette routes, Jinja2
templates, static files shipped in the wheel) that serves the JSON admin API, the
Prometheus text and the console pages; :mod:`~kompakt.broker.console.pages_compaction`
is the overview and the partition pages, :mod:`~kompakt.broker.console.pages_data` the
data pages (keys, messages, groups, configs), :mod:`~kompakt.broker.console.history` the
bounded per-partition history the charts draw.
"""
