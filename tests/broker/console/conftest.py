"""A broker with data for the console tests (HTTP and browser), shared per module.

Topics: ``users`` (compacted, 2 partitions, 1 KiB segments, keys overwritten and some
deleted, so there are dirty segments and tombstones), ``slow`` (compacted with a one-day
``min.compaction.lag.ms``: nothing is cleanable, and the page must say why) and
``events`` (``delete`` policy). The background cleaner runs one pass at start-up (no
topic yet) and then backs off for ten minutes, so only the tests clean.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kompakt.broker.app import start_test_broker

KEYS = 20
RECORDS = 240


def produce_data(bootstrap: str) -> None:
    """Overwrites of 20 keys, every 7th record a tombstone, in small batches (so the
    1 KiB segments roll: a clean needs sealed segments)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 4})
    for i in range(RECORDS):
        key = f"user-{i % KEYS:02d}".encode()
        value = None if i % 7 == 6 else f'{{"n": {i}, "name": "user {i % KEYS}"}}'.encode()
        p.produce("users", value, key, partition=(i % KEYS) % 2)
        p.produce("slow", b"x" * 40, key)
        if i % 4 == 3:
            p.flush(10)
    for i in range(50):
        p.produce("events", f"event {i}".encode())
    assert p.flush(10) == 0


def make_broker(tmp_path_factory, name: str, **overrides: str):
    data = tmp_path_factory.mktemp(name)
    b = start_test_broker(
        str(data),
        **{"log.cleaner.backoff.ms": "600000", **overrides},
    )
    compact = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    b.logs.create_topic("users", 2, {**compact, "min.cleanable.dirty.ratio": "0.99"})
    b.logs.create_topic("slow", 1, {**compact, "min.compaction.lag.ms": "86400000"})
    b.logs.create_topic("events", 1, {"cleanup.policy": "delete"})
    produce_data(b.bootstrap)
    return b


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory):
    """A broker whose console may change data (``kompakt.admin.console.writes=true``)."""
    b = make_broker(tmp_path_factory, "console", **{"kompakt.admin.console.writes": "true"})
    yield b
    b.stop()


@pytest.fixture(scope="module")
def console_url(console_broker) -> str:
    return f"http://127.0.0.1:{console_broker.admin_port}"


@pytest.fixture(scope="module")
def readonly_broker(tmp_path_factory):
    """The same data with the console's default: read-only."""
    b = make_broker(tmp_path_factory, "readonly")
    yield b
    b.stop()


# -- the browser: headless Chromium for the browser test modules ------------------------
CHROMIUM = os.environ.get("KOMPAKT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[3] / "test-output" / "console"


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright (``executable_path``: no downloaded browser;
    ``scripts/ensure-chromium.sh`` installs it), one per browser test module: not per
    session, because Playwright's sync API keeps an event loop running in the main
    thread while it is open, and later tests' ``asyncio.run`` (aiokafka) would fail."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} missing: run scripts/ensure-chromium.sh")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh 1280x800 page; a JavaScript error on it fails the test."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    ctx.close()
    assert errors == [], f"JavaScript errors: {errors}"


@pytest.fixture
def shot():
    """Save the page's screenshot as ``test-output/console/<name>.png`` for a person."""

    def save(page, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"))

    return save
