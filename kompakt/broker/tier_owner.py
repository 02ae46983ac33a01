"""One broker writes a remote tier: the bucket's owner record and its lease.

Two brokers pointed at one bucket (a second one started on an empty data dir to
"rebuild" while the first still ran, as an outside probe did) each tiered its own
records under the same topic ids and offsets; each then deleted its local segments and
served the other's records at offsets it had acknowledged. Kafka's remote log metadata
has one leader per partition; a bucket here has one owner: the broker whose data dir
(its ``meta.properties`` ``directory.id``, KIP-858) wrote ``brokers/owner.json`` and
renews it every task pass. A broker with another data dir starts only once that lease
has run out (three task intervals), and one that finds its record replaced stops
tiering. The same data dir restarting takes its own record back at once, and a clean
stop marks the lease run out, so a successor on another data dir need not wait.

The record is written with the store's compare-and-swap (as the manifests are), so
two brokers starting together cannot both win; the lease is measured against the wall
clocks of the brokers, so clocks that disagree by more than a lease weaken it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from kompakt.errors import KompaktError
from kompakt.remote.store import (
    ObjectNotFoundError,
    ObjectStore,
    PreconditionFailedError,
    RemoteStorageError,
)

log = logging.getLogger("kompakt.broker.tiering")

OWNER_KEY = "brokers/owner.json"
MIN_LEASE_MS = 1000


@dataclass(frozen=True)
class Owner:
    """Who writes the bucket, and when it last said so."""

    directory_id: str
    host: str
    pid: int
    renewed_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"format": 1, **asdict(self)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner:
        try:
            d = json.loads(data)
            return cls(str(d["directory_id"]), str(d["host"]), int(d["pid"]), int(d["renewed_ms"]))
        except (ValueError, KeyError, TypeError) as e:
            raise RemoteStorageError(f"{OWNER_KEY} cannot be read: {e}") from None


class TierInUseError(KompaktError):
    """Another broker's data dir owns the remote tier and renewed its lease lately."""


class TierOwnership:
    """This broker's claim on the bucket (:meth:`claim` at start, :meth:`renew` every
    task pass)."""

    def __init__(
        self,
        store: ObjectStore,
        directory_id: str,
        lease_ms: int,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store  # immutable
        self.lease_ms = max(lease_ms, MIN_LEASE_MS)  # immutable
        self._clock = clock  # immutable
        self._me = directory_id  # immutable
        self._version: str | None = None  # owned by the task thread once claimed
        self.fenced = False  # owned by the task thread: another broker took the bucket

    def _record(self, renewed_ms: int | None = None) -> bytes:
        """This broker's record, renewed now (or at ``renewed_ms``)."""
        now = int(self._clock() * 1000) if renewed_ms is None else renewed_ms
        return Owner(self._me, socket.gethostname(), os.getpid(), now).to_json()

    def claim(self) -> None:
        """Take the bucket: at once if it has no owner or this data dir owns it, after
        the other's lease otherwise (:class:`TierInUseError` until then)."""
        for _ in range(5):
            try:
                data, version = self.store.get(OWNER_KEY)
                current: Owner | None = Owner.from_json(data)
            except ObjectNotFoundError:
                current, version = None, None
            if current is not None and current.directory_id != self._me:
                age = int(self._clock() * 1000) - current.renewed_ms
                if age < self.lease_ms:
                    raise TierInUseError(
                        f"the remote tier at {self.store.url} is in use by another broker "
                        f"(data dir {current.directory_id} on {current.host}, pid "
                        f"{current.pid}, lease renewed {max(age, 0) / 1000:.1f} s ago): two "
                        "brokers writing one bucket overwrite each other's records. Stop "
                        f"it, or start this one once its lease of {self.lease_ms / 1000:.0f} "
                        "s has run out"
                    )
                log.warning(
                    "taking over the remote tier at %s from data dir %s on %s (lease last "
                    "renewed %.0f s ago)",
                    self.store.url,
                    current.directory_id,
                    current.host,
                    age / 1000,
                )
            try:
                self._version = self.store.put(
                    OWNER_KEY, self._record(), create=version is None, match=version
                )
                return
            except PreconditionFailedError:
                continue  # another broker wrote it meanwhile: read it again
        raise TierInUseError(f"{OWNER_KEY} at {self.store.url} kept changing while claimed")

    def release(self) -> None:
        """At a clean stop (on the task thread, its last pass done): mark the lease run
        out, so a broker with another data dir may take the bucket at once."""
        if self.fenced or self._version is None:
            return
        try:
            self.store.put(OWNER_KEY, self._record(renewed_ms=0), match=self._version)
        except RemoteStorageError as exc:  # taken over meanwhile, or unreachable
            log.warning("the remote tier's owner record was not released: %s", exc)

    def renew(self) -> bool:
        """Renew the lease; False once another broker has replaced the record (this
        broker then stops tiering for good, and says so once)."""
        if self.fenced:
            return False
        try:
            self._version = self.store.put(OWNER_KEY, self._record(), match=self._version)
        except PreconditionFailedError:
            self.fenced = True
            log.error(
                "the remote tier at %s was taken over by another broker: this broker "
                "stops tiering (its local segments stay); stop the other one and restart "
                "this one",
                self.store.url,
            )
            return False
        except RemoteStorageError as exc:  # unreachable now: the next pass tries again
            log.warning("the remote tier's owner record was not renewed: %s", exc)
        return True
