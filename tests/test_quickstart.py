"""The README's quick start, run verbatim against `kompakt serve`, prints what it promises.

The quick start talks to the default ports (9092, 9644), so this test needs them free;
it starts the broker the way `make serve` does (from the project folder, default
listeners) on a temporary data dir, and runs the README's shell block unchanged with
bash. A user who runs it slowly must see the same output: the promised lines depend only
on Kafka's rules (latest value per key; a tombstone kept for `delete.retention.ms`,
one day by default, after the clean that first saw it), not on timing.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from shared_kit import wait_for_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def quickstart_block() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start") :]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat missing (make test installs it)")
def test_readme_quickstart_prints_latest_value_per_key_and_bobs_tombstone(tmp_path):
    if not (port_free(9092) and port_free(9644)):
        pytest.skip("the quick start uses ports 9092 and 9644, which are taken here")
    kompakt = Path(sys.executable).parent / "kompakt"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    broker = subprocess.Popen(
        [str(kompakt), "serve", "--override", f"log.dirs={tmp_path / 'data'}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(9092, broker)
        wait_for_port(9644, broker)
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", quickstart_block()],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr
        consumed = [
            line.split(" ", 1)[1]
            for line in res.stdout.splitlines()
            if re.fullmatch(r"\d+ \w+=.*", line)
        ]
        assert consumed == ["alice=city-40", "carol=city-80", "bob=NULL", "dave=Berlin"], res.stdout
        assert "kompakt_log_cleaner" in res.stdout
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            _, err = broker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            broker.kill()
            _, err = broker.communicate()
    assert broker.returncode == 0, err
