"""The late-interaction kind: every document's token vectors (ColBERT), scored by exact MaxSim.

Encoding: ldr/encode/colbert.py (whole documents in windows of the model's length, token
pooling). Storage: ldr/components/colbert_store.py (int8 + a scale per vector, memory-mapped).
A MaxSim score needs no corpus statistics, so segments score independently and an index built
by any sequence of add / replace / delete / merge scores exactly as a fresh build.

As a leg of the fusion it scores every live document (brute force; see colbert_store for when
that stops being cheap); `exact_scores` gives the passage rescorer its MaxSim feature, and
`passage_scores` each window's own MaxSim, so a hit can show the windows that matched.
"""
from __future__ import annotations


import numpy as np

from .query_side import Encoded
from .topk import top_k_dense
from .states import MergeState, ReadState, SegmentPart, WriteState
from .base import EncodedPart, ModelComponent, model_lines
from .colbert_store import ColbertPart, ColbertWriter, check_part


class MultiColbert:
    """MaxSim over every segment; deleted (and filtered-out) documents never score."""

    def __init__(self, parts: list, segments):
        self.parts, self.segments = parts, segments

    def scores(self, q: np.ndarray) -> np.ndarray:
        out = np.zeros(self.segments.rows, dtype=np.float32)
        for part, offset, e in zip(self.parts, self.segments.offsets, self.segments.entries):
            if part is not None and e["docs"]:
                out[offset:offset + e["docs"]] = part.maxsim_all(q)
        return out

    def search_rep(self, q: np.ndarray, k: int, allow=None) -> list[tuple[int, float]]:
        scores = self.scores(q)
        mask = self.segments.live if allow is None else allow
        scores[~mask] = -np.inf
        hits = top_k_dense(scores, k)
        return [(d, s) for d, s in hits if np.isfinite(s)]

    def passage_scores(self, q: np.ndarray, docnos: list[int]) -> list[tuple]:
        """(MaxSim of each of the document's windows alone, their character spans or None) of each
        of `docnos`."""
        out = []
        for d in docnos:
            s, r = self.segments.locate(d)
            out.append(self.parts[s].passage_scores(q, r) if self.parts[s] is not None else (np.zeros(0), None))
        return out

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        """MaxSim of the listed documents only (a rescoring stage reads just their vectors)."""
        out = np.zeros(len(docnos), dtype=np.float64)
        by_seg: dict[int, list[int]] = {}
        for j, d in enumerate(docnos):
            by_seg.setdefault(self.segments.locate(d)[0], []).append(j)
        for s, js in by_seg.items():
            if self.parts[s] is not None:
                out[js] = self.parts[s].maxsim(rep, [docnos[j] - self.segments.offsets[s] for j in js])
        return out


class Colbert(ModelComponent):
    name = "colbert"
    encoder_module, settings_class, loader = "ldr.encode.colbert", "ColbertSettings", "load_colbert"
    passage_features = True
    default_weight = 0.5      # its fusion weight beside BM25 1, dense and sparse 0.25 (qmsum-train: bench/README.md)
    manifest_keys = {"model": dict, "dim": int}

    def configure(self, config):
        wanted = (getattr(config, "components", None) or {}).get(self.name)
        if wanted is None:
            return None
        if isinstance(wanted, str):
            from ..encode.colbert import ColbertSettings
            wanted = ColbertSettings(model=wanted)
        return {}, wanted

    # -- writing ----------------------------------------------------------------------------
    def part_writer(self, state: WriteState):
        return EncodedPart(ColbertWriter(state.folder, state.encoder, state.comp.get("dim"), pipeline=state.pipeline),
                           ("path", "vectors", "windows"), ("dim", "model"))

    def merge_parts(self, state: MergeState):
        dim = state.comp["dim"]
        writer = ColbertWriter(state.folder, None, dim)
        try:
            for source, rows in zip(state.sources, state.row_maps):
                part = ColbertPart(source.folder, source.docs, dim)
                for r in np.flatnonzero(rows >= 0):        # live rows, in order (the new rows are in order too)
                    a, b = int(part.indptr[r]), int(part.indptr[r + 1])
                    writer.write_rows(part.codes[a:b], part.scales[a:b], [b - a], [part.doc_windows(r)])
            info = writer.close()
        except BaseException:
            writer.abort()
            raise
        return {"path": info["path"], "vectors": info["vectors"], "windows": info["windows"]}

    # -- reading ----------------------------------------------------------------------------
    def open(self, state: ReadState):
        parts = [ColbertPart(p.folder, p.docs, state.comp["dim"]) if p else None for p in state.parts()]
        return MultiColbert(parts, state.segments)

    def query_side(self, comp: dict, encoder):
        return Encoded(self.name, encoder, "encode_query", batched=False)

    def passage_vectors(self, comp: dict) -> bool:
        return True     # each window's MaxSim, with its characters (segments that kept them)

    # -- verification and description ---------------------------------------------------------
    def check_part(self, part: SegmentPart | None, comp: dict) -> list[str]:
        if part is None:
            return ["has no colbert vectors"]
        return check_part(part.folder, part.docs, comp["dim"], part.entry["vectors"],
                          part.entry.get("windows"))    # segments from before windows were kept have none

    def describe(self, comp: dict, segments: list[dict]) -> dict:
        return dict(comp, vectors=sum(s.get("colbert", {}).get("vectors", 0) for s in segments))

    def summary(self, comp: dict) -> list[str]:
        m = comp["model"]
        st = m.get("settings", {})
        return model_lines(comp, f"{m.get('name')} (late interaction, window {m.get('window')}), "
                           f"{comp.get('vectors', '?')} token vectors x {comp['dim']} (int8), "
                           f"pool factor {st.get('pool_factor')}, backend={m.get('backend', {}).get('name')}")
