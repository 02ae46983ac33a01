"""The console in a real browser: Debian's headless Chromium driven by Playwright
(``executable_path``, no downloaded browser; ``scripts/ensure-chromium.sh`` installs it).

Each page is loaded against a running broker with data, "compact now" is clicked, and
the test asserts on what the page shows once the clean has finished. Screenshots of
each page at 1280x800 go to ``test-output/console/`` for a person to look at.
"""

from __future__ import annotations

import re


def test_overview_shows_topics_and_the_cleaner_queue(page, shot, console_url):
    page.goto(console_url + "/")
    row = page.locator('tr[data-topic="users"]')
    assert "compact" in row.inner_text() and "2" in row.inner_text()
    assert page.locator('tr[data-topic="events"]').inner_text().count("–") >= 2
    # never-cleaned compacted partitions are due (dirty ratio 1.0), filthiest first
    assert "users-" in page.locator("#queue").inner_text()
    shot(page, "overview")


def test_partition_page_explains_min_lag(page, shot, console_url):
    page.goto(console_url + "/topics/slow/0")
    assert page.locator("#uncleanable-why").inner_text() == "min.compaction.lag.ms"
    assert page.locator(".seg.held").count() >= 1 and page.locator(".seg.active").count() == 1
    shot(page, "partition-min-lag")


def test_dry_run_then_compact_now_shows_the_clean(page, shot, console_url):
    """Click the dry run (a preview, nothing removed), then "compact now": the page shows
    the result line, a new row in the cleans table, a clean head in the strip, and the
    tombstones that a first clean keeps (Kafka keeps them for delete.retention.ms)."""
    page.goto(console_url + "/topics/users/0")
    assert page.locator(".seg.dirty").count() >= 1 and page.locator(".seg.clean").count() == 0
    assert page.locator("#no-cleans").count() == 1
    tombstones = int(page.locator("#tombstones").inner_text())
    assert tombstones > 0
    assert int(page.locator("#tomb-no-horizon").inner_text()) == tombstones

    page.click("#dry-run")
    result = page.locator("#compact-result")
    result.filter(has_text="would remove").wait_for(timeout=60_000)
    preview = re.search(r"would remove (\d+) records and (\d+) tombstones", result.inner_text())
    assert preview and int(preview.group(1)) > 0
    assert page.locator("#no-cleans").count() == 1  # a dry run is not a clean
    shot(page, "partition-dry-run")

    page.click("#compact-now")
    result.filter(has_text="Cleaned users-0").wait_for(timeout=120_000)
    removed = re.search(r"removed (\d+) records", result.inner_text())
    assert removed and int(removed.group(1)) == int(preview.group(1))
    rows = page.locator("tr.clean-row")
    assert rows.count() == 1
    assert int(rows.first.locator("td.removed").inner_text()) >= int(removed.group(1))
    assert page.locator(".seg.clean").count() >= 1  # the cleaned head
    assert page.locator("#no-cleans").count() == 0
    assert page.locator("#compact-status").inner_text() == "done"
    shot(page, "partition-after-compact")
    page.reload()  # what a fresh visit shows: the clean in the history and the chart
    assert page.locator("tr.clean-row").count() == 1
    assert page.locator("svg.chart line.clean-mark").count() >= 1
    # KIP-534: the first clean keeps each key's latest tombstone (older ones are
    # superseded) and gives it a delete horizon, clean time + delete.retention.ms; a
    # tombstone in the active segment, which no clean reaches, has none yet
    kept = int(page.locator("#tombstones").inner_text())
    assert 0 < kept < tombstones
    no_horizon = int(page.locator("#tomb-no-horizon").inner_text())
    waiting = int(page.locator("#tomb-waiting").inner_text())
    assert waiting > 0 and no_horizon + waiting == kept
    assert int(page.locator("#tomb-passed").inner_text()) == 0
    assert "the first passes at" in page.locator("#horizons").inner_text()


def test_hostile_input_shows_a_message_in_the_page(page, shot, console_url):
    for path, fragment in [
        ("/topics/users/abc", "partition must be an integer"),
        ("/topics/users/-3", "at least 0"),
        ("/topics/nope/0", "nope"),
    ]:
        resp = page.goto(console_url + path)
        assert resp is not None and resp.status in (400, 404)
        assert fragment in page.locator("#error-message").inner_text()
    shot(page, "error")
