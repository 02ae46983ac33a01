"""The cost of TLS + SASL: 1 KiB produce and consume MB/s over SASL_SSL with
SCRAM-SHA-512 next to PLAINTEXT, on the same broker, in the same run.

Run: ``.venv/bin/python benchmarks/bench_security.py [--scale 0.2]``
(``bench_broker.py --security`` runs the same).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import trustme
from broker_kit import consume_from_start, create_topic, produce_all, producer_conf
from confluent_kafka import Producer

from kompakt.broker.app import BrokerThread
from kompakt.broker.config import BrokerConfig


def bench_security(args: argparse.Namespace) -> None:
    """1 KiB produce (acks=1) and consume MB/s over PLAINTEXT and over SASL_SSL with
    SCRAM-SHA-512 on the same broker, same run; the ratio is SASL_SSL / PLAINTEXT.
    Certificates are made on the fly (trustme, a test dependency)."""
    tmp = tempfile.mkdtemp(prefix="kompakt-bench-security-")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(f"{tmp}/server.pem")
    ca.cert_pem.write_to_path(f"{tmp}/ca.pem")
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "kompakt.admin.listener": "http://127.0.0.1:0",
        "log.dirs": f"{tmp}/data",
        "kompakt.cleaner.engine": "local",
        "log.cleaner.enable": "false",
        "ssl.keystore.location": f"{tmp}/server.pem",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "kompakt.sasl.bootstrap.users": "bench:bench-secret",
    }
    n = max(1000, int(args.large * args.scale))
    b = BrokerThread(BrokerConfig.from_mapping(props)).start()
    try:
        ports = b.broker.server.ports
        confs = {
            "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"},
            "SASL_SSL": {
                "bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": f"{tmp}/ca.pem",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "bench",
                "sasl.password": "bench-secret",
            },
        }
        create_topic(confs["PLAINTEXT"]["bootstrap.servers"], "warm")
        figures: dict[str, tuple[float, float]] = {}
        for name, conf in confs.items():
            topic = f"sec-{name.lower()}"
            create_topic(confs["PLAINTEXT"]["bootstrap.servers"], topic)
            p = Producer({**producer_conf("1"), **conf})
            produce_all(p, topic, b"p" * 10, 10)  # connect + authenticate before timing
            t0 = time.perf_counter()
            produce_all(p, topic, b"x" * 1024, n)
            produce_s = time.perf_counter() - t0
            consume_s, _ = consume_from_start(conf, topic, n + 10)
            figures[name] = (n * 1024 / produce_s / 1e6, n * 1024 / consume_s / 1e6)
        print(f"1 KiB records: {n}")
        print(f"{'listener':<10} {'produce MB/s':>13} {'consume MB/s':>13}")
        for name, (pr, co) in figures.items():
            print(f"{name:<10} {pr:13.1f} {co:13.1f}")
        (p0, c0), (p1, c1) = figures["PLAINTEXT"], figures["SASL_SSL"]
        print(f"SASL_SSL / PLAINTEXT: produce {p1 / p0:.2f}, consume {c1 / c0:.2f}")
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the record count")
    ap.add_argument("--large", type=int, default=50_000, help="records of 1 KiB")
    bench_security(ap.parse_args())


if __name__ == "__main__":
    main()
