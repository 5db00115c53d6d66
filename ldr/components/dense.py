"""The dense kind: passage (or document) vectors per segment in FAISS with a vector → row map;
a document scores by its best passage (MaxP). The encoder is any sentence-transformers model
with ldr's long-document strategies (ldr/encode/dense.py)."""
from __future__ import annotations


import numpy as np

from .. import npy
from .topk import top_k
from .states import MergeState, ReadState, SegmentPart, WriteState
from .base import EncodedPart, ModelComponent, backend_label, model_lines
from . import compressed, exact_vectors
from .query_side import Encoded
from .faiss_store import (DenseSearcher, DenseWriter, FaissSettings, compressed_kind, concrete, graph_to_grow,
                          grow_graph, load_vectors, one_thread, save_dense, write_dense)


class MultiDense:
    """Dense retrieval over every segment's FAISS index; a document scores by its best passage."""

    def __init__(self, parts: list, segments):
        """`parts`: one DenseSearcher per segment (None where a segment has no vectors)."""
        self.parts, self.segments = parts, segments

    @property
    def dim(self):
        return next((p.index.d for p in self.parts if p is not None), None)

    def _segment_top(self, i: int, q: np.ndarray, k: int, allow=None) -> list[tuple[int, float]]:
        part, offset = self.parts[i], self.segments.offsets[i]
        n = part.index.ntotal if part is not None else 0
        if n == 0:
            return []
        live = (self.segments.live if allow is None else allow)[offset:offset + self.segments.entries[i]["docs"]]
        if not live.any():
            return []
        alive = int(live.sum())
        want = min(k, alive)
        got = part.every_best(q) if want >= alive else None     # every document: one pass over the rows
        if got is not None:
            docs, best = got
            keep = live[docs]
            return [(int(d) + offset, float(v)) for d, v in zip(docs[keep].tolist(), best[keep])]
        depth = min(n, max(k, 1) * (4 if part.multi or not live.all() else 1))
        while True:
            with one_thread():
                scores, rows = part.index.search(q[None].astype(np.float32), depth)
            valid = rows[0] >= 0
            docs, sc = part.owner[rows[0][valid]], scores[0][valid]
            keep = live[docs]
            docs, sc = docs[keep], sc[keep]
            # rows come best first, so a document's first row is its best passage
            uniq, first = np.unique(docs, return_index=True)
            if len(uniq) >= want or depth >= n:
                break
            depth = min(n, depth * 4)
        return [(int(d) + offset, float(sc[f])) for d, f in zip(uniq, first)]

    def search_vectors(self, qvecs: np.ndarray, k: int, allow=None) -> list[list[tuple[int, float]]]:
        out = []
        for q in qvecs:
            cand = [h for i in range(len(self.parts)) for h in self._segment_top(i, q, k, allow)]
            if not cand:
                out.append([])
                continue
            docs = np.array([d for d, _ in cand], dtype=np.int64)
            vals = np.array([s for _, s in cand], dtype=np.float64)
            out.append(top_k(docs, vals, k))
        return out

    def search_rep(self, qvec: np.ndarray, k: int, allow=None) -> list[tuple[int, float]]:
        return self.search_vectors(qvec[None], k, allow)[0]

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        """The passage rescorer's dense feature: each document's best-passage cosine, exact."""
        return self.best_passage(rep, docnos)

    def passage_scores(self, qvec: np.ndarray, docnos: list[int]) -> list[tuple]:
        """(cosine of each of the document's vectors to the query, their character spans or None) of
        each of `docnos`, a segment's documents scored in one call."""
        out: list = [(np.zeros(0), None)] * len(docnos)
        by_seg: dict[int, list[int]] = {}
        for j, d in enumerate(docnos):
            by_seg.setdefault(self.segments.locate(d)[0], []).append(j)
        for s, js in by_seg.items():
            if self.parts[s] is not None:
                got = self.parts[s].passage_scores(qvec, [docnos[j] - self.segments.offsets[s] for j in js])
                for j, g in zip(js, got):
                    out[j] = g
        return out

    def best_passage(self, qvec: np.ndarray, docnos: list[int]) -> np.ndarray:
        out = np.full(len(docnos), -1.0)
        by_seg: dict[int, list[int]] = {}
        for j, d in enumerate(docnos):
            by_seg.setdefault(self.segments.locate(d)[0], []).append(j)
        for s, js in by_seg.items():
            if self.parts[s] is None:
                continue
            local = [docnos[j] - self.segments.offsets[s] for j in js]
            out[js] = self.parts[s].best_passage(qvec, local)
        return out



def _spans(folder, n: int) -> np.ndarray:
    """A part's spans (segments written before spans were kept: -1, "unknown", for each vector)."""
    sp = folder / "spans.npy"
    return npy.load(sp) if sp.is_file() else np.full((n, 2), -1, np.int64)


class _Rows:
    """The merged segment's exact vectors, source after source (live rows only), read in chunks."""

    def __init__(self, pieces: list[tuple[np.ndarray, np.ndarray]], dim: int):
        self.pieces, self.shape = pieces, (sum(int(k.sum()) for _, k in pieces), dim)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, sl) -> np.ndarray:
        if not isinstance(sl, slice):         # sorted row numbers (a training sample)
            sl, out, pos = np.asarray(sl), [], 0
            for vecs, keep in self.pieces:
                rows = np.flatnonzero(keep)
                mine = sl[(sl >= pos) & (sl < pos + len(rows))] - pos
                if len(mine):
                    out.append(np.asarray(vecs[rows[mine]], dtype=np.float32))
                pos += len(rows)
            return np.concatenate(out) if out else np.zeros((0, self.shape[1]), np.float32)
        start, stop, _ = sl.indices(self.shape[0])
        out, pos = [], 0
        for vecs, keep in self.pieces:
            rows = np.flatnonzero(keep)
            a, b = max(start - pos, 0), min(stop - pos, len(rows))
            if a < b:
                out.append(np.asarray(vecs[rows[a:b]], dtype=np.float32))
            pos += len(rows)
        return np.concatenate(out) if out else np.zeros((0, self.shape[1]), np.float32)


def merge_compressed(state: MergeState, sources: list, fs: FaissSettings, dim: int) -> dict:
    """A compressed merged part with no training: the codebook of the biggest compressed source
    (or the index's) when it still fits the merged size; its sources' codes are copied with their
    rows renumbered, other sources' live vectors are encoded with it. The exact vectors are
    streamed into the new vectors.f32 (never all in memory)."""
    records = sorted((p.entry["codebook"] for p, _, _ in sources if p.entry.get("codebook")),
                     key=lambda r: -r.get("trained_for", 0)) + [state.comp.get("codebook")]
    pieces, owners, spans = [], [], []
    for part, rows, owner in sources:
        keep = rows[owner] >= 0
        pieces.append((load_vectors(part.folder, part.entry, dim), keep))
        owners.append(rows[owner][keep])
        spans.append(_spans(part.folder, len(owner))[keep])
    vectors = _Rows(pieces, dim)
    parts, record = [p for p, _, _ in sources], None
    for r in records:
        if r and r.get("codec") == fs.index and _bring_codebook(state.root, r, parts) and \
                not compressed.needs_new(r, vectors, state.root):
            record = r
            break
    out = state.folder
    out.mkdir()
    # sources that lost no row keep their vector files (hard links); the rest are copied
    exact = exact_vectors.merge_files(out, [(p.folder, exact_vectors.files_of(p.entry) if p.entry.get("codebook")
                                             else None, keep, vecs) for (p, _, _), (vecs, keep) in zip(sources, pieces)],
                                      lambda chosen: _Rows(chosen, dim))
    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    spans = np.concatenate(spans) if spans else np.zeros((0, 2), np.int64)
    codes = None
    if record is not None:
        codebook = compressed.load_codebook(state.root, record)
        lists, ids, cds, pos = [], [], [], 0
        for (part, rows, owner_s), (vecs, keep) in zip(sources, pieces):
            new_row = np.full(len(owner_s), -1, np.int64)   # source vector row → merged vector row
            new_row[keep] = pos + np.arange(int(keep.sum()))
            pos += int(keep.sum())
            if part.entry.get("codebook", {}).get("path") == record["path"]:
                ln, vid, cd = compressed.lists_of(_read_codes(part.folder))
                live = new_row[vid] >= 0
                lists.append(ln[live]), ids.append(new_row[vid[live]]), cds.append(cd[live])
            else:
                ln, cd = compressed.encode(codebook, _Rows([(vecs, keep)], dim)[0:int(keep.sum())])
                lists.append(ln), ids.append(new_row[keep]), cds.append(cd)
        codes = (np.concatenate(lists), np.concatenate(ids), np.concatenate(cds))
    return compressed.write_compressed(out, vectors, owner, fs, spans, state.root, record, codes=codes, exact=exact)


def _bring_codebook(root, record: dict | None, parts: list) -> dict | None:
    """`record` if this index holds its codebook file or can copy it from a source's index (a
    reshard merges other indexes' segments: their codes are then copied, not encoded again; the
    file's name is its hash, checked when it is loaded); else None (a codebook is trained)."""
    import shutil

    from ..paths import inside

    if not record:
        return None
    dst = inside(root, record["path"], "codebook")
    for p in parts:
        if dst.exists():
            break
        if p.root is not None and (p.entry.get("codebook") or {}).get("path") == record["path"]:
            src = inside(p.root, record["path"], "codebook")
            if src.is_file():
                dst.parent.mkdir(exist_ok=True)
                shutil.copyfile(src, dst)
    return record if dst.exists() else None


def _read_codes(folder):
    import faiss
    return faiss.read_index(str(folder / "ivf.index"), getattr(faiss, "IO_FLAG_MMAP_IFC", 0) | faiss.IO_FLAG_READ_ONLY)


def _part_settings(comp: dict, entry: dict) -> dict:
    """A segment's FAISS settings: the index's, with what the segment recorded over them."""
    sub = {**comp, **entry, "faiss": {**comp["faiss"], **entry.get("faiss", {})}}
    if not entry.get("codebook"):          # the index's codebook is not this (flat or HNSW) part's
        sub.pop("codebook", None)
    return sub


class Dense(ModelComponent):
    name = "dense"
    encoder_module, settings_class, loader = "ldr.encode.dense", "DenseSettings", "load_dense"
    passage_features = True
    default_weight = 0.25      # MiniLM MaxP beside BM25 1 (qmsum-train, bench/sweeps/fusion_sweep.py)
    config_field = "dense"

    def build_settings(self):
        from .faiss_store import FaissSettings
        return super().build_settings() + [("faiss", FaissSettings)]
    manifest_keys = {"faiss": dict, "model": dict, "dim": int}

    def configure(self, config):
        if config.dense is None:
            return None
        return {"faiss": config.faiss.to_dict()}, config.dense

    def from_legacy(self, comp: dict, seg: dict) -> None:
        seg["dense"] = {"path": comp.pop("path"), "vectors": comp.pop("vectors"),
                        "multi_vector": comp.pop("multi_vector", False), "faiss": comp["faiss"]}

    # -- writing ----------------------------------------------------------------------------
    def part_writer(self, state: WriteState):
        comp = state.comp
        return EncodedPart(DenseWriter(state.folder, state.encoder, FaissSettings(**comp["faiss"]),
                                      allow_small=state.allow_small, pipeline=state.pipeline, dim=comp.get("dim"),
                                      root=state.root, codebook=comp.get("codebook")),
                           ("path", "vectors", "multi_vector", "faiss", "codebook", "bytes"), ("dim", "model", "codebook"))

    def merge_parts(self, state: MergeState):
        """Copy the live vectors; when the first source's HNSW graph can be grown (faiss_store.
        graph_to_grow), only the other sources' vectors are inserted, instead of every vector;
        compressed parts are concatenated (merge_compressed)."""
        fs = FaissSettings(**state.comp["faiss"])
        dim = state.comp.get("dim", 0)
        sources = [(part, rows, npy.load(part.folder / "owner.npy"))
                   for part, rows in zip(state.sources, state.row_maps) if part is not None]
        n_total = sum(int((rows[owner] >= 0).sum()) for _, rows, owner in sources)
        mapped = state.rows_map is not None     # every vector changes: read them all, train new codes
        if compressed_kind(concrete(fs, n_total)) and n_total >= compressed.MIN_TRAIN and not mapped:
            return merge_compressed(state, sources, concrete(fs, n_total), dim)
        grow = bool(sources) and not mapped and graph_to_grow(sources[0][0], sources[0][1], fs, n_total)
        vecs, owners, spans = [], [], []
        for i, (part, rows, owner) in enumerate(sources):
            keep = rows[owner] >= 0
            if not (grow and i == 0):       # a grown graph keeps its own vectors
                vecs.append(np.asarray(load_vectors(part.folder, part.entry, dim))[keep])
            owners.append(rows[owner][keep])
            spans.append(_spans(part.folder, len(owner))[keep])
        out = state.folder
        out.mkdir()
        dim = vecs[0].shape[1] if vecs else dim
        vectors = np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32)
        owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
        spans = np.concatenate(spans) if spans else np.zeros((0, 2), np.int64)
        if mapped and len(vectors):
            vectors = state.rows_map(vectors, owner)
        if grow:
            return write_dense(out, grow_graph(sources[0][0].folder, vectors, fs), owner,
                               concrete(fs, n_total), spans)
        return save_dense(out, np.ascontiguousarray(vectors, dtype=np.float32), owner, fs, allow_small=True,
                          spans=spans, root=state.root, codebook=None if mapped else _bring_codebook(
                              state.root, state.comp.get("codebook"), [p for p, _, _ in sources]))

    # -- reading ----------------------------------------------------------------------------
    def open(self, state: ReadState):
        # index files first: cheap checks before a model loads
        parts = [DenseSearcher(p.folder, _part_settings(state.comp, p.entry), p.docs) if p else None
                 for p in state.parts()]
        return MultiDense(parts, state.segments)

    def query_side(self, comp: dict, encoder):
        return Encoded(self.name, encoder, "encode_queries", single_vector=True)

    def retyped(self, comp: dict, index_type: str) -> dict:
        """The kind's entry with another FAISS index type (checked); a codebook of another codec
        is not the index's any more (its file goes with the last segment that names it)."""
        fs = FaissSettings(**{**comp["faiss"], "index": index_type})
        return {**{k: v for k, v in comp.items() if k != "codebook" or (v or {}).get("codec") == index_type},
                "faiss": fs.to_dict()}

    def passage_vectors(self, comp: dict) -> bool:
        return comp.get("model", {}).get("settings", {}).get("strategy") == "maxp"

    # -- verification and description ---------------------------------------------------------
    def check_part(self, part: SegmentPart | None, comp: dict) -> list[str]:
        if part is None:
            return ["has no dense vectors"]
        sub = _part_settings(comp, part.entry)
        s = DenseSearcher(part.folder, sub, part.docs, full_check=True)
        out = []
        if part.entry.get("codebook"):          # codes against the exact vectors (which it checks too)
            try:
                codebook = compressed.load_codebook(part.root, part.entry["codebook"], cached=False)
            except Exception as e:
                return [str(e)]
            out += compressed.verify(part.folder, codebook, s.index.ntotal, s.index.d,
                                     exact_vectors.files_of(part.entry))
        if s.index.ntotal and sub["faiss"]["index"] in ("flat", "hnsw"):     # both hold exact vectors
            for start in range(0, s.index.ntotal, 65536):
                v = s.index.reconstruct_n(start, min(65536, s.index.ntotal - start))
                if not np.isfinite(v).all():
                    out.append(f"dense vectors {start}+ hold non-finite values")
                    break
                norms = np.linalg.norm(v, axis=1)
                if np.abs(norms - 1).max() > 1e-3:
                    out.append(f"dense vectors {start}+ are not unit length (max deviation {np.abs(norms - 1).max():.3g})")
                    break
        missing = part.docs - len(np.unique(s.owner))
        if missing:
            out.append(f"{missing} documents have no dense vector")
        return out

    def describe(self, comp: dict, segments: list[dict]) -> dict:
        # totals over the segments (deleted rows included until a merge); what a node holds per
        # vector in RAM and on disk (segments written before parts recorded it: unknown)
        parts = [s["dense"] for s in segments if s.get("dense")]
        n = sum(p.get("vectors", 0) for p in parts)
        out = dict(comp, vectors=n)
        if parts and all("bytes" in p for p in parts):
            ram = sum(p["bytes"]["ram_per_vector"] * p.get("vectors", 0) for p in parts)
            disk = sum(p["bytes"]["disk_per_vector"] * p.get("vectors", 0) for p in parts)
            out["bytes"] = {"ram_per_vector": round(ram / max(n, 1), 1), "disk_per_vector": round(disk / max(n, 1), 1),
                            "ram": int(ram), "disk": int(disk)}
        out["parts"] = sorted({(p.get("faiss") or {}).get("index", "?") for p in parts})
        out["by_segment"] = [{"segment": s.get("name"), "index": (s["dense"].get("faiss") or {}).get("index"),
                              "vectors": s["dense"].get("vectors", 0), **s["dense"].get("bytes", {})}
                             for s in segments if s.get("dense")]
        return out

    def summary(self, comp: dict) -> list[str]:
        m = comp["model"]
        st = m.get("settings", {})
        ext = m.get("extension") or {}
        return model_lines(comp, f"{m.get('name')} ({m.get('architecture')}, {m.get('positions')} positions, "
                           f"trained {m.get('trained_length')} tokens), strategy={st.get('strategy')}"
                           + (f" to {ext.get('target_length')}" if ext else "")
                           + (f", document context {st['context']:g}" if st.get("context") else "")
                           + f", {comp.get('vectors', '?')} vectors x {comp['dim']}, faiss={comp['faiss'].get('index')}"
                           + (f" (segments: {', '.join(comp['parts'])})" if comp.get("parts") else "")
                           + (f", {comp['bytes']['ram_per_vector']:g} B/vector in RAM, "
                              f"{comp['bytes']['disk_per_vector']:g} on disk" if comp.get("bytes") else "")
                           + f", backend={backend_label(m)}")
