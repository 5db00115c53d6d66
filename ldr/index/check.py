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


def _docstore(root: Path, manifest: dict) -> list[str]:
    from .docstore import Docstore

    store = Docstore(inside(root, manifest["components"]["docstore"]["path"]).parent, manifest["doc_count"])
    for g in range(len(store._starts) - 1):   # reads every page: page checksums are verified
        store._column(g, "text")
        store._column(g, "meta")
    return []


def _dense(root: Path, comp: dict, n_docs: int) -> list[str]:
    from .dense import DenseSearcher

    s = DenseSearcher(inside(root, comp["path"]), comp, None, n_docs)
    out = []
    if s.index.ntotal and comp["faiss"]["index"] == "flat":
        for start in range(0, s.index.ntotal, 65536):
            v = s.index.reconstruct_n(start, min(65536, s.index.ntotal - start))
            if not np.isfinite(v).all():
                out.append(f"dense vectors {start}+ hold non-finite values")
                break
            norms = np.linalg.norm(v, axis=1)
            if np.abs(norms - 1).max() > 1e-3:
                out.append(f"dense vectors {start}+ are not unit length (max deviation {np.abs(norms - 1).max():.3g})")
                break
    missing = n_docs - len(np.unique(s.owner))
    if missing:
        out.append(f"{missing} documents have no dense vector")
    return out


def _sparse(root: Path, comp: dict, n_docs: int) -> list[str]:
    from .sparse import FILES, structure_problems

    p = inside(root, comp["path"])
    arrays = {f: np.load(p / f"{f}.npy", mmap_mode="r", allow_pickle=False) for f in FILES}
    out = structure_problems(arrays, n_docs, full=True)
    if not out and len(arrays["term_indptr"]) - 1 != comp.get("vocab_size", len(arrays["term_indptr"]) - 1):
        out.append("the sparse vocabulary size differs from the manifest's")
    return out


def _bm25(root: Path, comp: dict, n_docs: int) -> list[str]:
    from .bm25.analysis import Analyzer
    from .bm25.base import open_searcher

    p = inside(root, comp["path"])
    s = open_searcher(comp["backend"], p, Analyzer.from_dict(comp["analyzer"]), comp["k1"], comp["b"], n_docs)
    out = []
    if comp["backend"] == "native":
        if len(s.docs) and (s.docs.min() < 0 or s.docs.max() >= n_docs):
            out.append("native BM25 postings name document numbers out of range")
        if len(s.tfs) and s.tfs.min() < 1:
            out.append("native BM25 postings hold term frequencies below 1")
    elif comp["backend"] == "tantivy":
        import tantivy
        res = s._searcher.search(tantivy.Query.all_query(), limit=max(n_docs, 1), count=True)
        docnos = s._searcher.fast_field_values("docno", [addr for _, addr in res.hits]) if res.hits else []
        if sorted(docnos) != list(range(n_docs)):
            out.append("the tantivy index does not map one-to-one onto the docstore's documents")
    return out


def check_index(path: str | Path, progress: Callable[[str], None] = lambda _: None) -> tuple[dict | None, list[str]]:
    """(manifest or None, problems). An empty list of problems means the index is sound."""
    root = Path(path)
    try:
        manifest = read_manifest(root)
    except LdrError as e:
        return None, [str(e)]
    problems: list[str] = []
    n = manifest["doc_count"]
    _step(problems, "files", lambda: _files(root, manifest, progress))
    _step(problems, "docstore", lambda: _docstore(root, manifest))
    comps = manifest["components"]
    for name, fn in (("dense", _dense), ("sparse", _sparse), ("bm25", _bm25)):
        if name in comps:
            _step(problems, name, lambda fn=fn, name=name: fn(root, comps[name], n))
            progress(name)
    return manifest, problems
