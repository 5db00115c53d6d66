"""Where an index handle's shards come from: one index directory (one local shard), a sharded
index's directory (N local shards) or Ray Serve replicas (N remote shards, serve/ray_shards.py).

The handle (api.Index) is written once over any of them. A shard set opens a point in time (a
search.searcher.Snapshot: the generation, the settings, the shards answering in values) and a
newer one when there is one, keeps or lets go of what a point in time holds, and answers what is
not a search: a document by id, every id, what `ldr info` shows, the writer of its storage.
`handle` in these calls is the Index: its query sides (`_sides`) and thread pool (`_pool()`).
"""
from __future__ import annotations

from pathlib import Path

from .errors import IndexFormatError, NotAnIndex
from .index.view import newest, open_view
from .search.searcher import Snapshot
from .shard import LocalShard, ShardFiles


class OneIndex:
    """One index directory: a point in time is one of its generations, pinned."""
    sharded = False

    def __init__(self, path: Path, verify: bool = False, device: str | None = None):
        self.path, self.verify = Path(path), verify
        self.files = ShardFiles(self.path, device)

    def open(self, generation: int | None, handle) -> Snapshot:
        view = open_view(self.path, generation, full=self.verify)
        return Snapshot(view.generation, view.manifest, [LocalShard(self.files, view)], handle._sides(view.manifest),
                        views=[view])

    def newer(self, snap: Snapshot, handle) -> Snapshot | None:
        """The newest committed generation, if it is not `snap`'s."""
        return None if newest(self.path) in (None, snap.generation) else self.open(None, handle)

    def moved(self, old: Snapshot | None, snap: Snapshot, handle) -> None:
        """After a refresh (`old`: the point in time before; None: it did not move)."""
        if old is not None:
            self.files.retain(snap.views[0].segments)

    def close(self, snap: Snapshot, handle) -> None:
        for view in snap.views:
            view.close()

    def document(self, snap: Snapshot, doc_id: str):
        return snap.shards[0].document(doc_id)

    def live_ids(self, snap: Snapshot) -> list[str]:
        return snap.views[0].segments.live_ids()

    def info(self, snap: Snapshot) -> dict:
        from .index.manifest import describe
        return {"path": str(self.path), **describe(snap.manifest)}

    def writer(self, wait, handle):
        from .index.writer import IndexWriter
        return IndexWriter(self.path, wait=wait, trust_remote_code=handle.trust_remote_code, device=handle.device)


class LocalShards:
    """A sharded index's directory (storage: index/cluster.py): a point in time is a cluster
    generation with every shard pinned to the generation it names."""
    sharded = True

    def __init__(self, path: Path, verify: bool = False, device: str | None = None):
        self.path, self.verify, self.device = Path(path), verify, device
        self._files: dict[str, ShardFiles] = {}

    def files(self, rel: str) -> ShardFiles:
        if rel not in self._files:
            self._files[rel] = ShardFiles(self.path / rel, self.device)
        return self._files[rel]

    def open(self, generation: int | None, handle) -> Snapshot:
        from .index.cluster import check_shard_manifest, missing_shard, read_cluster

        for _ in range(20):     # a writer may commit (and collect) between reading and pinning
            cluster = read_cluster(self.path, generation)
            views = []
            try:
                for i, s in enumerate(cluster["shards"]):
                    try:
                        views.append(open_view(self.path / s["path"], s["generation"], full=self.verify))
                    except NotAnIndex:
                        raise missing_shard(self.path, i, s) from None
                    check_shard_manifest(self.path, i, s, views[-1].manifest)
            except IndexFormatError:
                for view in views:
                    view.close()
                if generation is None and read_cluster(self.path)["generation"] != cluster["generation"]:
                    continue
                raise
            shards = [LocalShard(self.files(s["path"]), v) for s, v in zip(cluster["shards"], views)]
            return Snapshot(cluster["generation"], views[0].manifest, shards, handle._sides(views[0].manifest),
                            cluster=cluster, views=views)
        raise IndexFormatError(f"{self.path} changed too quickly to be opened; try again")

    def newer(self, snap: Snapshot, handle) -> Snapshot | None:
        from .index.cluster import read_cluster
        # the newest again: open retries when a writer commits meanwhile
        return None if read_cluster(self.path)["generation"] == snap.generation else self.open(None, handle)

    def moved(self, old: Snapshot | None, snap: Snapshot, handle) -> None:
        if old is not None:
            for s, view in zip(snap.cluster["shards"], snap.views):
                self.files(s["path"]).retain(view.segments)

    def close(self, snap: Snapshot, handle) -> None:
        for view in snap.views:
            view.close()

    def document(self, snap: Snapshot, doc_id: str):
        from .index.cluster import shard_of
        return snap.shards[shard_of(str(doc_id), len(snap.shards))].document(doc_id)

    def live_ids(self, snap: Snapshot) -> list[str]:
        """Every shard's id column: an export's work, not a search's."""
        return [i for view in snap.views for i in view.segments.live_ids()]

    def info(self, snap: Snapshot) -> dict:
        """Summed over the shards, with each shard's generation and documents: the components
        described over every shard's segments, the ingest of the cluster's last write that took
        documents (an unsharded index shows its last ingest too)."""
        from .index.manifest import describe

        parts = [describe(v.manifest) for v in snap.views]
        whole = {**snap.manifest, "doc_count": len(snap), "segments": [s for v in snap.views for s in v.manifest["segments"]]}
        history = snap.cluster["history"]
        last = next((h for h in reversed(history) if h.get("op") in ("index", "add", "reshard")
                     and (h.get("added") or h.get("replaced") or h.get("skipped") or h.get("op") != "add")), {})
        ingest = {"indexed": last.get("added", 0) + last.get("replaced", 0), "unchanged": last.get("unchanged", 0),
                  "skipped": last.get("skip_reasons") or ({"documents": last["skipped"]} if last.get("skipped") else {})}
        return {**parts[0], "path": str(self.path), "generation": snap.generation, "documents": len(snap),
                "components": describe(whole)["components"], "bytes": sum(p["bytes"] for p in parts),
                "segments": [s for p in parts for s in p["segments"]], "ingest": ingest, "created": history[0]["at"],
                "shards": [self._shard_info(s) for s in snap.cluster["shards"]]}

    def _shard_info(self, s: dict) -> dict:
        """A shard as /info and `ldr info` show it; `ahead`: a write failed between this shard's
        commit and the cluster's (readers answer from `generation`; the next write brings it back)."""
        from .index.generations import generations

        last = (generations(self.path / s["path"]) or [None])[-1]
        return {"path": s["path"], "generation": s["generation"], "documents": s["live"], "ahead": last != s["generation"]}

    def writer(self, wait, handle):
        from .index.cluster_writer import ClusterWriter
        return ClusterWriter(self.path, wait=wait)
