"""`ldr check`: the full verification of an index, beyond the cheap checks made at every open.

Every file's SHA-256 whatever its size, every docstore page (Parquet page checksums), array
shapes and value ranges of every component, and one document count everywhere. Loads no model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import LdrError
from .manifest import file_digest, inside, read_manifest


def _step(problems: list[str], what: str, fn: Callable[[], list[str] | None]) -> None:
    try:
        problems.extend(fn() or [])
    except LdrError as e:
        problems.append(str(e))
    except Exception as e:  # a damaged file raises whatever its reader raises
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
    """Every segment: docstore pages, deletes, dense vectors, sparse postings, native BM25 postings."""
    from .docstore import Docstore
    from .segment import read_deletes

    out = []
    comps = manifest["components"]
    for e in manifest["segments"]:
        seg = inside(root, e["path"], "segment path")
        name = e["name"]

        def docstore():
            store = Docstore(seg, e["docs"])
            for g in range(len(store._starts) - 1):   # reads every page: page checksums are verified
                store._column(g, "text")
                store._column(g, "meta")
            read_deletes(root, e)
        _step(out, f"{name} docstore", docstore)
        if "dense" in comps:
            _step(out, f"{name} dense", lambda: [f"{name}: {p}" for p in _dense(seg, comps["dense"], e)])
        if "sparse" in comps:
            _step(out, f"{name} sparse", lambda: [f"{name}: {p}" for p in _sparse(seg, comps["sparse"], e)])
        if comps.get("bm25", {}).get("backend") == "native":
            _step(out, f"{name} bm25", lambda: [f"{name}: {p}" for p in _native(seg, e)])
        progress(name)
    return out


def _dense(seg: Path, comp: dict, e: dict) -> list[str]:
    from .dense import DenseSearcher

    if "dense" not in e:
        return ["has no dense vectors"]
    sub = {**comp, **e["dense"], "faiss": {**comp["faiss"], **e["dense"].get("faiss", {})}}
    s = DenseSearcher(inside(seg, e["dense"]["path"]), sub, None, e["docs"])
    out = []
    if s.index.ntotal and sub["faiss"]["index"] == "flat":
        for start in range(0, s.index.ntotal, 65536):
            v = s.index.reconstruct_n(start, min(65536, s.index.ntotal - start))
            if not np.isfinite(v).all():
                out.append(f"dense vectors {start}+ hold non-finite values")
                break
            norms = np.linalg.norm(v, axis=1)
            if np.abs(norms - 1).max() > 1e-3:
                out.append(f"dense vectors {start}+ are not unit length (max deviation {np.abs(norms - 1).max():.3g})")
                break
    missing = e["docs"] - len(np.unique(s.owner))
    if missing:
        out.append(f"{missing} documents have no dense vector")
    return out


def _sparse(seg: Path, comp: dict, e: dict) -> list[str]:
    from .sparse import FILES, structure_problems

    if "sparse" not in e:
        return ["has no sparse postings"]
    p = inside(seg, e["sparse"]["path"])
    arrays = {f: np.load(p / f"{f}.npy", mmap_mode="r", allow_pickle=False) for f in FILES}
    out = structure_problems(arrays, e["docs"], full=True)
    if not out and comp.get("vocab_size") and len(arrays["term_indptr"]) - 1 != comp["vocab_size"]:
        out.append("the sparse vocabulary size differs from the manifest's")
    return out


def _native(seg: Path, e: dict) -> list[str]:
    from .bm25.native_backend import NativeSegment

    s = NativeSegment(inside(seg, e["bm25"]["path"]))
    out = []
    if len(s.lengths) != e["docs"]:
        out.append(f"native BM25 covers {len(s.lengths)} documents, the segment {e['docs']}")
    if len(s.docs) and (s.docs.min() < 0 or s.docs.max() >= e["docs"]):
        out.append("native BM25 postings name document numbers out of range")
    if len(s.tfs) and s.tfs.min() < 1:
        out.append("native BM25 postings hold term frequencies below 1")
    return out


def _bm25(root: Path, comp: dict, manifest: dict) -> list[str]:
    """tantivy / Lucene: one index for the generation, mapping one-to-one onto its live uids."""
    from .bm25.analysis import Analyzer
    from .bm25.base import open_searcher
    from .snapshot import Segments

    segs = Segments(root, manifest)
    p = inside(root, comp["path"])
    key = comp.get("key", "uid")
    s = open_searcher(comp["backend"], p, Analyzer.from_dict(comp["analyzer"]), comp["k1"], comp["b"], len(segs), key=key)
    out = []
    if comp["backend"] == "tantivy":
        import tantivy
        res = s._searcher.search(tantivy.Query.all_query(), limit=max(len(segs), 1), count=True)
        uids = s._searcher.fast_field_values(key, [addr for _, addr in res.hits]) if res.hits else []
        if sorted(uids) != sorted(segs.uids[segs.live].tolist()):
            out.append("the tantivy index does not map one-to-one onto the live documents")
    return out


def check_index(path: str | Path, progress: Callable[[str], None] = lambda _: None) -> tuple[dict | None, list[str]]:
    """(manifest or None, problems) for the newest generation. No problems: the index is sound."""
    root = Path(path)
    try:
        manifest = read_manifest(root)
    except LdrError as e:
        return None, [str(e)]
    problems: list[str] = []
    _step(problems, "files", lambda: _files(root, manifest, progress))
    _step(problems, "segments", lambda: _segments(root, manifest, progress))
    comps = manifest["components"]
    if "bm25" in comps and comps["bm25"]["backend"] != "native":
        _step(problems, "bm25", lambda: _bm25(root, comps["bm25"], manifest))
        progress("bm25")
    return manifest, problems
