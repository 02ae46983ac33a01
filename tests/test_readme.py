"""The README's embedded-API example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_starts_with_the_two_setup_commands():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1).splitlines()
    assert [line.split()[0:2] for line in first_block] == [["make", "serve"], ["make", "test"]]


def test_readme_embedded_api_example_runs(tmp_path):
    (block,) = python_blocks()[:1]
    res = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert "0 b'alice' b'London'" in res.stdout


def test_ci_runs_exactly_the_readme_test_command():
    text = README.read_text()
    readme_line = re.search(r"```sh\n(.*?)```", text, re.S).group(1).splitlines()[1]
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert readme_line in ci


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def test_readme_secure_deployment_server_properties_start_a_broker(tmp_path):
    """The "Secure deployment" server.properties parses, and its listeners come up with
    the README's TLS keys (paths swapped for certificates made here, ports for free ones)
    and take a SCRAM login by the README's confluent-kafka client config."""
    import trustme
    from confluent_kafka.admin import AdminClient

    from kompakt.broker.app import BrokerThread
    from kompakt.broker.config import BrokerConfig
    from kompakt.log.config import read_properties

    section = _section("Secure deployment")
    server_block, client_block = re.findall(r"```properties\n(.*?)```", section, re.S)
    section_python = re.findall(r"```python\n(.*?)```", section, re.S)
    (tmp_path / "server.properties").write_text(server_block)
    props = dict(read_properties(tmp_path / "server.properties"))
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem")
    )
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    swap = {
        "/etc/kompakt/server.pem": str(tmp_path / "server.pem"),
        "/etc/kompakt/ca.pem": str(tmp_path / "ca.pem"),
        "/var/lib/kompakt": str(tmp_path / "data"),
        ":9092": ":0",
        ":9093": ":0",
        ":9644": ":0",
        "0.0.0.0": "127.0.0.1",
    }
    for k, v in list(props.items()):
        for a, b in swap.items():
            v = v.replace(a, b)
        props[k] = v
    props["advertised.listeners"] = ""
    props["kompakt.cleaner.engine"] = "local"
    with BrokerThread(BrokerConfig.from_mapping(props)) as b:
        port = b.broker.server.ports["EXTERNAL"]
        ns: dict = {}
        exec(section_python[0], ns)
        conf = dict(ns["secure_client"])
        conf.update(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "ssl.ca.location": str(tmp_path / "ca.pem"),
                "sasl.username": "admin",
                "sasl.password": "change-me",
            }
        )
        assert AdminClient(conf).list_topics(timeout=10).brokers
    kcat = dict(line.split("=", 1) for line in client_block.strip().splitlines())
    assert kcat["security.protocol"] == "SASL_SSL" and kcat["sasl.mechanisms"] == "SCRAM-SHA-512"
    exec(section_python[1], ns)
    assert ns["kafka_python_client"]["security_protocol"] == "SASL_SSL"
