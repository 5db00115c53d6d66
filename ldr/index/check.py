"""`ldr check`: the full verification of an index, beyond the cheap checks made at every open.

Every file's SHA-256 whatever its size, every docstore page (Parquet page checksums), and each
component's own full check (Component.check_part / check_store: array shapes, value ranges, one
document count everywhere). Loads no model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import LdrError, NotAnIndex
from .manifest import file_digest, inside


def _step(problems: list[str], what: str, fn: Callable[[], list[str] | None]) -> None:
    try:
        problems.extend(fn() or [])
    except LdrError as e:
        problems.append(str(e))
    except BaseException as e:  # a damaged file raises whatever its reader raises (tantivy: a Rust panic)
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        problems.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")


def _files(root: Path, manifest: dict, progress) -> list[str]:
    out = []
    for rel, info in manifest["files"].items():
        p = inside(root, rel, "file")
        if not p.is_file():
            out.append(f"{rel} is missing")
        elif p.stat().st_size != info["size"]:
            out.append(f"{rel} has {p.stat().st_size} bytes, expected {info['size']}")
        elif file_digest(p) != info["sha256"]:
            out.append(f"{rel} does not match its SHA-256 (corrupted or modified)")
        progress(rel)
    return out


def _segments(root: Path, manifest: dict, progress) -> list[str]:
    """Every segment: docstore pages, deletes, and each component's part."""
    from .. import components as registry
    from .docstore import KEY_COLUMNS, KEYS, Docstore, read_keys
    from ..components.states import segment_part
    from .segment import read_deletes

    out = []
    comps = manifest["components"]
    for e in manifest["segments"]:
        seg = inside(root, e["path"], "segment path")
        name = e["name"]

        def docstore():
            store = Docstore(seg, e["docs"])
            for g in range(len(store._starts) - 1):   # reads every page: page checksums are verified
                if store.text_file is None:               # format 3: the texts are in these pages
                    store._column(g, "text")
                store._column(g, "meta")
            if store.text_file is not None:               # format 4: every frame against its checksum
                store.text_file.verify()
            read_deletes(root, e)
            store.row_of                                  # ids unique (built lazily elsewhere)
            keys = read_keys(seg, store._pf)
            if keys is not None and not keys.equals(store._pf.read(columns=KEY_COLUMNS)):
                return [f"{name}: {KEYS} does not hold the docstore's ids, titles and lengths; rebuild the index"]
            if "next_uid" in manifest and len(store.uids) and int(store.uids.max()) >= manifest["next_uid"]:
                return [f"{name}: a document has uid {int(store.uids.max())}, at or above the manifest's next_uid "
                        f"{manifest['next_uid']} (a later add would reuse it)"]
        _step(out, f"{name} docstore", docstore)
        for kind_name, kind in registry.kinds(comps):
            _step(out, f"{name} {kind_name}",
                  lambda: [f"{name}: {p}" for p in kind.check_part(segment_part(root, e, kind_name), comps[kind_name])])
        progress(name)
    return out


def _stores(root: Path, manifest: dict, progress) -> list[str]:
    """The index stores (tantivy, Lucene): one index for the generation, onto its live documents."""
    from .. import components as registry
    from .snapshot import Segments

    out = []
    comps = manifest["components"]
    opened: list = []

    def live_ids():
        opened.append(Segments(root, manifest))
        opened[0].row_of                                 # no id held by two live documents
    _step(out, "live ids", live_ids)
    segs = opened[0] if opened else None
    for name, kind in registry.kinds(comps):
        if kind.uses_store(comps[name]):
            segs = segs or Segments(root, manifest)
            _step(out, name, lambda: kind.check_store(root, comps[name], manifest, segs))
            progress(name)
    return out


def check_cluster(path: Path, progress: Callable[[str], None]) -> tuple[dict, list[str]]:
    """A sharded index: every shard checked in full at the generation the cluster names, all of
    them pinned before any is read (a writer beside the check collects none of them); each shard
    the one the cluster committed (its manifest's checksum) holding only documents routed to it;
    any shard whose newest generation is not the named one in `notes` (a write failed between the
    shard's commit and the cluster's: no damage, readers never see it, the next write brings it
    back)."""
    from . import generations as gens
    from .cluster import check_shard_manifest, missing_shard, shard_of

    cluster, pins = _pin_cluster(path)
    try:
        problems, notes, files, docs, components = [], [], 0, 0, {}
        n = len(cluster["shards"])
        for i, s in enumerate(cluster["shards"]):
            shard = Path(path) / s["path"]
            newest = (gens.generations(shard) or [None])[-1]
            if newest != s["generation"]:
                notes.append(f"shard {i} is at generation {newest}, the cluster names {s['generation']}: a write "
                             "failed there (readers answer from the named one; the next write brings it back)")
            if s["generation"] is None:
                continue
            try:
                manifest, found = check_index(shard, progress, s["generation"])
            except NotAnIndex:
                problems.append(str(missing_shard(Path(path), i, s)))
                continue
            problems += [f"shard {i}: {p}" for p in found]
            if manifest is None:
                continue
            try:
                check_shard_manifest(Path(path), i, s, manifest)
            except LdrError as e:
                problems.append(str(e))
            stray = [d for d in _live_ids(shard, manifest) if shard_of(d, n) != i]
            if stray:
                problems.append(f"shard {i} holds {len(stray)} document(s) routed to other shards (e.g. {stray[0]!r})")
            files, docs, components = files + len(manifest["files"]), docs + manifest["doc_count"], \
                manifest["components"]
        if docs != cluster["stats"]["docs"]:
            problems.append(f"the shards hold {docs} documents, the cluster commit names {cluster['stats']['docs']}")
        return {"files": range(files), "doc_count": docs, "components": components, "shards": n,
                "notes": notes}, problems
    finally:
        for p in pins:
            p.close()


def _pin_cluster(path: Path) -> tuple[dict, list]:
    """The newest cluster manifest with every shard generation it names pinned (a writer may
    commit and collect between reading and pinning: then the newer one)."""
    from . import generations as gens
    from .cluster import read_cluster
    from .manifest import read_manifest

    for _ in range(20):
        cluster, pins = read_cluster(path), []
        try:
            for s in cluster["shards"]:
                if s["generation"] is not None:
                    pins.append(gens.Pin(Path(path) / s["path"], s["generation"]))
                    read_manifest(Path(path) / s["path"], s["generation"])     # still there once pinned
            return cluster, pins
        except LdrError:
            for p in pins:
                p.close()
            if read_cluster(path)["generation"] == cluster["generation"]:
                return cluster, []       # not a race: check_index reports what is wrong
    return read_cluster(path), []


def _live_ids(root: Path, manifest: dict) -> list[str]:
    from .docstore import Docstore
    from .segment import read_deletes

    out = []
    for seg in manifest["segments"]:
        ids = Docstore(root / seg["path"], seg["docs"]).ids
        deleted = read_deletes(root, seg)
        out += [d for d, x in zip(ids, deleted) if not x]
    return out


def check_index(path: str | Path, progress: Callable[[str], None] = lambda _: None,
                generation: int | None = None) -> tuple[dict | None, list[str]]:
    """(manifest or None, problems) for the newest generation. No problems: the index is sound.
    Raises NotAnIndex for a path that holds no index at all.

    The generation checked is pinned as a reader pins it, so a writer committing beside the
    check cannot collect its files mid-check (that was reported as damage)."""
    from .view import pin_manifest

    from .cluster import is_cluster

    root = Path(path)
    if generation is None and is_cluster(root):
        return check_cluster(root, progress)
    try:
        manifest, pin = pin_manifest(root, generation)
    except NotAnIndex:
        raise        # no index to repair: the caller's error, not a problem found in one
    except LdrError as e:
        return None, [str(e)]
    try:
        problems: list[str] = []
        _step(problems, "files", lambda: _files(root, manifest, progress))
        _step(problems, "segments", lambda: _segments(root, manifest, progress))
        _step(problems, "stores", lambda: _stores(root, manifest, progress))
        return manifest, problems
    finally:
        if pin is not None:
            pin.close()
