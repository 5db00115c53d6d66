"""A sharded index opened for search (storage: ldr/index/cluster.py): the shards of one cluster
generation, each an Index pinned to the generation the cluster names, searched in one process
(a thread per shard) so that a query answers exactly as the unsharded index of the same documents.

The query is encoded once (BM25 with the whole index's statistics: document count, average
length and every query term's document frequency, summed over the shards); each shard runs the
plan's first stages; the coordinator gathers their lists (search/gather.py) and runs the rest.
"""
from __future__ import annotations

import os
from pathlib import Path

from .api import Index
from .corpus import Doc, IngestReport, corpus_docs
from .errors import IndexFormatError, NotAnIndex
from .handle import ClusterHandle
from .index.cluster import check_shard_manifest, is_cluster, missing_shard, read_cluster, shard_of
from .index.ray_build import ray_options
from .search.gather import ShardMap
from .search.searcher import Snapshot


class ShardedIndex(ClusterHandle):
    """`ldr.open(path)` of a sharded index: search, plan, documents, add, delete, merge, as an
    Index (handle.py: one search over its shards, written once for both)."""

    def __init__(self, path: str | os.PathLike, verify: bool = False, device: str | None = None,
                 trust_remote_code: bool = False, generation: int | None = None):
        self.path = Path(path)
        self.device, self.trust_remote_code, self.verify = device, trust_remote_code, verify
        self._init_shared()
        self._snap = self._open(generation)

    def _open(self, generation: int | None) -> Snapshot:
        """The cluster generation (newest, or `generation`) with every shard pinned to the
        generation it names: one point in time, swapped whole by `refresh`."""
        for _ in range(20):     # a writer may commit (and collect) between reading and pinning
            cluster = read_cluster(self.path, generation)
            shards = []
            try:
                for i, s in enumerate(cluster["shards"]):
                    try:
                        shards.append(Index(self.path / s["path"], verify=self.verify, device=self.device,
                                            trust_remote_code=self.trust_remote_code, generation=s["generation"]))
                    except NotAnIndex:
                        raise missing_shard(self.path, i, s) from None
                    check_shard_manifest(self.path, i, s, shards[-1].manifest)
            except IndexFormatError:
                for sh in shards:
                    sh.close()
                if generation is None and read_cluster(self.path)["generation"] != cluster["generation"]:
                    continue
                raise
            parts = [sh.as_shard() for sh in shards]
            snap = Snapshot(cluster["generation"], shards[0].manifest, parts, self._sides(shards[0].manifest))
            snap.cluster, snap.indexes = cluster, shards
            return snap
        raise IndexFormatError(f"{self.path} changed too quickly to be opened; try again")

    @property
    def cluster(self) -> dict:
        return self._snap.cluster

    @property
    def shards(self) -> list:
        """Each shard as an Index pinned to the generation the cluster names."""
        return self._snap.indexes

    @property
    def map(self) -> ShardMap:
        """Global document numbers over the shards (offsets)."""
        return self._snap.map

    def live_ids(self) -> list[str]:
        """The id of every document (reads each shard's id column: an export's work, not a search's)."""
        return [i for sh in self._snap.indexes for i in sh.live_ids()]

    def _newest_cluster(self) -> dict:
        return read_cluster(self.path)

    def _open_cluster(self, cluster: dict) -> Snapshot:
        return self._open(None)      # the newest again: _open retries when a writer commits meanwhile

    def close(self) -> None:
        for sh in self._snap.indexes:
            sh.close()
        self._close_pool()

    # -- reading ---------------------------------------------------------------------------------
    def document(self, doc_id: str) -> Doc:
        shards = self.shards
        return shards[shard_of(str(doc_id), len(shards))].document(doc_id)

    def info(self) -> dict:
        """As Index.info, summed over the shards, with each shard's generation and documents: the
        components described over every shard's segments, the ingest of the cluster's last write
        that took documents (an unsharded index shows its last ingest too)."""
        from .index.manifest import describe

        snap = self._snap
        parts = [sh.info() for sh in snap.indexes]
        whole = {**snap.indexes[0].manifest, "doc_count": len(snap),
                 "segments": [s for sh in snap.indexes for s in sh.manifest["segments"]]}
        last = next((h for h in reversed(snap.cluster["history"]) if h.get("op") in ("index", "add", "reshard")
                     and (h.get("added") or h.get("replaced") or h.get("skipped") or h.get("op") != "add")), {})
        ingest = {"indexed": last.get("added", 0) + last.get("replaced", 0), "unchanged": last.get("unchanged", 0),
                  "skipped": last.get("skip_reasons") or ({"documents": last["skipped"]} if last.get("skipped") else {})}
        return {**parts[0], "path": str(self.path), "generation": snap.generation, "documents": len(snap),
                "components": describe(whole)["components"],
                "bytes": sum(p["bytes"] for p in parts), "segments": [s for p in parts for s in p["segments"]],
                "ingest": ingest, "created": snap.cluster["history"][0]["at"],
                "shards": [self._shard_info(s) for s in snap.cluster["shards"]]}

    def _shard_info(self, s: dict) -> dict:
        """A shard as /info and `ldr info` show it; `ahead`: a write failed between this shard's
        commit and the cluster's (readers answer from `generation`; the next write brings it back)."""
        from .index.generations import generations

        newest = (generations(self.path / s["path"]) or [None])[-1]
        return {"path": s["path"], "generation": s["generation"], "documents": s["live"],
                "ahead": newest != s["generation"]}

    # -- writing ---------------------------------------------------------------------------------
    @classmethod
    def build(cls, corpus, path, *, shards: int, config=None, report: IngestReport | None = None,
              progress: bool = False, wait: bool | float = False, ray=None, **options) -> "ShardedIndex":
        """Build a sharded index of `shards` shards; `ray` (True or RayOptions): the shards build in
        parallel on a Ray cluster."""
        from .index.build import BuildConfig
        from .index.cluster_writer import ClusterWriter
        from .index.target import cleared_if_first_build_fails

        config = config or BuildConfig(**options)
        report = report if report is not None else IngestReport()
        with cleared_if_first_build_fails(Path(path), is_cluster), \
                ClusterWriter(path, wait=wait, create=True, threads=config.threads) as w:
            w.build(corpus_docs(corpus, report, config.max_doc_mb, Path(path), config.doc_timeout), config, shards, report, progress,
                    ray_options(ray))
        index = cls(path)
        index.report = report
        return index

    def _writer(self, wait):
        from .index.cluster_writer import ClusterWriter
        return ClusterWriter(self.path, wait=wait)

    def reshard(self, out: str | os.PathLike, shards: int, *, wait: bool | float = False) -> "ShardedIndex":
        """A new sharded index of `shards` shards at `out` with this one's documents, their
        encodings copied (nothing re-encoded); this index is left as it is."""
        return reshard(self, out, shards, wait=wait)


def reshard(index: "Index | ShardedIndex", out: str | os.PathLike, shards: int, *,
            wait: bool | float = False) -> ShardedIndex:
    """A new sharded index of `shards` shards at `out` (a new or empty folder) with the documents
    of `index`, sharded or not, their encodings copied (nothing re-encoded); `index` is left as it
    is. `ldr.reshard(ldr.open("idx"), "idx4", 4)`; `ldr reshard -i idx -o idx4 --shards 4`."""
    if isinstance(index, ShardedIndex):
        with index._writer(wait) as w:
            w.reshard(Path(out).absolute(), shards)
    else:
        from .index.cluster_writer import reshard_index
        reshard_index(index.path, out, shards, wait=wait)
    return ShardedIndex(out, device=index.device, trust_remote_code=index.trust_remote_code)


class Shards:
    """What `ldr eval --shards N` evaluates: `Shards(n)(path)` opens, `.build(...)` builds sharded
    indexes of n shards (the Index class's calls), cached apart from unsharded ones."""

    def __init__(self, n: int):
        self.n, self.cache_tag = n, f"-shards{n}"

    def __call__(self, path, verify: bool = False) -> ShardedIndex:
        return ShardedIndex(path, verify=verify)

    def build(self, corpus, path, config=None, progress: bool = False) -> ShardedIndex:
        return ShardedIndex.build(corpus, path, shards=self.n, config=config, progress=progress)


def open(path: str | os.PathLike, verify: bool = False, device: str | None = None,  # noqa: A001
         trust_remote_code: bool = False, generation: int | None = None) -> "Index | ShardedIndex":
    """Open an index directory at its newest generation: an Index, or a ShardedIndex where `path`
    holds a sharded one (cheap checks; `verify=True` also hashes every file)."""
    cls = ShardedIndex if is_cluster(path) else Index
    return cls(path, verify=verify, device=device, trust_remote_code=trust_remote_code, generation=generation)
