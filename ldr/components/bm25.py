"""The BM25 kind. tantivy and Lucene keep an index store of their own (their own segments,
deletes and merges, documents keyed by uid); the native backend writes postings per segment and
scores with the statistics of the live documents of the whole index."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import npy
from ..paths import inside
from .states import MergeState, ReadState, SegmentPart, WriteState, part_entry
from .base import Component, Part
from .analysis import Analyzer
from .bm25_store.base import open_searcher, open_writer, resolve_params


class UidRetriever:
    """tantivy / Lucene hits come as (uid, score): map them to this generation's live docnos."""

    def __init__(self, inner, segments):
        self.inner, self.segments = inner, segments
        self.name = inner.name
        self.num_docs = inner.num_docs

    def encode(self, query: str):
        return self.inner.encode(query)

    def search_rep(self, rep, k: int, allow: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top k live documents; with `allow` (a mask over docnos) only allowed ones: the backend
        is asked for more until k pass or it has no more."""
        visible = self.segments.live if allow is None else allow
        depth = k
        while True:
            hits = self.inner.search_rep(rep, depth)
            if not hits:
                return []
            docnos = self.segments.docnos_of_uids([u for u, _ in hits])
            # the backend's own deletes match the generation's; the live check is belt and braces
            out = [(int(d), s) for d, (_, s) in zip(docnos, hits) if d >= 0 and visible[d]]
            if len(out) >= k or len(hits) < depth or depth >= self.num_docs:
                return out[:k]
            depth = min(depth * 4, max(self.num_docs, 1))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search_rep(self.encode(query), k)

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        """The passage rescorer's BM25 feature: the first stage's score (0 where it did not return one)."""
        return np.array([first_stage.get(d, 0.0) for d in docnos], dtype=np.float64)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class BM25(Component):
    name = "bm25"
    store_dir = "bm25-generations"
    manifest_keys = {"backend": str, "k1": (int, float), "b": (int, float), "analyzer": dict}

    def configure(self, config):
        if not config.bm25:
            return None
        k1, b = resolve_params(config.bm25, config.k1, config.b)
        return {"backend": config.bm25, "k1": k1, "b": b, "analyzer": config.analyzer().to_dict()}, None

    def from_legacy(self, comp: dict, seg: dict) -> None:
        if comp["backend"] == "native":
            seg["bm25"] = {"path": comp.pop("path")}
        else:
            comp["key"] = "docno"       # format 2 tantivy indexes key documents by row

    def collection_stats(self, comp: dict) -> bool:
        return comp["backend"] == "native"      # tantivy and Lucene score with their own index's

    # -- writing ----------------------------------------------------------------------------
    def uses_store(self, comp: dict) -> bool:
        return comp["backend"] != "native"

    def store_writer(self, work: Path, comp: dict, threads: int, append: bool):
        return open_writer(comp["backend"], work, Analyzer.from_dict(comp["analyzer"]), threads, append=append)

    def part_writer(self, state: WriteState):
        if state.comp["backend"] != "native":
            return None
        from .bm25_store.native_backend import NativeWriter

        return _NativePart(NativeWriter(state.folder, Analyzer.from_dict(state.comp["analyzer"])), state.kind)

    def merge_parts(self, state: MergeState):
        if state.comp["backend"] != "native":
            return None
        _merge_native(state.sources, state.row_maps, state.folder)
        return part_entry(state.kind)

    # -- reading ----------------------------------------------------------------------------
    def open(self, state: ReadState):
        comp, segments = state.comp, state.segments
        analyzer = Analyzer.from_dict(comp["analyzer"])
        if comp["backend"] == "native":
            from .bm25_store.native_backend import NativeSearcher

            parts = [(p.folder, off, segments.deleted[off:off + p.docs])
                     for p, off in zip(state.parts(), segments.offsets)]
            return NativeSearcher(parts, analyzer, comp["k1"], comp["b"])
        root = state.root
        where = inside(root, comp["path"], "components.bm25.path")
        inner = open_searcher(comp["backend"], where, analyzer, comp["k1"], comp["b"], len(segments),
                              key=comp.get("key", "uid"))
        return UidRetriever(inner, segments)

    def query_side(self, comp: dict, encoder):
        from .query_side import Terms
        return Terms(self.name, self.collection_stats(comp))

    def model_name(self, comp: dict) -> str | None:
        """tantivy and native score alike (and say their highest score: `bound`); Lucene's scorer
        differs and says none, so what was fitted on the others' scores does not apply to it."""
        return None if comp.get("backend", "tantivy") in ("tantivy", "native") else str(comp["backend"])

    def passage_analyzer(self, comp: dict) -> dict | None:
        return comp["analyzer"]

    # -- verification -----------------------------------------------------------------------
    def check_part(self, part: SegmentPart | None, comp: dict) -> list[str]:
        if comp["backend"] != "native":
            return []
        if part is None:
            return ["has no native BM25 postings"]
        from .bm25_store.native_backend import NativeSegment

        s = NativeSegment(part.folder)
        out = []
        if len(s.lengths) != part.docs:
            out.append(f"native BM25 covers {len(s.lengths)} documents, the segment {part.docs}")
        if len(s.docs) and (s.docs.min() < 0 or s.docs.max() >= part.docs):
            out.append("native BM25 postings name document numbers out of range")
        if len(s.tfs) and s.tfs.min() < 1:
            out.append("native BM25 postings hold term frequencies below 1")
        return out

    def check_store(self, root: Path, comp: dict, manifest: dict, segs) -> list[str]:
        """tantivy / Lucene: one index for the generation, mapping one-to-one onto its live uids."""
        if comp["backend"] == "native":
            return []
        key = comp.get("key", "uid")
        s = open_searcher(comp["backend"], inside(root, comp["path"]), Analyzer.from_dict(comp["analyzer"]),
                          comp["k1"], comp["b"], len(segs), key=key)
        out = []
        if comp["backend"] == "tantivy":
            import tantivy
            res = s._searcher.search(tantivy.Query.all_query(), limit=max(len(segs), 1), count=True)
            uids = s._searcher.fast_field_values(key, [addr for _, addr in res.hits]) if res.hits else []
            if sorted(uids) != sorted(segs.uids[segs.live].tolist()):
                out.append("the tantivy index does not map one-to-one onto the live documents")
        return out

    def summary(self, comp: dict) -> list[str]:
        desc = ", ".join(f"{k}={v}" for k, v in comp.items() if k != "path")
        return [desc or comp.get("path", "")]


class _NativePart:
    def __init__(self, writer, kind: str):
        self.writer, self.kind = writer, kind

    def add(self, row, doc):
        self.writer.add(row, doc)

    def close(self) -> Part:
        self.writer.close()
        return Part(part_entry(self.kind))

    def abort(self):
        self.writer.abort()


def _merge_native(sources: list, row_maps, out: Path) -> None:
    """Native BM25 postings: each segment has its own vocabulary, mapped onto a merged one."""
    import scipy.sparse as sp

    from .bm25_store.vocabulary import Vocabulary, write_vocabulary
    from .sparse_store import gather_rows, save_inverted

    vocab: dict[str, int] = {}
    terms, tfs, counts, lengths = [], [], [], []
    for part, rows in zip(sources, row_maps):
        p = part.folder
        seg_vocab = Vocabulary(p)
        remap = np.empty(len(seg_vocab), dtype=np.int32)
        for term, t in seg_vocab.items():
            remap[t] = vocab.setdefault(term, len(vocab))
        ip = npy.load(p / "term_indptr.npy")
        docs = npy.load(p / "term_docs.npy")
        tf = npy.load(p / "term_tfs.npy")
        seg_lengths = npy.load(p / "doc_lengths.npy")
        csr = sp.csc_matrix((tf, docs, ip), shape=(part.docs, max(len(seg_vocab), 1))).tocsr()
        csr.sort_indices()
        kept = np.flatnonzero(rows >= 0)
        t, v, c = gather_rows(csr.indptr, csr.indices, csr.data, kept)
        terms.append(remap[t]), tfs.append(v), counts.append(c), lengths.append(seg_lengths[kept])
    out.mkdir()
    save_inverted(out, np.concatenate(terms).astype(np.int32), np.concatenate(tfs).astype(np.int32),
                  np.concatenate(counts).tolist(), len(vocab), "tfs")
    np.save(out / "doc_lengths.npy", np.concatenate(lengths).astype(np.float32))
    write_vocabulary(out, list(vocab))
