"""The README's embedded-API example runs as written."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from shared_kit import wait_for

README = Path(__file__).resolve().parents[1] / "README.md"
SECURITY = README.parent / "docs" / "security.md"


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
    """A section of docs/security.md, where the README's secure deployment lives."""
    text = SECURITY.read_text() + "\n## end\n"
    start = text.index(f"## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def _secure_props(server_block: str, tmp_path: Path) -> dict[str, str]:
    """The README's secure server.properties with its paths swapped for files under
    ``tmp_path``, its ports for free ones and its public address for loopback."""
    from kompakt.log.config import read_properties

    (tmp_path / "server.properties").write_text(server_block)
    props = dict(read_properties(tmp_path / "server.properties"))
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
    return props


def test_readme_secure_deployment_server_properties_start_a_broker(tmp_path):
    """The "Secure deployment" server.properties parses, and its listeners come up with
    the README's TLS keys (paths swapped for certificates made here, ports for free ones)
    and take a SCRAM login by the README's confluent-kafka client config."""
    import trustme
    from confluent_kafka.admin import AdminClient

    from kompakt.broker.app import BrokerThread
    from kompakt.broker.config import BrokerConfig

    section = _section("Secure deployment")
    server_block, client_block = re.findall(r"```properties\n(.*?)```", section, re.S)
    section_python = re.findall(r"```python\n(.*?)```", section, re.S)
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem")
    )
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    props = _secure_props(server_block, tmp_path)
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


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_readme_certificate_recipe_and_super_user_command_config_work(tmp_path):
    """The "Secure deployment" openssl recipe, run as written, makes certificates the
    README's broker serves (strict X.509 checks, as Python 3.13's default context makes)
    and a client certificate mutual TLS maps to User:CN=alice; with the ACLs section's
    authorizer on, the CLI is refused on PLAINTEXT and works with the README's super
    user file through --command-config."""
    from confluent_kafka.admin import AdminClient

    from kompakt.broker.app import BrokerThread
    from kompakt.broker.config import BrokerConfig

    secure = _section("Secure deployment")
    (recipe,) = re.findall(r"```sh\n(.*?)```", secure, re.S)
    done = subprocess.run(["bash", "-e", "-c", recipe], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    server_block = re.findall(r"```properties\n(.*?)```", secure, re.S)[0]
    authorizer_block, admin_block = re.findall(r"```properties\n(.*?)```", _section("ACLs"), re.S)
    props = _secure_props(server_block + authorizer_block, tmp_path)
    props["listeners"] += ",MTLS://127.0.0.1:0"
    props["listener.security.protocol.map"] += ",MTLS:SSL"
    props["listener.name.mtls.ssl.client.auth"] = "required"
    admin_file = tmp_path / "admin.properties"
    admin_file.write_text(admin_block.replace("/etc/kompakt/ca.pem", str(tmp_path / "ca.pem")))
    with BrokerThread(BrokerConfig.from_mapping(props)) as b:
        ports = b.broker.server.ports
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        ctx.verify_flags |= ssl.VERIFY_X509_STRICT
        ctx.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
        for name in ("localhost", "127.0.0.1"):
            with socket.create_connection(("127.0.0.1", ports["MTLS"]), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname=name):
                    pass
        mtls = {
            "bootstrap.servers": f"127.0.0.1:{ports['MTLS']}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(tmp_path / "ca.pem"),
            "ssl.certificate.location": str(tmp_path / "client.crt"),
            "ssl.key.location": str(tmp_path / "client.key"),
        }
        # Kept open: the broker forgets a connection (and its principal) once it closes,
        # and a client that is dropped at once closes while the check below runs.
        mtls_client = AdminClient(mtls)
        assert mtls_client.list_topics(timeout=10).brokers

        async def principals() -> list[str]:  # on the broker's loop, which owns _conns
            return [c.principal for c in b.broker.server._conns.values()]

        # librdkafka answers list_topics from its bootstrap connection, then closes it
        # and opens one to the broker the metadata named: wait for that one, not a gap
        wait_for(
            lambda: (
                "User:CN=alice" in asyncio.run_coroutine_threadsafe(principals(), b.loop).result(10)
            ),
            "the mTLS client's connection as User:CN=alice",
        )
        del mtls_client

        def kompakt(*args: str) -> subprocess.CompletedProcess:
            cmd = [sys.executable, "-m", "kompakt.cli.main", *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

        plain = kompakt("acl", "list", "-b", f"127.0.0.1:{ports['INTERNAL']}")
        assert plain.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in plain.stderr
        external = f"127.0.0.1:{ports['EXTERNAL']}"
        ok = kompakt("--command-config", str(admin_file), "acl", "list", "-b", external)
        assert ok.returncode == 0, ok.stderr


README_KEY, README_VALUE = b"k-readme-31", b"README-RECORD-BYTES-7c1e"
ADMIN_PROBES = [  # the admin listener's pages of data, as a stranger would try them
    "/messages?topic=orders&partition=0",
    f"/keys?topic=orders&partition=0&key={README_KEY.decode()}",
    "/v1/partitions",
    "/metrics",
    "/topics/orders/0",
    "/configs/orders",
    "/",
]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_readme_secure_example_refuses_strangers_on_the_admin_listener_and_kafka_port(tmp_path):
    """The "Secure deployment" server.properties as written (certificates by its openssl
    recipe; ports swapped for free ones, 0.0.0.0 for loopback) refuses a stranger: every
    admin page of data answers 401 without credentials or with a wrong password and
    carries no record byte, and the SASL_SSL port closes a connection that asks for
    Metadata before authenticating (Kafka's SaslServerAuthenticator). The super user
    reads. With the ACLs section's authorizer added, a SCRAM user without ACLs (made with
    the README's `kompakt user create`) is refused 403 with Kafka's *_AUTHORIZATION_FAILED
    and no record byte; listings hide the topic, as Metadata does."""
    import httpx
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from raw_kafka import API, encode_request

    from kompakt.broker.app import BrokerThread
    from kompakt.broker.config import BrokerConfig

    secure = _section("Secure deployment")
    (recipe,) = re.findall(r"```sh\n(.*?)```", secure, re.S)
    done = subprocess.run(["bash", "-e", "-c", recipe], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    server_block = re.findall(r"```properties\n(.*?)```", secure, re.S)[0]
    authorizer_block = re.findall(r"```properties\n(.*?)```", _section("ACLs"), re.S)[0]
    admin_pw = dict(
        re.findall(r"^kompakt\.sasl\.bootstrap\.users=(\w+):(\S+)$", server_block, re.M)
    )
    assert admin_pw == {"admin": "change-me"}
    tls = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))

    def probe(b, auth: tuple[str, str] | None) -> dict[str, httpx.Response]:
        base = f"https://127.0.0.1:{b.admin_port}"
        with httpx.Client(verify=tls, auth=auth, timeout=30) as client:
            return {path: client.get(base + path) for path in ADMIN_PROBES}

    def refused(r: httpx.Response, status: int) -> None:
        assert r.status_code == status, (r.request.url, r.status_code, r.text[:200])
        assert README_VALUE not in r.content and README_KEY not in r.content, r.text[:300]

    with BrokerThread(BrokerConfig.from_mapping(_secure_props(server_block, tmp_path))) as b:
        ports = b.broker.server.ports
        internal = f"127.0.0.1:{ports['INTERNAL']}"
        kafka_admin = AdminClient({"bootstrap.servers": internal})
        for f in kafka_admin.create_topics([NewTopic("orders", 1, 1)]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": internal})
        p.produce("orders", README_VALUE, README_KEY, partition=0)
        assert p.flush(10) == 0
        user = subprocess.run(
            [sys.executable, "-m", "kompakt.cli.main", "user", "create", "alice"]
            + ["-b", internal, "--password-stdin"],
            input="alice-secret\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert user.returncode == 0, user.stderr

        for path, r in probe(b, None).items():
            refused(r, 401)
            assert r.headers["www-authenticate"].startswith("Basic "), path
        refused(probe(b, ("admin", "wrong"))["/messages?topic=orders&partition=0"], 401)
        for path, r in probe(b, ("admin", admin_pw["admin"])).items():
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
        assert README_VALUE in probe(b, ("admin", admin_pw["admin"]))[ADMIN_PROBES[0]].content

        # the Kafka port: a request before SASL closes the connection, nothing answered
        with socket.create_connection(("127.0.0.1", ports["EXTERNAL"]), timeout=10) as raw:
            with tls.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(encode_request(API.metadata, 12, {"topics": None}))
                try:
                    answer = s.recv(4)
                except OSError:
                    answer = b""
                assert answer == b""

    props = _secure_props(server_block + authorizer_block, tmp_path)
    with BrokerThread(BrokerConfig.from_mapping(props)) as b:
        for r in probe(b, None).values():
            refused(r, 401)
        alice = probe(b, ("alice", "alice-secret"))
        for path, r in alice.items():
            if path in ("/v1/partitions", "/"):  # listings: orders hidden
                refused(r, 200)
                assert "orders" not in r.text, path
            else:
                refused(r, 403)
                assert "AUTHORIZATION_FAILED" in r.text and "User:alice" in r.text, path
        admin = probe(b, ("admin", admin_pw["admin"]))
        for path, r in admin.items():
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
        assert README_VALUE in admin[ADMIN_PROBES[0]].content
        assert "orders" in admin["/v1/partitions"].text
