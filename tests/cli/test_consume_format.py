"""``kompakt consume --format text|json|hex``: binary keys and values are never printed
altered without a sign (kcat prints raw bytes; a terminal tool must show them somehow).

Records are produced with confluent-kafka (a real Kafka client) to a real broker, read
back through the broker and offline from its data dir, and decoded byte for byte.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_kit import assert_one_line_error
from confluent_kafka import Producer
from typer.testing import CliRunner

from kompakt.broker.app import BrokerThread, start_test_broker
from kompakt.cli.main import app

runner = CliRunner()

# every byte value, invalid UTF-8, a lone surrogate's encoding, tab/newline, and text
RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (bytes(range(256)), b"\xff\xfe\x00\x80", [("h", b"\xc3\x28"), ("n", None)]),
    (b"caf\xc3\xa9", "caf\u00e9 \u2603".encode(), [("t", b"text")]),
    (b"\xed\xa0\x80", b"", []),
    (b"tab\tnew\nline", None, []),
    (None, b"\x00\x01\x02", []),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = start_test_broker(str(tmp_path_factory.mktemp("broker")))
    try:
        b.logs.create_topic("bin", 1, {})
        _produce(b.bootstrap)
        yield b
    finally:
        b.stop()


def _produce(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value, headers in RECORDS:
        p.produce("bin", value=value, key=key, headers=headers)
    assert p.flush(10) == 0


@pytest.fixture(scope="module")
def offline_copy(broker: BrokerThread, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The broker's data dir copied while idle: the offline reader reads its files."""
    import shutil

    broker.logs.flush_all()
    dst = tmp_path_factory.mktemp("copy") / "data"
    shutil.copytree(broker.logs.dir, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def consume(transport: list[str], *fmt: str):
    r = runner.invoke(app, ["consume", "bin", *transport, *fmt])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


@pytest.fixture(params=["broker", "offline"])
def transport(request, broker: BrokerThread, offline_copy: Path) -> list[str]:
    if request.param == "broker":
        return ["--bootstrap-server", broker.bootstrap]
    return ["--data-dir", str(offline_copy)]


def _decode(text: str | None, encoding: str | None) -> bytes | None:
    if text is None:
        return None
    return base64.b64decode(text) if encoding == "base64" else text.encode("utf-8")


@pytest.mark.parametrize("flag", [("--format", "json"), ("--json",), ("-f", "json")])
def test_json_round_trips_every_byte(transport: list[str], flag: tuple[str, ...]):
    got = []
    for line in consume(transport, *flag).splitlines():
        obj = json.loads(line)
        headers = [(h["key"], _decode(h["value"], h.get("valueEncoding"))) for h in obj["headers"]]
        got.append(
            (
                _decode(obj["key"], obj.get("keyEncoding")),
                _decode(obj["value"], obj.get("valueEncoding")),
                headers,
            )
        )
    assert got == RECORDS


def test_json_marks_base64_and_keeps_utf8_text_as_text(transport: list[str]):
    objs = [json.loads(line) for line in consume(transport, "--format", "json").splitlines()]
    assert (objs[0]["keyEncoding"], objs[0]["valueEncoding"]) == ("base64", "base64")
    assert objs[0]["headers"][0] == {"key": "h", "value": "wyg=", "valueEncoding": "base64"}
    assert objs[0]["headers"][1] == {"key": "n", "value": None}
    assert objs[1]["key"] == "caf\u00e9" and "keyEncoding" not in objs[1]
    assert objs[2]["keyEncoding"] == "base64"  # an encoded surrogate is not UTF-8
    assert objs[3]["value"] is None and "valueEncoding" not in objs[3]


def test_hex_round_trips_every_byte(transport: list[str]):
    lines = consume(transport, "--format", "hex").splitlines()
    got = [tuple(bytes.fromhex(part) for part in line.split("\t")) for line in lines]
    # null prints as empty in hex as in text; --format json tells null from empty
    expected = [(k or b"", v or b"") for k, v, _h in RECORDS]
    assert got == expected


def test_text_escapes_bytes_that_are_not_utf8_instead_of_replacing_them(transport: list[str]):
    out = consume(transport)
    assert "\ufffd" not in out
    assert "\x7f\\x80\\x81" in out  # the key of all 256 bytes: ASCII as is, the rest escaped
    assert "\t\\xff\\xfe\x00\\x80\n" in out
    assert "\ncaf\u00e9\tcaf\u00e9 \u2603\n" in out


def test_json_and_another_format_are_exclusive(transport: list[str]):
    r = runner.invoke(app, ["consume", "bin", *transport, "--json", "--format", "hex"])
    assert_one_line_error(r, "--json", "--format hex")
