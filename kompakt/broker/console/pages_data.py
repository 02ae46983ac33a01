"""The data pages (key inspector, message browser, consumer groups, configs): routes
added to the console app by :func:`kompakt.broker.console.app.build_app`."""

from __future__ import annotations

ROUTES: list = []
