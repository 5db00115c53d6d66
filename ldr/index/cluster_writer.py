"""The writer of a sharded index (cluster.py): it holds the cluster's write lock, writes each shard
through that shard's own IndexWriter, and commits the cluster manifest last.

Before touching a shard it pins the generation the current cluster manifest names (a reader's
pin), so no shard writer collects it; and it brings back any shard a killed or failed write left
ahead of the cluster (`reconcile`: that shard's named generation is committed again as its
newest), so every write starts from the generation readers answer from.
"""
from __future__ import annotations

import logging
import shutil

import numpy as np
from pathlib import Path
from typing import Iterable

from ..corpus import IngestReport
from ..errors import ConfigError, NotAnIndex
from . import generations as gens
from .cluster import (collect_cluster, is_cluster, missing_shard, new_cluster, publish_cluster, read_cluster,
                      route_file, routed_docs, shard_entry, shard_of, shard_rel)
from .faults import crash_point
from .lock import WriteLock
from .manifest import read_manifest
from .writer import IndexWriter

log = logging.getLogger(__name__)
KEEP = 3     # cluster manifests kept (readers pin shard generations, not these files)
BM25_BACKENDS = ("native", None, "none")   # the BM25 that scores with the whole index's statistics


class ClusterWriter:
    def __init__(self, root, wait: bool | float = False, create: bool = False, threads: int = 0):
        self.root = Path(root).absolute()
        self.wait, self.threads = wait, threads
        self.ray_info: dict = {}
        if not create and not is_cluster(self.root):
            raise NotAnIndex(f"{str(self.root)!r} is not a sharded ldr index")
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = WriteLock(self.root, wait)
        self.pins: list = []
        try:
            self.current = read_cluster(self.root) if is_cluster(self.root) else None
            if self.current is not None:
                self.pins = [gens.Pin(self.root / s["path"], s["generation"]) for s in self.current["shards"]
                             if s["generation"] is not None]
                self.reconcile()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for p in self.pins:
            p.close()
        self.pins = []
        self.lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def generation(self) -> int:
        return self.current["generation"] if self.current else 0

    @property
    def n_shards(self) -> int:
        return len(self.current["shards"])

    def state(self) -> str:
        """What `ldr add` and the other write commands print after a commit."""
        return f"{self.current['stats']['docs']} documents in {self.n_shards} shards"

    def shard_path(self, i: int) -> Path:
        return self.root / shard_rel(i)

    def reconcile(self) -> list[int]:
        """Shards whose newest generation is not the one the cluster names (a write that died
        between a shard's commit and the cluster's), brought back; returns their numbers."""
        behind = []
        for i, s in enumerate(self.current["shards"]):
            path = self.shard_path(i)
            newest = (gens.generations(path) or [None])[-1] if path.is_dir() else None
            if newest == s["generation"]:
                continue
            if newest is None and s["generation"] is not None:     # not behind: gone
                raise missing_shard(self.root, i, s)
            behind.append(i)
            if s["generation"] is None:       # created by a write no cluster generation names
                shutil.rmtree(path, ignore_errors=True)
                continue
            log.warning("shard %d is at generation %s, the cluster names %d: bringing it back", i, newest,
                        s["generation"])
            with IndexWriter(path, wait=self.wait, threads=self.threads, cluster=True) as w:
                w.revert(s["generation"])
        return behind

    # -- operations -----------------------------------------------------------------------------
    def build(self, docs: Iterable, config, n_shards: int, report: IngestReport, progress: bool = False,
              ray=None) -> dict:
        """Index `docs` into `n_shards` new shards (each a complete index) and commit generation 1;
        with `ray` (RayOptions) the shards build in parallel as Ray tasks."""
        if self.current is not None:
            raise ConfigError(f"{self.root} is a sharded index already: add to it with `ldr add`, or build a new one "
                              "in another directory (rebuilding a sharded index in place is not supported)")
        if n_shards < 1:
            raise ConfigError(f"--shards must be at least 1 (got {n_shards})")
        if config.bm25 not in BM25_BACKENDS:
            raise ConfigError(f"a sharded index scores BM25 with the whole index's statistics, which the native "
                              f"backend takes; --bm25 {config.bm25} cannot: use --bm25 native (the default) or none")
        config, docs = config.resolved(docs)      # one language for every shard
        work = self.root / ".ldr-tmp-route"
        try:
            files, counts = route_file(docs, n_shards, work, report)
            if ray is not None:
                from .ray_shards import build_on_ray
                self.ray_info = build_on_ray([self.shard_path(i) for i in range(n_shards)], files, counts, config, ray)
            else:
                for i, f in enumerate(files):
                    with IndexWriter(self.shard_path(i), wait=self.wait, threads=self.threads, create=True,
                                     cluster=True) as w:
                        w.rebuild(routed_docs(f), config, IngestReport(), progress=progress, total=counts[i])
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return self._commit("index", range(n_shards), {"added": sum(counts), "shards": n_shards,
                                                       "skipped": report.n_skipped, "skip_reasons": dict(report.skipped),
                                                       **({"ray": self.ray_info} if ray is not None else {})})

    def add(self, docs: Iterable, report: IngestReport, progress: bool = False, max_doc_mb: float | None = None,
            auto_merge: bool = True, ray=None) -> dict:
        """Each document to its shard (an id already there replaces its copy; an unchanged one is
        counted, not encoded); the shards that got documents commit, then the cluster."""
        if ray is not None:
            raise ConfigError("adding to a sharded index on Ray is not supported yet: add without --ray")
        work = self.root / ".ldr-tmp-route"
        result = {"added": 0, "replaced": [], "unchanged": 0, "skipped": 0}
        touched = []
        try:
            files, counts = route_file(docs, self.n_shards, work, report, max_doc_mb)
            for i, f in enumerate(files):
                if not counts[i]:
                    continue
                with IndexWriter(self.shard_path(i), wait=self.wait, threads=self.threads, cluster=True) as w:
                    r = w.add(routed_docs(f), IngestReport(), progress=progress, total=counts[i],
                              auto_merge=auto_merge)
                if r["added"] or r["replaced"]:      # the shard committed (an unchanged add does not)
                    touched.append(i)
                result["added"] += r["added"]
                result["replaced"] += r["replaced"]
                result["unchanged"] += r["unchanged"]
                crash_point("cluster:shard-committed")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        report.indexed -= result["unchanged"]
        report.unchanged += result["unchanged"]
        result["unchanged"] = report.unchanged        # and the files found unchanged unread (known_files)
        result["skipped"] = report.n_skipped
        result["replaced"] = sorted(result["replaced"])
        if not touched:          # nothing new (every document unchanged or skipped): no commit, as unsharded
            return {**result, "generation": self.generation}
        return self._commit("add", touched, {**{k: v if isinstance(v, int) else len(v) for k, v in result.items()},
                                             "skip_reasons": dict(report.skipped)}, result)

    def origins(self) -> list[tuple[str, str, str]]:
        """Every shard's (id, folder, path) rows: a folder moved is judged over the whole index."""
        rows: list[tuple[str, str, str]] = []
        for i in range(self.n_shards):
            with IndexWriter(self.shard_path(i), wait=self.wait, cluster=True) as w:
                rows += w.origins()
        return rows

    def delete(self, ids: Iterable[str]) -> dict:
        ids = list(dict.fromkeys(str(i) for i in ids))
        by_shard: dict[int, list[str]] = {}
        for i in ids:
            by_shard.setdefault(shard_of(i, self.n_shards), []).append(i)
        deleted, missing, touched = [], [], []
        for s, group in sorted(by_shard.items()):
            with IndexWriter(self.shard_path(s), wait=self.wait, cluster=True) as w:
                r = w.delete(group)
            deleted += r["deleted"]
            missing += r["missing"]
            if r["deleted"]:
                touched.append(s)
                crash_point("cluster:shard-committed")
        result = {"deleted": sorted(deleted), "missing": missing}
        return self._commit("delete", touched, {"deleted": len(deleted)}, result) if touched else \
            {**result, "generation": self.generation}

    def merge(self, max_segments: int = 1, faiss: str | None = None, rewrite: dict | None = None) -> dict:
        merged, touched = 0, []
        for i in range(self.n_shards):
            with IndexWriter(self.shard_path(i), wait=self.wait, cluster=True) as w:
                r = w.merge(max_segments, faiss=faiss, rewrite=rewrite)
            if r["merged"]:
                merged += r["merged"]
                touched.append(i)
                crash_point("cluster:shard-committed")
        result = {"merged": merged, "shards": len(touched)}
        return self._commit("merge", touched, dict(result), result) if touched else \
            {**result, "generation": self.generation}

    def reshard(self, out, n_shards: int) -> dict:
        """A new sharded index of `n_shards` shards at `out` holding this one's live documents: each
        new shard's segment is copied from the old shards' rows that route to it (vectors, postings,
        texts as they are: nothing re-encoded), numbered anew; then `out`'s cluster commits."""
        shards = [(self.shard_path(i), read_manifest(self.shard_path(i), s["generation"]))
                  for i, s in enumerate(self.current["shards"])]
        return copy_routed(shards, out, n_shards, self.wait, self.threads, {"from_shards": self.n_shards})

    def set_search_defaults(self, search: dict, record: dict | None = None) -> dict:
        """New query-time defaults (`ldr tune`) on every shard, then the cluster commit."""
        for i in range(self.n_shards):
            with IndexWriter(self.shard_path(i), wait=self.wait, cluster=True) as w:
                w.set_search_defaults(search, record)
            crash_point("cluster:shard-committed")
        return self._commit("tune", range(self.n_shards), dict(record or {}))

    def _commit(self, op: str, touched, record: dict, result: dict | None = None) -> dict:
        """The commit point: every shard's generation now (the touched ones re-read), written last."""
        touched = set(touched)
        old = self.current["shards"] if self.current else []
        shards = [shard_entry(self.root, i, read_manifest(self.shard_path(i))) if i in touched or i >= len(old)
                  else old[i] for i in range(max(len(old), max(touched, default=-1) + 1))]
        crash_point(f"cluster:{op}:before-publish")
        manifest = new_cluster(self.generation + 1, shards, {}, (self.current or {}).get("history", []),
                               {"op": op, **record}, (self.current or {}).get("index_id"))
        publish_cluster(self.root, manifest)
        self.current = manifest
        collect_cluster(self.root, KEEP)
        return {**(result or record), "generation": manifest["generation"]}


def reshard_index(src, out, n_shards: int, wait: bool | float = False, threads: int = 0) -> dict:
    """`ldr reshard -i IDX` of an unsharded index: its pinned newest generation copied into a new
    sharded index at `out` (nothing re-encoded; the source is only read)."""
    from .view import pin_manifest

    manifest, pin = pin_manifest(Path(src))
    try:
        return copy_routed([(Path(src), manifest)], out, n_shards, wait, threads, {"from_shards": 0})
    finally:
        if pin is not None:
            pin.close()


def copy_routed(sources: list, out, n_shards: int, wait, threads: int, record: dict) -> dict:
    """Commit a new sharded index at `out` whose shard j holds the live rows of `sources` ([(index
    root, its manifest)]) whose ids route to j, every component's part copied as it is."""
    from .. import components as registry
    from .docstore import Docstore
    from .segment import read_deletes

    if n_shards < 1:
        raise ConfigError(f"--shards must be at least 1 (got {n_shards})")
    out = Path(out).absolute()
    for root, _ in sources:
        root = Path(root).absolute()
        if out == root or root in out.parents or (root.parent.name == "shards" and root.parent.parent in
                                                   (out, *out.parents)):
            raise ConfigError(f"{out} is inside the index being resharded: reshard into a new directory beside it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not empty: reshard into a new directory (an index there would be "
                          "hidden by the new one)")
    # built under a name of ldr's beside `out`, renamed into place once committed: a reshard killed
    # mid-way leaves no half index at `out`, and the next run removes what it left
    stage = out.parent / f".{out.name}.ldr-reshard"
    shutil.rmtree(stage, ignore_errors=True)
    first = sources[0][1]
    for name, kind in registry.kinds(first["components"]):
        if kind.uses_store(first["components"][name]):     # tantivy / Lucene: one store, its own statistics
            raise ConfigError(f"this index keeps {name} in an index store of its own, which a segment copy cannot "
                              f"route and which scores with its own statistics: build it with the default {name} "
                              "settings to shard it")
    parts = []
    for root, m in sources:
        for seg in m["segments"]:
            ids = Docstore(root / seg["path"], seg["docs"]).ids
            parts.append((root, seg, read_deletes(root, seg), np.array([shard_of(d, n_shards) for d in ids],
                                                                       dtype=np.int64)))
    try:
        result = _fill(stage, first, parts, n_shards, wait, threads, record)
        crash_point("reshard:before-rename")
        if out.exists():
            out.rmdir()                  # the empty folder the user named
        stage.rename(out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return result


def _fill(stage: Path, first: dict, parts: list, n_shards: int, wait, threads: int, record: dict) -> dict:
    from .segment import merge

    with ClusterWriter(stage, wait=wait, create=True, threads=threads) as target:
        for j in range(n_shards):
            path = target.shard_path(j)
            mine = [(r, seg, deleted | (route != j)) for r, seg, deleted, route in parts]
            with IndexWriter(path, wait=wait, threads=threads, create=True, cluster=True) as w:
                segs = [merge(path, mine, 1, first["components"], uids_from=0)] \
                    if any((~m).any() for _, _, m in mine) else []
                n = sum(s["docs"] for s in segs)
                w._commit("reshard", segs, {k: dict(v) for k, v in first["components"].items()},
                          first.get("search", {}), first.get("ingest", {}), first.get("settings", {}),
                          {"added": n, "next_uid": n, "next_segment": 2})
        result = target._commit("reshard", range(n_shards), {**record, "shards": n_shards})
    return result
