"""The connection every broker verb family shares (confluent-kafka's AdminClient).

Kafka errors become one-line ``KompaktError``s (unknown topic, bad config, broker not
reachable) for ``kompakt.cli.main`` to print; the topic, record and group verbs build
on the lookups here (metadata, topic configs, start and end offsets), as Kafka's own
admin tools build on one ``Admin`` client.
"""

from __future__ import annotations

import concurrent.futures
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self, TypeVar

from kompakt.errors import KompaktError, TopicExistsError, UnknownTopicError

from ..backend import CliError, ConfigValue
from ..kafka_errors import kafka_error_text

DEFAULT_TIMEOUT_S = 10.0
ADMIN_PORT = 9644

# librdkafka logs connection failures on stderr; a CLI reports one line of its own instead.
_quiet = logging.getLogger("kompakt.cli.kafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

T = TypeVar("T")


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` as pairs; anything else is a one-line error."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if item.startswith("PLAINTEXT://"):
            item = item[len("PLAINTEXT://") :]
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CliError(f"invalid --bootstrap-server {servers!r}: expected HOST:PORT")
        out.append((host, int(port)))
    return out


def default_admin_url(servers: str) -> str:
    """The admin endpoint on the first bootstrap host at its default port (9644)."""
    host = parse_bootstrap(servers)[0][0]
    return f"http://{'[' + host + ']' if ':' in host else host}:{ADMIN_PORT}"


class BrokerConnection:
    """A connection to the broker at ``bootstrap_server`` and what every verb family
    asks of it: error translation, metadata, topic configs and offsets.

    Entering checks that the broker answers within ``timeout`` seconds (a TCP connect,
    then a Metadata request), so an unreachable broker is one error line, not a hang.
    """

    def __init__(
        self,
        bootstrap_server: str,
        *,
        admin_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ):
        self.addresses = parse_bootstrap(bootstrap_server)
        self.bootstrap = bootstrap_server
        self.admin_url = (admin_url or default_admin_url(bootstrap_server)).rstrip("/")
        self.timeout = timeout
        self.warnings: list[str] = []
        self._admin: Any = None
        self._ck: Any = None

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            import confluent_kafka
            import confluent_kafka.admin
        except ImportError:
            raise CliError(
                "talking to a broker needs confluent-kafka (pip install confluent-kafka); "
                "or work offline with --data-dir"
            ) from None
        self._ck = confluent_kafka
        self._check_reachable()
        self._admin = confluent_kafka.admin.AdminClient(self._conf())
        self._metadata()
        return self

    def __exit__(self, *exc: object) -> None:
        self._admin = None

    def _conf(self, **extra: Any) -> dict[str, Any]:
        from ..client_config import settings

        ms = int(self.timeout * 1000)
        return {
            **settings(),  # --command-config: security.protocol, sasl.*, ssl.* ...
            "bootstrap.servers": self.bootstrap,
            "client.id": "kompakt-cli",
            "socket.timeout.ms": ms,
            "socket.connection.setup.timeout.ms": ms,
            "reconnect.backoff.max.ms": 1000,
            "logger": _quiet,
            **extra,
        }

    def _check_reachable(self) -> None:
        reason = ""
        for host, port in self.addresses:
            try:
                with socket.create_connection((host, port), timeout=min(self.timeout, 5.0)):
                    return
            except OSError as exc:
                reason = exc.strerror or str(exc) or type(exc).__name__
        raise CliError(f"broker {self.bootstrap} not reachable: {reason}")

    @property
    def admin(self) -> Any:
        if self._admin is None:
            raise RuntimeError("BrokerBackend used outside its 'with' block")
        return self._admin

    # -- calling confluent-kafka ------------------------------------------------------------
    def _error(self, exc: BaseException, *, topic: str | None = None) -> KompaktError:
        """A confluent-kafka failure as the one-line error the CLI prints."""
        ck = self._ck
        if isinstance(exc, concurrent.futures.TimeoutError):
            return CliError(f"broker {self.bootstrap} did not answer within {self.timeout:g} s")
        if isinstance(exc, KompaktError):
            return exc
        err = exc.args[0] if isinstance(exc, ck.KafkaException) and exc.args else None
        if not isinstance(err, ck.KafkaError):
            return CliError(str(exc) or type(exc).__name__)
        return self._kafka_error(err, topic=topic)

    def _kafka_error(self, err: Any, *, topic: str | None = None) -> KompaktError:
        KE = self._ck.KafkaError  # noqa: N806
        code = err.code()
        if code == KE.UNKNOWN_TOPIC_OR_PART:
            return UnknownTopicError(f"unknown topic {topic!r}" if topic else err.str())
        if code == KE.TOPIC_ALREADY_EXISTS:
            return TopicExistsError(err.str())
        if code in (KE._TRANSPORT, KE._ALL_BROKERS_DOWN, KE._TIMED_OUT, KE._RESOLVE):
            return CliError(f"broker {self.bootstrap} not reachable: {err.str()}")
        return CliError(kafka_error_text(err))

    def _wait(self, future: concurrent.futures.Future, *, topic: str | None = None) -> Any:
        try:
            return future.result(timeout=self.timeout + 2)
        except Exception as exc:
            raise self._error(exc, topic=topic) from None

    def _call(self, fn: Callable[[], T], *, topic: str | None = None) -> T:
        try:
            return fn()
        except Exception as exc:
            raise self._error(exc, topic=topic) from None

    def _metadata(self) -> Any:
        try:
            return self.admin.list_topics(timeout=self.timeout)
        except self._ck.KafkaException as exc:
            raise CliError(
                f"broker {self.bootstrap} not reachable within {self.timeout:g} s: "
                f"{exc.args[0].str() if exc.args else exc}"
            ) from None

    def _partition_count(self, topic: str) -> int:
        md = self._metadata().topics.get(topic)
        if md is None or md.error is not None and not md.partitions:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        return len(md.partitions)

    def _topic_ids(self, names: Sequence[str]) -> dict[str, Any]:
        if not names:
            return {}
        futures = self.admin.describe_topics(
            self._ck.TopicCollection(list(names)), request_timeout=self.timeout
        )
        return {name: self._wait(f, topic=name) for name, f in futures.items()}

    def _configs(self, names: Sequence[str]) -> dict[str, list[ConfigValue]]:
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
        if not resources:
            return {}
        futures = self.admin.describe_configs(resources, request_timeout=self.timeout)
        out = {}
        for res, future in futures.items():
            entries = self._wait(future, topic=res.name)
            values = []
            for name in sorted(entries):
                e = entries[name]
                values.append(ConfigValue.of(name, e.value, ConfigSource(e.source).name))
            out[res.name] = values
        return out

    def _offsets(self, tps: Iterable[tuple[str, int]], latest: bool) -> dict[tuple[str, int], int]:
        """Start (``latest=False``) or end offsets; a partition that fails is left out."""
        from confluent_kafka.admin import OffsetSpec

        tps = list(tps)
        if not tps:
            return {}
        spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
        request = {self._ck.TopicPartition(t, p): spec for t, p in tps}
        futures = self._call(lambda: self.admin.list_offsets(request, request_timeout=self.timeout))
        out = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = future.result(timeout=self.timeout + 2).offset
            except self._ck.KafkaException:
                continue
            except concurrent.futures.TimeoutError as exc:
                raise self._error(exc) from None
        return out
