"""The index writer: every change to an index is a new generation, written by one process at a time.

    index (build)  new segments (+ a new tantivy/Lucene index), committed as the next generation
    add            the new documents in one new segment; an id that exists replaces its old copy
    delete         new deletes files for the segments that lose documents
    merge          the live rows of several segments copied into one (nothing re-encoded)

The writer never names a kind: each component's segment part goes through SegmentWriter and merge
(segment.py), its index store (tantivy, Lucene) through Stores (stores.py). What a killed writer
leaves (segment and work folders, a `.part` manifest) is listed by no manifest and removed by the
next writer.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterable

import numpy as np

from ..corpus import Doc, IngestReport, check_documents
from ..errors import ConfigError, IndexFormatError, IndexWriteError
from .. import components as registry
from . import generations as gens
from .faults import crash_point, no_space as _no_space
from .lock import WriteLock
from .manifest import check_uids, file_entries, new_manifest, read_manifest, seal, verify_listed
from .feed import SegmentFeed
from .segment import delete_rows, highest_uids, merge as merge_segments, read_deletes, rows_of
from .stores import Stores, collect
from .unchanged import Unchanged, origins

log = logging.getLogger(__name__)
AUTO_MERGE_ABOVE, AUTO_MERGE_TO = 10, 5   # an add that leaves more segments than 10 merges the smallest to 5
HISTORY = 100                # operations remembered in the manifest


class IndexWriter:
    """Holds an index directory's write lock; each operation commits one generation."""

    def __init__(self, root: str | os.PathLike, wait: bool | float = False, trust_remote_code: bool = False,
                 device: str | None = None, threads: int = 0, create: bool = False, cluster: bool = False):
        """Takes the write lock of the index at `root`; nothing in a directory is created, changed or
        deleted before it is proven an ldr index (add/delete/merge elsewhere say "no index").
        `create` (or `rebuild`) first checks it is new, empty or an index (target.check_target).
        A shard of a sharded index is written only by its cluster's writer (`cluster=True`): a
        commit there alone would collect the generation the cluster names."""
        self.root = Path(root).absolute()
        if not cluster:
            from .cluster import cluster_of_shard

            owner = cluster_of_shard(self.root)
            if owner is not None:
                raise ConfigError(f"{self.root} is a shard of the sharded index {owner}: write to the sharded index "
                                  f"(`ldr add CORPUS -i {owner}`, `ldr delete ID -i {owner}`), never to one shard")
        self.wait, self.lock, self.current = wait, None, None
        self.trust_remote_code, self.device = trust_remote_code, device
        self.threads = threads or os.cpu_count() or 1
        self.profile: dict = {}      # seconds per build stage of the last segment written
        self.ray_info: dict = {}     # the last Ray build: cluster, workers, shards, retries
        if create:
            self._take(checked=True)     # build_index has checked the target
        elif self.root.is_dir() and gens.generations(self.root):
            read_manifest(self.root)     # an ldr manifest, or an error before the lock file is touched
            self._take()

    def _take(self, checked: bool = False) -> None:
        """Lock the directory (a new one is made once checked) and clean up after dead writers."""
        if self.lock is not None:
            return
        if not checked and not (self.root.is_dir() and gens.generations(self.root)):
            from .target import check_target
            check_target(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = WriteLock(self.root, self.wait)
        try:
            self.current = read_manifest(self.root) if gens.generations(self.root) else None
            self.collect()     # leftovers of writers that died
        except BaseException:
            self.lock.release()
            raise

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def generation(self) -> int:
        return self.current["generation"] if self.current else 0

    def _writable(self) -> dict:
        if self.current is None:
            raise IndexFormatError(f"no index at {self.root} yet: build one with `ldr index CORPUS -o {self.root}`")
        if self.current.get("read_only"):
            raise IndexFormatError(
                f"{self.root} is a format {self.current['format_version']} index (ldr 0.1): it can be searched but "
                f"not changed. Rebuild it with `ldr index CORPUS -o {self.root}` (that commits a new generation "
                "in the same directory), then add, delete and merge")
        # a write never commits on top of a manifest whose next uid is already taken
        check_uids(self.root, self.current, highest_uids(self.root, self.current["segments"]))
        return self.current

    def _encoder_settings(self, components: dict) -> dict:
        """{kind: encoder settings} the index's models were built with (kinds with a model)."""
        every = {name: kind.encoder_settings(components[name], self.trust_remote_code, self.device, str(self.root))
                 for name, kind in registry.kinds(components)}
        return {name: st for name, st in every.items() if st is not None}

    @staticmethod
    def _loaders(settings: dict) -> dict:     # a model loads (once a process) when a document reaches it
        return {name: registry.lazy_encoder(name, st) for name, st in settings.items()}

    def _commit(self, op: str, segments: list[dict], components: dict, search: dict, ingest: dict,
                settings: dict, record: dict, known: dict | None = None) -> dict:
        gen = self.generation + 1
        segments = [s for s in segments if s["live"] > 0]   # an emptied segment is dropped
        rels = [s["path"] for s in segments if s["path"] != "."]
        rels += Stores(self.root, components, self.threads, append=False).paths()     # the index stores' folders
        components = gens.held_codebooks(self.root, components)
        rels += sorted(gens.codebooks(segments, components))        # compressed dense parts' codebooks
        previous = (self.current or {}).get("files", {})
        for rel in rels:
            if not (self.root / rel).exists():
                raise IndexFormatError(f"{self.root / rel} is missing; the index is damaged: run `ldr check`")
        # `known`: files already hashed (a Ray build's segments, checked by the driver)
        files = file_entries(self.root, rels, {**previous, **(known or {})})
        deletes = {s["deletes"] for s in segments if s.get("deletes")}
        files = {r: f for r, f in files.items() if not Path(r).name.startswith("deletes-") or r in deletes}
        manifest = new_manifest(gen, components, segments, ingest, settings)
        prev = self.current or {}
        manifest["next_uid"] = max(prev.get("next_uid", 0), record.pop("next_uid", 0))
        manifest["next_segment"] = max(prev.get("next_segment", 1), record.pop("next_segment", 1))
        manifest["search"] = search
        manifest["index_id"] = prev.get("index_id") or os.urandom(16).hex()     # a copy is told by it (replica_target)
        record = {"generation": gen, "op": op, "at": manifest["created"],
                  **dict.fromkeys(("added", "replaced", "deleted", "skipped"), 0), **record}
        manifest["history"] = (prev.get("history", []) + [record])[-HISTORY:]
        manifest["files"] = files
        for rel in rels:
            gens.fsync_tree(self.root / rel)
        if (self.root / "segments").is_dir():
            gens.fsync_dir(self.root / "segments")
        crash_point(f"{op}:before-publish")
        gens.publish(self.root, seal(manifest))
        crash_point(f"{op}:after-publish")
        self.current = manifest
        log.info("committed generation %d (%s): %d documents in %d segments", gen, op, manifest["doc_count"],
                 len(segments))
        self.collect()
        return manifest

    def collect(self) -> list[str]:
        """Remove generations no reader holds and files no kept generation lists (see generations.py)."""
        return collect(self.root, (self.current or {}).get("generation"))

    # -- operations ---------------------------------------------------------------------------
    def rebuild(self, docs: Iterable[Doc], config, report: IngestReport | None = None, progress: bool = True,
                total: int | None = None, ray=None) -> dict:
        """Index `docs` from scratch with `config` (a BuildConfig) as the next generation; with
        `ray` (RayOptions) the encoding runs on a Ray cluster (see ray_build.py)."""
        self._take()
        config, docs = config.resolved(docs)     # `auto` language and models made concrete
        report, components, settings = report if report is not None else IngestReport(), {}, {}
        for name in registry.names():
            got = registry.get(name).configure(config)
            if got is not None:
                components[name] = got[0]
                if got[1] is not None:
                    settings[name] = got[1]
        if not components:
            raise ConfigError("nothing to index: enable at least one component (BM25, dense, sparse, ...)")
        prev_next_uid = (self.current or {}).get("next_uid", 0)
        number = (self.current or {}).get("next_segment", 1)
        t0 = time.perf_counter()
        stores = Stores(self.root, components, self.threads, append=False)
        segs, n_bytes, about, known = self._write_segments(
            docs, report, settings, components, stores, number, prev_next_uid, progress, total, config.max_doc_mb,
            False, ray)
        for name, info in about.items():
            components[name].update(info)
        stores.publish(self.generation + 1)
        seconds = time.perf_counter() - t0
        search = dict(config.search)    # only what this build set: the query side owns the defaults
        build = {"seconds": round(seconds, 3), "bytes": n_bytes, "threads": self.threads, "stages": self.profile,
                 "language": config.language_info, "search_profile": config.search_profile}
        if ray is not None:
            build["ray"] = self.ray_info
        n_docs = sum(s["docs"] for s in segs)
        return self._commit("index", segs, components, search, report.to_dict(), {"build": build},
                            {"added": n_docs, "replaced": 0, "deleted": 0, "skipped": report.n_skipped,
                             "seconds": round(seconds, 3), "next_uid": prev_next_uid + n_docs,
                             "next_segment": number + len(segs)}, known)

    def _write_segments(self, docs, report, settings, components, stores, number, first_uid, progress, total,
                        max_doc_mb, allow_small, ray):
        """(segment entries, bytes, index-level component info, files already hashed): one local
        segment, or one per shard on Ray. `stores` (the index stores) are fed and closed, not
        published."""
        if ray is not None:
            from .ray_build import write_segments
            return write_segments(self, docs, report, settings, components, stores, number, first_uid, progress,
                                  total, max_doc_mb, ray)
        seg, n_bytes, about = self._write_segment(docs, report, self._loaders(settings), components, stores, number,
                                                  first_uid, progress, total, max_doc_mb, allow_small)
        return [seg], n_bytes, about, {}

    def _write_segment(self, docs, report, encoders, components, stores, number, first_uid, progress, total,
                       max_doc_mb, allow_small):
        """Stream documents into segment `number` (and the index stores' work folders); returns
        (segment entry, bytes, index-level component info)."""
        created: list[Path] = []
        feed = SegmentFeed(self.root, number, components, encoders, stores, allow_small, created)
        entry, n_bytes, about = self._guard(lambda: feed.run(docs, report, first_uid, progress, total, max_doc_mb),
                                            created)
        self.profile = feed.profile
        return entry, n_bytes, about

    def _guard(self, fn, created: list):
        """Run a write step; on failure remove what it created (`created` may grow while it runs).
        A full disk is a clear error; the last generation stays as it was."""
        try:
            return fn()
        except BaseException as e:
            for p in created:
                shutil.rmtree(p, ignore_errors=True)
            if _no_space(e):
                raise IndexWriteError(f"no space left on device while writing {self.root}; nothing was committed "
                                      f"(generation {self.generation} is intact): free space and try again") from None
            raise

    def _deleted_masks(self) -> list[np.ndarray]:
        return [read_deletes(self.root, s) for s in self.current["segments"]]

    def _delete_rows(self, found: dict) -> list[dict]:
        return delete_rows(self.root, self.current["segments"], self._deleted_masks(), found, self.generation + 1)

    def _rows_of(self, ids: Iterable[str]) -> dict:
        return rows_of(self.root, self.current["segments"], self._deleted_masks(), ids)

    def add(self, docs: Iterable[Doc], report: IngestReport | None = None, progress: bool = True,
            total: int | None = None, max_doc_mb: float = 64.0, auto_merge: bool = True, ray=None) -> dict:
        """Encode only `docs` into a new segment (with `ray`, one per shard, encoded on a Ray
        cluster); ids already in the index are replaced."""
        current = self._writable()
        report = report if report is not None else IngestReport()
        components = {k: dict(v) for k, v in current["components"].items()}
        settings = self._encoder_settings(components)
        number, first_uid = current["next_segment"], current["next_uid"]
        t0 = time.perf_counter()
        # documents are streamed once; the ids they replace are found after the segment is written
        stores = Stores(self.root, components, self.threads, append=True, files=current.get("files"))
        docs = check_documents(docs, report, max_doc_mb, Unchanged(self.root, current["segments"],
                                                                   self._deleted_masks()))
        segs, n_bytes, _, known = self._write_segments(
            docs, report, settings, components, stores, number, first_uid, progress, total, max_doc_mb, True, ray)
        created = [self.root / seg["path"] for seg in segs] + stores.folders
        n_new = sum(seg["docs"] for seg in segs)
        if n_new == 0:     # every document unchanged (or skipped): nothing to commit
            for p in created:
                shutil.rmtree(p, ignore_errors=True)
            return {"added": 0, "replaced": [], "unchanged": report.unchanged, "skipped": report.n_skipped,
                    "generation": self.generation}
        crash_point("add:segment-written")

        def finish():
            from .docstore import Docstore
            new_ids = [i for seg in segs for i in Docstore(self.root / seg["path"], seg["docs"]).ids]
            old = self._rows_of(new_ids)
            segments = self._delete_rows(old)
            if stores:
                if old:   # the replaced copies leave the index stores in the same generation
                    stores.open().delete([uid for _, _, uid in old.values()])
                    stores.close()
                stores.publish(self.generation + 1)
            seconds = time.perf_counter() - t0
            record = {"added": n_new - len(old), "replaced": len(old), "unchanged": report.unchanged, "deleted": 0,
                      "skipped": report.n_skipped, "seconds": round(seconds, 3), "bytes": n_bytes,
                      "next_uid": first_uid + n_new, "next_segment": number + len(segs)}
            if ray is not None:
                record["ray"] = self.ray_info
            return self._commit("add", segments + segs, components, current.get("search", {}), report.to_dict(),
                                current.get("settings", {}), record, known), old

        manifest, old = self._guard(finish, created)
        result = {"added": n_new - len(old), "replaced": sorted(old), "unchanged": report.unchanged, "skipped": report.n_skipped,
                  "generation": manifest["generation"]}
        if auto_merge and len(manifest["segments"]) > AUTO_MERGE_ABOVE:
            self.merge(AUTO_MERGE_TO, exact_stores=False)
            result["generation"] = self.generation
        return result

    def origins(self) -> list[tuple[str, str, str]]:
        """(id, folder, path, stamp) of each live document read from a folder (unchanged.origins)."""
        return origins(self.root, self._writable()["segments"], self._deleted_masks())

    def delete(self, ids: Iterable[str]) -> dict:
        """Mark documents deleted (a new deletes file per touched segment) and commit."""
        current = self._writable()
        ids = list(dict.fromkeys(str(i) for i in ids))
        found = self._rows_of(ids)
        missing = [i for i in ids if i not in found]
        if not found:
            return {"deleted": [], "missing": missing, "generation": self.generation}
        t0 = time.perf_counter()
        components = {k: dict(v) for k, v in current["components"].items()}
        stores = Stores(self.root, components, self.threads, append=True, files=current.get("files"))
        created: list[Path] = []

        def run():
            segments = self._delete_rows(found)
            crash_point("delete:deletes-written")
            if stores:
                stores.prepare()
                created.extend(stores.folders)
                stores.open().delete([uid for _, _, uid in found.values()])
                stores.close()
                stores.publish(self.generation + 1)
            return self._commit("delete", segments, components, *_unchanged_parts(current),
                                {"deleted": len(found), "seconds": round(time.perf_counter() - t0, 3)})

        manifest = self._guard(run, created)
        return {"deleted": sorted(found), "missing": missing, "generation": manifest["generation"]}

    def revert(self, generation: int) -> dict:
        """Commit generation `generation` (kept: pinned) again as the newest: a sharded index's
        writer brings back a shard a failed write left ahead of the cluster (cluster_writer.py)."""
        self._writable()
        old = read_manifest(self.root, generation)
        return self._commit("revert", [dict(s) for s in old["segments"]],
                            {k: dict(v) for k, v in old["components"].items()}, *_unchanged_parts(old),
                            {"reverted_to": generation})

    def set_search_defaults(self, search: dict, record: dict | None = None) -> dict:
        """Commit new query-time defaults (e.g. chosen by `ldr tune`); nothing else changes."""
        current = self._writable()
        return self._commit("tune", [dict(s) for s in current["segments"]],
                            {k: dict(v) for k, v in current["components"].items()}, search,
                            *_unchanged_parts(current)[1:], record or {})

    def merge(self, max_segments: int = 1, exact_stores: bool = True, faiss: str | None = None,
              rewrite: dict | None = None) -> dict:
        """Merge the smallest segments (deleted rows dropped; one with deletions rewritten alone) until
        at most `max_segments` remain; `exact_stores`: the index stores anew (BM25 as a fresh build's).
        `faiss`: the dense index type from now on, the merged (even a lone) segment rewritten with it;
        `rewrite` {kind: (its entry from now on, a map of its rows (vectors, owner) -> vectors)}: all."""
        current = self._writable()
        if max_segments < 1:
            raise ConfigError(f"--max-segments must be at least 1 (got {max_segments})")
        comps = current["components"] if faiss is None else registry.retyped(current["components"], faiss)
        comps = {**comps, **{k: entry for k, (entry, _) in (rewrite or {}).items()}}
        segments = [dict(s) for s in current["segments"]]
        masks = self._deleted_masks()
        n_merge = len(segments) - max_segments + 1
        if len(segments) <= max_segments and faiss is None and not rewrite and \
                not (max_segments == 1 and segments and segments[0]["live"] < segments[0]["docs"]):
            return {"merged": 0, "segments": len(segments), "generation": self.generation}
        n_merge = len(segments) if rewrite else max(n_merge, 1)    # a rewritten kind: no segment left as it was
        order = sorted(range(len(segments)), key=lambda i: (segments[i]["live"], i))[:n_merge]
        chosen = sorted(order)     # keep document order: older segments first
        t0 = time.perf_counter()
        number = current["next_segment"]
        created = [self.root / f"segments/seg-{number:06d}"]

        def run():
            # a merge copies these segments' vectors and postings into new files: verify them first
            verify_listed(self.root, current.get("files", {}), [segments[i]["path"] for i in chosen])
            merged = merge_segments(self.root, [(segments[i], masks[i]) for i in chosen], number, comps,
                                    maps={k: f for k, (_, f) in (rewrite or {}).items()})
            crash_point("merge:segment-written")
            keep = [s for i, s in enumerate(segments) if i not in set(chosen)]
            # the merged segment takes the place of the first one it replaces
            pos = sum(1 for i in range(chosen[0]) if i not in set(chosen))
            out = keep[:pos] + [merged] + keep[pos:]
            components = {k: dict(v) for k, v in comps.items()}
            gens.adopt_codebooks(components, merged)
            stores = Stores(self.root, components, self.threads, append=False)
            if stores and exact_stores:   # deleted documents leave every statistic
                stores.prepare()
                created.extend(stores.folders)
                stores.rebuild(out)
                stores.publish(self.generation + 1)
            return self._commit("merge", out, components, *_unchanged_parts(current),
                                {"merged": len(chosen), "seconds": round(time.perf_counter() - t0, 3),
                                 "next_segment": number + 1})
        manifest = self._guard(run, created)
        return {"merged": len(chosen), "segments": len(manifest["segments"]), "generation": manifest["generation"]}


def _unchanged_parts(current: dict) -> tuple[dict, dict, dict]:
    """(search defaults, ingest report, settings) a delete, merge or tune carries over."""
    return current.get("search", {}), current.get("ingest", {}), current.get("settings", {})
