"""The coordinator's side of one shard served on Ray Serve (`ldr serve --ray`): its calls, each
naming the shard's generation, sent over Serve's gRPC transport between deployments and asked
again when they fail.
"""
from __future__ import annotations

import logging
import time

from ..values import ShardInfo

log = logging.getLogger("ldr.serve.ray_shards")
ATTEMPTS, TIMEOUT_S = 4, 30.0


def by_value(handle):
    """`handle` answering over Serve's gRPC transport (a round of 4 echo calls: 4.6-4.9 ms against
    8.2-9.3 through the object store on 2 cores, Ray 2.60); kept where a Ray predates it."""
    try:
        from ray.serve._private import constants
        return handle.options(_by_reference=False) if hasattr(constants, "RAY_SERVE_USE_GRPC_BY_DEFAULT") else handle
    except (ImportError, TypeError, ValueError):
        return handle


class RemoteShard:
    """A shard of the coordinator's point in time answered by its Serve deployment: every call
    names the shard's cluster entry (its generation), a failed call (a replica died) is asked
    again (Serve picks a live replica), and a shard none of whose replicas answers in time gives
    None (the search names it in `missing_shards`)."""

    def __init__(self, handle, i: int, entry: dict, timeout_s: float = TIMEOUT_S, by_value=None):
        self.handle, self.i, self.entry, self.timeout_s = handle, i, entry, timeout_s
        self.by_value = by_value if by_value is not None else handle
        self.about: ShardInfo | None = None

    def _ask(self, method: str, *args, large: bool = False):
        """The replica's answer to `method`: the first attempt over Serve's gRPC transport (answers
        by value), unless it may be `large` (texts); a failed attempt (a replica gone, an answer over
        gRPC's message limit) is asked again through Ray's object store."""
        if self.entry["generation"] is None:        # a shard no document was routed to
            return None
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(ATTEMPTS):
            try:
                via = self.by_value if attempt == 0 and not large else self.handle
                call = getattr(via, method).remote(self.entry, *args)
                return call.result(timeout_s=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            except Exception as e:       # RayActorError, a replica gone mid-request, an app deleted
                log.warning("shard %d: %s (attempt %d of %d)", self.i, type(e).__name__, attempt + 1, ATTEMPTS)
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(0.2 * (attempt + 1), max(0.0, deadline - time.monotonic())))
        log.warning("shard %d did not answer: its hits are missing from this result", self.i)
        return None

    def describe(self) -> dict:
        if self.about is None:
            got = self._ask("describe")
            self.about = got if got is not None else ShardInfo(0, 0, (), missing=True)
        return self.about

    def _live(self, method: str, *args, large: bool = False):
        return None if self.describe().missing else self._ask(method, *args, large=large)

    def facets(self):
        return self._live("facets")

    def stats(self, query, kinds, filters):
        return self._live("stats", query, kinds, filters)

    def first(self, first, reps, filters, ask=None):
        return self._live("first", first, reps, filters, ask)

    def stats_many(self, queries, kinds, filters):
        return self._live("stats_many", queries, kinds, filters)

    def first_many(self, first, reps, filters):
        return self._live("first_many", first, reps, filters)

    def windows(self, docs, kinds, reps, terms):
        return self._live("windows", docs, kinds, reps, terms)

    def exact(self, kind, rep, docs, first):
        got = self._live("exact", kind, rep, docs, first)
        return got if got is not None else [0.0] * len(docs)

    def fetch(self, docs, text=False, meta=False, cuts=None):
        return self._live("fetch", docs, text, meta, cuts, large=text)

    def lease(self, holder: str, ttl_s: float):
        return self._ask("lease", holder, ttl_s)

    def release(self, holder: str) -> None:
        self._ask("release", holder)
