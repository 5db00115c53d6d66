"""The points in time a Ray coordinator holds: for each cluster generation it searches, a lease on
every shard's generation where the writer commits it (index/leases.py), taken through the shard's
replicas since the coordinator reads no file of the index. A writer's collector then keeps that
generation while the coordinator uses it, and a replica that catches up to it later (a second
replica, a restarted one) still finds its files. The current point in time and the one before it
(searches may still run on it) are renewed; older ones are released; a coordinator that dies
frees them when their leases expire."""
from __future__ import annotations

import threading
import time
import uuid

from ..index.leases import TTL_S


class Leases:
    def __init__(self, ttl_s: float = TTL_S):
        self.holder, self.ttl_s = uuid.uuid4().hex, ttl_s
        self._held: dict[int, tuple[list, float]] = {}     # cluster generation → (its shards, renewed at)
        self._lock = threading.Lock()

    def take(self, gen: int, shards: list, pool) -> bool:
        """Lease every shard's generation of cluster generation `gen`; False (nothing kept) when
        one is gone already: the caller opens the newest instead. A shard that takes no lease
        (object storage, a read-only source, no replica answering) does not stop it."""
        got = list(pool.map(lambda s: s.lease(self.holder, self.ttl_s), shards))
        if any(g is False for g in got):
            list(pool.map(lambda s: s.release(self.holder), shards))
            return False
        with self._lock:
            self._held[gen] = (shards, time.monotonic())
        return True

    def keep(self, current: int, shards: list, pool) -> None:
        """After a refresh: hold `current` (taken when it opened), renew it and the one before it
        when due, release the rest. Renewals and releases go out without waiting (a shard with no
        replica left must not hold a refresh)."""
        now = time.monotonic()
        with self._lock:
            self._held.setdefault(current, (shards, now))
            older = sorted(g for g in self._held if g < current)
            drop = older[:-1]
            due = [g for g in older[-1:] + [current] if now - self._held[g][1] >= self.ttl_s / 4]
            gone = [self._held.pop(g)[0] for g in drop]
            for g in due:
                self._held[g] = (self._held[g][0], now)
            renew = [self._held[g][0] for g in due]
        for group in gone:
            for s in group:
                pool.submit(s.release, self.holder)
        for group in renew:
            for s in group:
                pool.submit(s.lease, self.holder, self.ttl_s)

    def held(self) -> list[int]:
        with self._lock:
            return sorted(self._held)

    def release_all(self, pool) -> None:
        """Let go of every point in time (on close), without waiting for the shards to answer."""
        with self._lock:
            groups, self._held = [g for g, _ in self._held.values()], {}
        for group in groups:
            for s in group:
                pool.submit(s.release, self.holder)
