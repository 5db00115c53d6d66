"""The learned-sparse kind: term weights from a SPLADE-style masked-LM per segment, as CSR
(document → terms) and CSC (term → postings) .npy arrays. A term weight needs no corpus
statistics, so segments score independently."""
from __future__ import annotations


import numpy as np

from .. import npy
from .query_side import Encoded
from .topk import top_k_dense
from .states import MergeState, ReadState, SegmentPart, WriteState, part_entry
from .base import EncodedPart, ModelComponent, backend_label, model_lines
from .sparse_store import FILES, SparseIndex, SparseWriter, gather_rows, save_inverted, structure_problems


class MultiSparseIndex:
    """Learned-sparse scores over every segment (a term weight needs no corpus statistics)."""

    def __init__(self, parts: list, segments):
        self.parts, self.segments = parts, segments

    def score(self, q_terms, q_weights) -> np.ndarray:
        out = np.zeros(self.segments.rows, dtype=np.float32)
        for part, offset, e in zip(self.parts, self.segments.offsets, self.segments.entries):
            if part is not None:
                out[offset:offset + e["docs"]] = part.score(q_terms, q_weights)
        out[self.segments.deleted] = 0
        return out

    def top_k(self, q_terms, q_weights, k: int, allow=None) -> list[tuple[int, float]]:
        scores = self.score(q_terms, q_weights)
        if allow is not None:
            scores[~allow] = 0
        return top_k_dense(scores, k)

    def doc_score(self, docno: int, q_terms, q_weights) -> float:
        s, r = self.segments.locate(docno)
        return self.parts[s].doc_score(r, q_terms, q_weights) if self.parts[s] is not None else 0.0

    def doc_vector(self, docno: int):
        s, r = self.segments.locate(docno)
        return self.parts[s].doc_vector(r)

    def vocabulary(self) -> np.ndarray:
        """Each term id: whether a live document holds it, as bits (np.packbits). Live ones only:
        the float32 projection's last bits depend on which columns it runs over, so two indexes of
        the same documents (sharded or not, merged or not) must weigh a query over the same terms."""
        has = [p.held_terms(self.segments.live[o:o + e["docs"]])
               for p, o, e in zip(self.parts, self.segments.offsets, self.segments.entries) if p is not None]
        held = np.zeros(max((len(h) for h in has), default=0), dtype=bool)
        for h in has:
            held[:len(h)] |= h
        return np.packbits(held)


class MultiSparse:
    def __init__(self, index: MultiSparseIndex):
        self.index = index

    def search_rep(self, rep, k: int, allow=None) -> list[tuple[int, float]]:
        return self.index.top_k(rep[0], rep[1], k, allow)

    def vocabulary(self) -> np.ndarray:
        """The terms the generation's documents hold, as bits (its describe() sends them: the
        coordinator encodes a query over them alone)."""
        if getattr(self, "_vocabulary", None) is None:
            self._vocabulary = self.index.vocabulary()
        return self._vocabulary

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        """The passage rescorer's sparse feature: Σ w_q·w_d over each document's full vector."""
        qt, qw = rep
        return np.array([self.index.doc_score(d, qt, qw) for d in docnos], dtype=np.float64)


class Sparse(ModelComponent):
    name = "sparse"
    # a shard describes the terms its documents hold; the query side weighs a query over them alone
    narrows_queries = True
    encoder_module, settings_class, loader = "ldr.encode.sparse", "SparseSettings", "load_sparse"
    passage_features = True
    default_weight = 0.25      # SPLADE-tiny beside BM25 1 (qmsum-train, bench/sweeps/fusion_sweep.py)
    config_field = "sparse"
    manifest_keys = {"model": dict, "vocab_size": int}

    def configure(self, config):
        if config.sparse is None:
            return None
        return {}, config.sparse

    def from_legacy(self, comp: dict, seg: dict) -> None:
        seg["sparse"] = {"path": comp.pop("path"), "postings": comp.pop("postings", 0)}
        comp.setdefault("vocab_size", 0)

    # -- writing ----------------------------------------------------------------------------
    def part_writer(self, state: WriteState):
        return EncodedPart(SparseWriter(state.folder, state.encoder, pipeline=state.pipeline,
                                        vocab_size=state.comp.get("vocab_size")),
                           ("path", "postings"), ("vocab_size", "model"))

    def merge_parts(self, state: MergeState):
        terms, weights, counts = [], [], []
        for part, rows in zip(state.sources, state.row_maps):
            p = part.folder
            a = {f: npy.load(p / f"{f}.npy", mmap_mode="r") for f in FILES}
            kept = np.flatnonzero(rows >= 0)
            t, w, c = gather_rows(np.asarray(a["doc_indptr"]), np.asarray(a["doc_terms"]),
                                  np.asarray(a["doc_weights"]), kept)
            terms.append(t), weights.append(w), counts.append(c)
        out = state.folder
        out.mkdir()
        terms = np.concatenate(terms).astype(np.int32)
        weights = np.concatenate(weights).astype(np.float32)
        counts = np.concatenate(counts)
        indptr = save_inverted(out, terms, weights, counts.tolist(), state.comp["vocab_size"], "weights")
        np.save(out / "doc_indptr.npy", indptr)
        np.save(out / "doc_terms.npy", terms)
        np.save(out / "doc_weights.npy", weights)
        return part_entry(state.kind, postings=int(len(terms)))

    # -- reading ----------------------------------------------------------------------------
    def open(self, state: ReadState):
        parts = [SparseIndex(p.folder, p.docs) if p else None for p in state.parts()]
        return MultiSparse(MultiSparseIndex(parts, state.segments))

    def query_side(self, comp: dict, encoder):
        return Encoded(self.name, encoder, "query_terms", narrows=True)

    # -- verification and description ---------------------------------------------------------
    def check_part(self, part: SegmentPart | None, comp: dict) -> list[str]:
        if part is None:
            return ["has no sparse postings"]
        arrays = {f: npy.load(part.folder / f"{f}.npy", mmap_mode="r") for f in FILES}
        out = structure_problems(arrays, part.docs, full=True)
        if not out and comp.get("vocab_size") and len(arrays["term_indptr"]) - 1 != comp["vocab_size"]:
            out.append("the sparse vocabulary size differs from the manifest's")
        return out

    def describe(self, comp: dict, segments: list[dict]) -> dict:
        return dict(comp, postings=sum(s.get("sparse", {}).get("postings", 0) for s in segments))

    def summary(self, comp: dict) -> list[str]:
        m = comp["model"]
        st = m.get("settings", {})
        return model_lines(comp, f"{m.get('name')} ({m.get('architecture')}, {st.get('kind')}), "
                           f"{comp.get('postings')} postings, backend={backend_label(m)}")
