"""`ldr serve -i IDX --ray [ADDRESS] --replicas R`: a sharded index searched on a Ray Serve
application. The HTTP API at the front is the one `ldr serve` always serves (this process:
uvicorn, the coordinator); behind it, one Serve deployment per shard with R replicas runs the
plan's first stages (BM25 with the whole index's statistics, vector search) on the shard's
memory-mapped files. The coordinator gathers their lists and runs the rest of the plan.

The coordinator reads no file of the index: it learns the newest cluster commit, each shard's
size and fields and the index's settings from the replicas, and every call is a value (search/
gather.py's Shard: statistics, first-stage lists with ids, window features, the final hits'
texts and passages) naming the shard's generation. So it runs where the index is not; the
replicas need the index (or, with --replica-root, where the writer commits it) on their nodes.

Faults: a replica that dies during a query makes the call fail; the coordinator asks again and
Ray Serve routes it to a live replica, so the query answers in full. When no replica of a shard
answers in time, the answer names it (`missing_shards`, in the result and the HTTP body) instead
of silently holding fewer hits.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from pathlib import Path


from .. import ray_session
from ..errors import ConfigError, IndexFormatError
from ..index.cluster import shard_of, shard_rel
from . import ray_leases
from .remote_shard import TIMEOUT_S, RemoteShard, by_value
from ..search.searcher import Snapshot

log = logging.getLogger(__name__)


class _OwnCancels(logging.Filter):
    """Ray Serve logs each cancelled call at INFO: the coordinator cancels, on purpose, the calls of
    every shard but the first to answer (`_cluster`, every few seconds), which filled `ldr serve
    --ray`'s log with "Cancelling request ..." though every answer was whole."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Cancelling request that has already been assigned")


logging.getLogger("ray.serve").addFilter(_OwnCancels())
APP = "ldr-shard-{}"          # one Serve application per shard
PLACE = "ldr_shard_{}"        # a node's Ray resource: it holds this shard's files (replicas go there)
REFRESH_WAIT_S = 5.0


class ShardReplica:
    """A replica of one shard: the shard opened at the generation each request names (the two
    newest kept open), answering the calls of a Shard (search/gather.py) in values. With `local`
    (a folder on the node's own disk), it serves its own copy of the shard, brought to each
    generation it is asked for by copying only the new files from where the writer committed
    them, each verified against its manifest (ldr/index/replica.py) before it is served."""

    def __init__(self, root: str, shard: int, device: str | None = None, local: str | None = None):
        from ..index.remote import is_uri

        if is_uri(root) and not local:      # object storage: a replica serves only its own copy
            raise ConfigError(f"{root} is a URI: its replicas need a folder of their own (--replica-root)")
        self.root, self.shard = (root if is_uri(root) else Path(root)), shard
        self.source = f"{root.rstrip('/')}/{shard_rel(shard)}" if is_uri(root) else self.root / shard_rel(shard)
        self.path = Path(local) / shard_rel(shard) if local else self.source
        self.device = device
        self.open: dict[int, object] = {}
        self._opening = threading.Lock()

    def _at(self, entry: dict):
        """This shard at the generation the cluster entry names, checked to be the one committed."""
        from ..api import Index
        from ..index import generations as gens
        from ..index.cluster import check_shard_manifest

        generation = entry["generation"]
        ix = self.open.get(generation)
        if ix is not None:
            return ix.as_shard()
        with self._opening:      # Serve runs a replica's calls in threads: one opens (and copies) at a time
            ix = self.open.get(generation)
            if ix is None:
                if self.path != self.source and generation not in gens.generations(self.path):
                    from ..index.replica import catch_up
                    got = catch_up(self.source, self.path, generation)
                    log.info("shard %d caught up to generation %d: %d files copied", self.shard, generation,
                             got["copied"])
                ix = Index(self.path, device=self.device, generation=generation)
                check_shard_manifest(self.root, self.shard, entry, ix.manifest)
                self.open[generation] = ix
                # dropped, not closed: a call still running on an older generation holds its handle,
                # and the pin (so the copy's collector keeps its files) goes with the last holder
                for old in sorted(self.open)[:-2]:
                    del self.open[old]
        return ix.as_shard()

    def cluster(self) -> dict:
        """The newest cluster commit, read where the index is (the coordinator may not see it)."""
        from ..index.replica import newest_cluster
        return newest_cluster(self.root)

    def describe(self, entry: dict) -> dict:
        shard = self._at(entry)
        return dataclasses.replace(shard.describe(), manifest=shard.view.manifest)

    async def _shard(self, entry: dict):
        """The shard at `entry`'s generation, for a call run on the replica's event loop (Serve's
        thread pool hop cost 1.4 ms of CPU a call, 0.8 without): opened (or copied) in a thread."""
        ix = self.open.get(entry["generation"])
        return ix.as_shard() if ix is not None else await asyncio.to_thread(self._at, entry)

    async def facets(self, entry: dict) -> dict:
        return (await self._shard(entry)).facets()

    async def stats(self, entry: dict, query: str, kinds: list, filters) -> dict:
        return (await self._shard(entry)).stats(query, kinds, filters)

    async def first(self, entry: dict, first, reps: dict, filters, ask=None) -> dict:
        return (await self._shard(entry)).first(first, reps, filters, ask)

    async def stats_many(self, entry: dict, queries: list, kinds: list, filters) -> list:
        return (await self._shard(entry)).stats_many(queries, kinds, filters)

    async def first_many(self, entry: dict, first, reps: list, filters) -> list:
        return (await self._shard(entry)).first_many(first, reps, filters)

    async def windows(self, entry: dict, docs: list, kinds: list, reps: dict, terms: list) -> dict:
        return (await self._shard(entry)).windows(docs, kinds, reps, terms)

    async def exact(self, entry: dict, kind: str, rep, docs: list, first: dict) -> list:
        return (await self._shard(entry)).exact(kind, rep, docs, first)

    async def fetch(self, entry: dict, docs: list, text: bool = False, meta: bool = False, cuts=None) -> dict:
        return (await self._shard(entry)).fetch(docs, text, meta, cuts)

    def lease(self, entry: dict, holder: str, ttl_s: float) -> bool | None:
        """Hold the entry's generation where the writer commits it (index/leases.py) for `holder`,
        so a replica that catches up to it later still finds it. False: that generation is gone;
        None: the source takes no lease (object storage, or an index this node cannot write)."""
        from ..index import leases
        from ..index.remote import is_uri

        if is_uri(self.source) or entry["generation"] is None:
            return None
        try:
            return leases.take(self.source, entry["generation"], holder, ttl_s)
        except OSError as e:
            log.warning("shard %d: no lease on generation %d: %s", self.shard, entry["generation"], e)
            return None

    def release(self, entry: dict, holder: str) -> None:
        from ..index import leases
        from ..index.remote import is_uri

        if not is_uri(self.source) and entry["generation"] is not None:
            leases.release(self.source, entry["generation"], holder)

    async def document(self, entry: dict, doc_id: str):
        """The document (None: not in this generation)."""
        try:
            return (await self._shard(entry)).document(doc_id)
        except KeyError:
            return None


class RayShards:
    """A sharded index's shards as their Serve deployments (`handles[i]`), a shard set of the one
    handle (shard_sets.py): the coordinator learns the cluster's newest commit, each shard's size
    and fields and the index's settings from the replicas, holds each point in time as a lease at
    the source (index/leases.py), and reads no file of the index (it may run where the index is not)."""
    sharded = True

    def __init__(self, path, handles: list, timeout_s: float = TIMEOUT_S):
        from ..index.remote import is_uri

        self.path = path if is_uri(path) else Path(path)     # a URI: the replicas copy from object storage
        self.handles, self.timeout_s = handles, timeout_s
        self.by_value = [by_value(h) for h in handles]
        self._leases = ray_leases.Leases()       # the points in time this coordinator holds

    def _cluster(self, wait_s: float | None = None) -> dict:
        """The newest cluster commit, from the first shard whose replicas answer within `wait_s` in
        all (every shard asked at once: a shard whose replicas are all gone costs no wait of its own)."""
        wait_s = self.timeout_s if wait_s is None else wait_s
        asked = [h.cluster.remote() for h in self.handles]
        deadline = time.monotonic() + wait_s
        try:
            for r in asked:
                try:
                    return r.result(timeout_s=max(0.05, deadline - time.monotonic()))
                except Exception as e:
                    log.warning("a shard's replicas cannot read the cluster commit: %s", type(e).__name__)
        finally:
            for r in asked:
                r.cancel()
        raise IndexFormatError(f"no shard of {self.path} answers on Ray Serve: is the index where its replicas run?")

    def open(self, generation: int | None, handle, cluster: dict | None = None) -> Snapshot:
        """The cluster generation `cluster` names (default: the newest), every shard held at its
        generation (a lease at the source): one point in time. A generation collected before it
        could be leased gives way to the newest."""
        if generation is not None:
            raise ConfigError("an index served on Ray opens at its newest generation")
        cluster = cluster or self._cluster()
        for _ in range(20):
            shards = [RemoteShard(self.handles[i], i, s, self.timeout_s, self.by_value[i])
                      for i, s in enumerate(cluster["shards"])]
            if self._leases.take(cluster["generation"], shards, handle._pool()):
                return self._describe(cluster, shards, handle)
            cluster = self._cluster()
        raise IndexFormatError(f"{self.path} changed too quickly to be opened; try again")

    def _describe(self, cluster: dict, shards: list, handle) -> Snapshot:
        about = list(handle._pool().map(lambda sh: sh.describe(), shards))
        manifest = next((a.manifest for a in about if a.manifest is not None), None)
        if manifest is None:
            raise IndexFormatError(f"no shard of {self.path} answered at cluster generation {cluster['generation']}")
        # the query sides load the models once per settings, here: the replicas load none
        return Snapshot(cluster["generation"], manifest, shards, handle._sides(manifest), cluster=cluster, remote=True)

    def newer(self, snap: Snapshot, handle) -> Snapshot | None:
        # the server asks every few seconds: a shard gone must not hold a refresh (or a shutdown) 30 s
        cluster = self._cluster(REFRESH_WAIT_S)
        return None if cluster["generation"] == snap.generation else self.open(None, handle, cluster)

    def moved(self, old: Snapshot | None, snap: Snapshot, handle) -> None:
        """The leases kept: the current point in time's renewed when due, the ones before the
        previous released (a search still running on the previous one keeps it)."""
        self._leases.keep(snap.generation, snap.shards, handle._pool())

    def close(self, snap: Snapshot, handle) -> None:
        self._leases.release_all(handle._pool())

    def document(self, snap: Snapshot, doc_id: str):
        shard = snap.shards[shard_of(str(doc_id), len(snap.shards))]
        doc = shard._live("document", doc_id, large=True)
        if doc is None:
            raise KeyError(doc_id)
        return doc

    def live_ids(self, snap: Snapshot) -> list[str]:
        raise ConfigError("the ids of an index served on Ray are read where its replicas are (`ldr export`)")

    def info(self, snap: Snapshot) -> dict:
        return {"path": str(self.path), "generation": snap.generation, "documents": len(snap),
                "components": snap.manifest["components"],
                "shards": [{"path": s["path"], "generation": s["generation"], "documents": s["live"],
                            "answering": not sh.describe().missing}
                           for s, sh in zip(snap.cluster["shards"], snap.shards)]}

    def writer(self, wait, handle):
        from ..index.cluster import is_cluster
        from ..index.cluster_writer import ClusterWriter

        if not is_cluster(self.path):
            raise ConfigError(f"this server cannot see {self.path} (its shards answer on Ray Serve): write with "
                              "`ldr add CORPUS -i IDX` where the index is; the replicas follow each commit")
        return ClusterWriter(self.path, wait=wait)


def open_on_ray(path, handles: list, device: str | None = None, trust_remote_code: bool = False,
                timeout_s: float = TIMEOUT_S):
    """The sharded index at `path` searched on its shards' Serve deployments (`deploy`): an
    api.Index over RayShards."""
    from ..api import Index
    return Index(path, device=device, trust_remote_code=trust_remote_code,
                 shards=RayShards(path, handles, timeout_s))


def _shard_count(root: str) -> int:
    from ..index.replica import newest_cluster
    return len(newest_cluster(root)["shards"])


def deploy(index_path: str, address: str | None, replicas: int, device: str | None = None,
           cpus: float = 0.25, local: str | None = None) -> list:
    """Start (or join) Ray, run one Serve application per shard with `replicas` replicas (each
    reserving `cpus` of Ray's CPUs: a shard's first stages are brief numpy and mapped reads), and
    return their handles. `local`: each replica serves its own copy of its shard under this
    folder of its node (ShardReplica). A shard whose resource (PLACE) some node has gets its
    replicas on those nodes only."""
    import ray
    from ray import serve

    from ..index.remote import is_uri

    global _shard_count
    if not hasattr(_shard_count, "remote"):
        _shard_count = ray.remote(num_cpus=0)(_shard_count)
    ray_session.join(address, logging.WARNING)
    serve.start(proxy_location="Disabled")       # the coordinator's uvicorn is the HTTP front
    root = index_path if is_uri(index_path) else str(Path(index_path).absolute())
    try:                # read where the nodes are: this process may not see the index
        n = ray.get(_shard_count.remote(root))
    except ray.exceptions.RayTaskError as e:
        raise ConfigError(f"--ray serves a sharded index that its nodes can read; at {root} they found none: "
                          f"{getattr(e, 'cause', e)}") from None
    deployment = serve.deployment(ShardReplica, name="shard")
    have = ray.cluster_resources()

    def options(i: int) -> dict:
        # nodes that hold shard i's files say so with a resource (`ray start --resources
        # '{"ldr_shard_0": 1000}'`): its replicas run there and nowhere else; else anywhere
        placed = {"resources": {PLACE.format(i): 0.001}} if PLACE.format(i) in have else {}
        # a shard's calls last milliseconds: a replica being stopped (a redeploy, a delete, a
        # scale-down) looks for unfinished calls every 0.2 s, not Serve's 2 s, and is killed after 10
        # no access log: a line for each of a query's calls was 2% of a replica's time (ldr logs its own)
        return {"num_replicas": replicas, "ray_actor_options": {"num_cpus": cpus, **placed},
                "graceful_shutdown_wait_loop_s": 0.2, "graceful_shutdown_timeout_s": 10,
                "logging_config": {"enable_access_log": False}}

    # every shard's application deploys at once (one serve.run per shard waited ~6 s for each in turn)
    return serve.run_many([serve.RunTarget(deployment.options(**options(i)).bind(root, i, device, local),
                                           name=APP.format(i), route_prefix=None) for i in range(n)])
