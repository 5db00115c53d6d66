"""`ldr serve -i IDX --ray [ADDRESS] --replicas R`: a sharded index searched on a Ray Serve
application. The HTTP API at the front is the one `ldr serve` always serves (this process:
uvicorn, the coordinator); behind it, one Serve deployment per shard with R replicas runs the
plan's first stages (BM25 with the whole index's statistics, vector search) on the shard's
memory-mapped files. The coordinator gathers their lists and runs the rest of the plan.

Faults: a replica that dies during a query makes the call fail; the coordinator asks again and
Ray Serve routes it to a live replica, so the query answers in full. When no replica of a shard
answers in time, the answer names it (`missing_shards`, in the result and the HTTP body) instead
of silently holding fewer hits. The index directory must be on storage every node mounts at the
same path (as for `ldr index --ray`).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from .. import crash_signals
from ..index.cluster import shard_rel
from ..search.stages.base import Candidates
from ..sharded import ShardedIndex

log = logging.getLogger(__name__)
APP = "ldr-shard-{}"          # one Serve application per shard
ATTEMPTS, TIMEOUT_S = 4, 30.0


class ShardReplica:
    """A replica of one shard: the shard opened at the generation each request names (the two
    newest kept open), the plan's first stages run over it. With `local` (a folder on the node's
    own disk), it serves its own copy of the shard, brought to each generation it is asked for by
    copying only the new files from where the writer committed them, each verified against its
    manifest (ldr/index/replica.py) before it is served."""

    def __init__(self, root: str, shard: int, device: str | None = None, local: str | None = None):
        self.source, self.shard = Path(root) / shard_rel(shard), shard
        self.path = Path(local) / shard_rel(shard) if local else self.source
        self.device = device
        self.open: dict[int, object] = {}

    def _at(self, entry: dict):
        """This shard at the generation the cluster entry names, checked to be the one committed."""
        from ..api import Index
        from ..index import generations as gens
        from ..index.cluster import check_shard_manifest

        generation = entry["generation"]
        if generation not in self.open:
            if self.path != self.source and generation not in gens.generations(self.path):
                from ..index.replica import catch_up
                got = catch_up(self.source, self.path, generation)
                log.info("shard %d caught up to generation %d: %d files copied", self.shard, generation, got["copied"])
            ix = Index(self.path, device=self.device, generation=generation)
            check_shard_manifest(self.source.parent.parent, self.shard, entry, ix.manifest)
            self.open[generation] = ix
            for old in sorted(self.open)[:-2]:
                self.open.pop(old).close()
        return self.open[generation]

    def first(self, entry: dict, first, reps: dict, filters) -> dict:
        """The plan's first stages over this shard at the generation its cluster entry names; the
        coordinator checked the filters' fields against every shard (one this shard lacks passes
        none of its documents)."""
        from ..search import filters as _filters

        shard = self._at(entry).as_shard()
        conds = _filters.normalise(filters)
        cands = shard.first(first, reps, shard.mask(conds, False) if conds else None)
        return {"lists": cands.lists, "timings": cands.timings}


class RayShardedIndex(ShardedIndex):
    """A ShardedIndex whose first stages run on the shards' Serve deployments (`handles[i]`)."""

    def __init__(self, path, handles: list, timeout_s: float = TIMEOUT_S, **kw):
        self.handles, self.timeout_s = handles, timeout_s
        super().__init__(path, **kw)

    def _first_stages(self, snap, plan_first, reps: dict, masks, filters) -> list:
        """Each shard's Candidates from its Serve deployment, at the generation `snap` names for
        it; None for a shard none of whose replicas answered."""
        gens = snap.cluster["shards"]        # each shard's committed generation (and its manifest's checksum)
        calls = {i: self._call(i, gens[i], plan_first, reps, filters) for i in range(len(gens))
                 if gens[i]["generation"] is not None}        # a shard no document was routed to has none
        parts = []
        for i in range(len(gens)):
            got = self._result(i, calls[i], gens[i], plan_first, reps, filters) if i in calls else \
                {"lists": {}, "timings": {}}
            if got is None:
                parts.append(None)
            else:
                cands = Candidates(plan_first.query)
                cands.lists, cands.timings = got["lists"], got["timings"]
                parts.append(cands)
        return parts

    def _call(self, i: int, entry: dict, first, reps, filters):
        return self.handles[i].first.remote(entry, first, reps, filters)

    def _result(self, i: int, call, entry: dict, first, reps, filters) -> dict | None:
        """A shard's answer; a failed call (its replica died) is asked again (Serve picks a live
        replica); None when no replica answers within the time allowed."""
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(ATTEMPTS):
            try:
                return call.result(timeout_s=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            except Exception as e:       # RayActorError, a replica gone mid-request, an app deleted
                log.warning("shard %d: %s (attempt %d of %d)", i, type(e).__name__, attempt + 1, ATTEMPTS)
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(0.2 * (attempt + 1), max(0.0, deadline - time.monotonic())))
                try:
                    call = self._call(i, entry, first, reps, filters)
                except Exception:
                    break
        log.warning("shard %d did not answer: its hits are missing from this result", i)
        return None


def deploy(index_path: str, address: str | None, replicas: int, device: str | None = None,
           cpus: float = 0.25, local: str | None = None) -> list:
    """Start (or join) Ray, run one Serve application per shard with `replicas` replicas (each
    reserving `cpus` of Ray's CPUs: a shard's first stages are brief numpy and mapped reads), and
    return their handles. `local`: each replica serves its own copy of its shard under this
    folder of its node (ShardReplica)."""
    import ray
    from ray import serve

    from ..index.cluster import read_cluster

    if not ray.is_initialized():
        with crash_signals.jvm_kept():            # Ray's crash reporter must not replace the JVM's handlers
            ray.init(address=address or None, ignore_reinit_error=True, logging_level=logging.WARNING,
                     log_to_driver=False)
    serve.start(proxy_location="Disabled")       # the coordinator's uvicorn is the HTTP front
    root = str(Path(index_path).absolute())
    n = len(read_cluster(Path(root))["shards"])
    deployment = serve.deployment(ShardReplica, name="shard")
    options = {"num_replicas": replicas, "ray_actor_options": {"num_cpus": cpus}}
    return [serve.run(deployment.options(**options).bind(root, i, device, local), name=APP.format(i),
                      route_prefix=None) for i in range(n)]
