"""Segments: immutable folders `segments/seg-NNNNNN/` holding the documents written together.

A segment has its docstore rows (with each document's uid) and one part per component that
stores data per segment (ldr/components/: dense vectors, learned-sparse postings, native BM25
postings, ...). Deletions never touch it: each generation that deletes rows writes a new
`deletes-GGGGGG.npy` (one bool per row) that its manifest names. Merging copies the live rows'
vectors and postings into a new segment; nothing is re-encoded.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .. import npy
from ..corpus import Doc
from ..components.states import MergeState, WriteState, segment_part
from ..encode.pipeline import Pipeline
from .docstore import Docstore, DocstoreWriter

log = logging.getLogger(__name__)
SEGMENTS = "segments"


def segment_rel(number: int) -> str:
    return f"{SEGMENTS}/seg-{number:06d}"


class SegmentWriter:
    """Streams documents into a new segment: its docstore rows and every component's part.
    `components`: the index's manifest entries; `encoders`: {kind: zero-argument loader} for the
    kinds with a model (a loader is called only when a document reaches its part)."""

    def __init__(self, root: Path, number: int, components: dict, encoders: dict, allow_small: bool = True):
        from .. import components as registry

        self.rel = segment_rel(number)
        self.path = Path(root) / self.rel
        self.path.mkdir(parents=True)
        self.store = DocstoreWriter(self.path)
        # encoding overlaps reading, the docstore and BM25 (see ldr/encode/pipeline.py)
        self.pipeline = Pipeline() if encoders else None
        self.parts: dict = {}
        for name, kind in registry.kinds(components):
            part = kind.part_writer(WriteState(self.path, name, components[name], encoders.get(name), self.pipeline,
                                               allow_small, Path(root)))
            if part is not None:
                self.parts[name] = part
        self.uids: list[int] = []

    @property
    def count(self) -> int:
        return self.store.count

    @property
    def tokens(self) -> int:
        """Model input tokens prepared so far (the first encoder-backed part's)."""
        for w in self.parts.values():
            if getattr(w, "tokens", 0):
                return w.tokens
        return 0

    @property
    def encodes(self) -> bool:
        """Does a model encode this segment's documents (progress in tokens, else in documents)?"""
        return any(hasattr(w, "encoded") for w in self.parts.values())

    def progress(self) -> tuple[int, int]:
        """(tokens encoded, tokens read) over the encoder-backed parts, all models together."""
        parts = [w for w in self.parts.values() if hasattr(w, "encoded")]
        return sum(w.encoded for w in parts), sum(w.tokens for w in parts)

    def flush(self) -> None:
        """Every document added is tokenised and queued for its encoder (progress.all_read)."""
        for w in self.parts.values():
            if hasattr(w, "flush"):
                w.flush()

    def add(self, doc: Doc, uid: int) -> None:
        row = self.store.add(doc, uid)
        self.uids.append(uid)
        for w in self.parts.values():
            w.add(row, doc)

    def close(self) -> tuple[dict, dict]:
        """(segment entry for the manifest, what the parts report about the index-level components)."""
        self.store.close()
        entry = {"name": self.path.name, "path": self.rel, "docs": self.store.count, "live": self.store.count,
                 "deletes": None}
        about = {}
        for name, w in self.parts.items():
            part = w.close()
            if part.entry is not None:
                entry[name] = part.entry
            if part.about:
                about[name] = part.about
        if self.pipeline is not None:
            self.pipeline.close()
        return entry, about

    @property
    def profile(self) -> dict:
        """Seconds spent tokenising (feeding thread), encoding (worker) and waiting for the worker."""
        return {k: round(v, 3) for k, v in self.pipeline.seconds.items()} if self.pipeline else {}

    def abort(self) -> None:
        if self.pipeline is not None:
            try:
                self.pipeline.close(cancel=True)
            except Exception as e:  # cleanup: keep the original error
                log.debug("pipeline close failed: %s", e)
        for w in [self.store, *self.parts.values()]:
            try:
                w.abort()
            except Exception as e:  # cleanup: keep the original error
                log.debug("abort failed: %s", e)


def read_deletes(root: Path, entry: dict) -> np.ndarray:
    """The deleted-rows mask a generation gives a segment (all False when none)."""
    from ..paths import inside
    from ..errors import IndexFormatError

    if not entry.get("deletes"):
        return np.zeros(entry["docs"], dtype=bool)
    p = inside(root, entry["deletes"], "deletes file")
    mask = npy.load(p)
    if mask.dtype != bool or mask.shape != (entry["docs"],) or int((~mask).sum()) != entry["live"]:
        raise IndexFormatError(f"{p} does not match its segment ({entry['docs']} rows, {entry['live']} live); "
                               "run `ldr check` and rebuild the index")
    return mask


def write_deletes(root: Path, entry: dict, mask: np.ndarray, gen: int) -> dict:
    """A new deletes file for this generation; returns the updated entry (the old file stays)."""
    rel = f"{entry['path']}/deletes-{gen:06d}.npy"
    np.save(Path(root) / rel, mask.astype(bool))
    return dict(entry, deletes=rel, live=int((~mask).sum()))


def delete_rows(root: Path, segments: list[dict], masks: list[np.ndarray], found: dict, gen: int) -> list[dict]:
    """`segments` with the rows of `found` ({id: (segment, row, uid)}) deleted: a new deletes file
    for generation `gen` in every segment that loses documents."""
    segments = [dict(s) for s in segments]
    masks = [m.copy() for m in masks]
    for i, row, _ in found.values():
        masks[i][row] = True
    for i in sorted({i for i, _, _ in found.values()}):
        segments[i] = write_deletes(root, segments[i], masks[i], gen)
    return segments


def rows_of(root: Path, segments: list[dict], masks: list[np.ndarray], ids) -> dict[str, tuple[int, int, int]]:
    """{id: (segment index, row, uid)} for the live documents among `ids`."""
    from ..paths import inside

    wanted = set(ids)
    found = {}
    for i, (seg, deleted) in enumerate(zip(segments, masks)):
        store = Docstore(inside(root, seg["path"], "segment"), seg["docs"])
        for row, doc_id in enumerate(store.ids):
            if doc_id in wanted and not deleted[row]:
                found[doc_id] = (i, row, int(store.uids[row]))
    return found


def highest_uids(root: Path, segments: list[dict]) -> list[int]:
    """Each non-empty segment's highest uid."""
    from ..paths import inside

    return [int(u.max()) for s in segments if len(u := Docstore(inside(root, s["path"], "segment"), s["docs"]).uids)]


def merge(root: Path, sources: list[tuple], number: int, components: dict, uids_from: int | None = None,
          maps: dict | None = None) -> dict:
    """Copy the live rows of `sources` into segment `number`: [(segment entry, deleted mask)] of this
    index, or [(index root, segment entry, deleted mask)] of others (resharding).

    Every component copies its part as it is (a document's scores do not change); rows keep
    their uid, so the index stores (tantivy, Lucene) need no change; `uids_from`: number them
    anew from it instead (the uids of different indexes collide); `maps` {kind: a map of its rows}
    (IndexWriter.merge's `rewrite`)."""
    from .. import components as registry
    from ..paths import inside

    sources = [(Path(root), *s) if len(s) == 2 else s for s in sources]
    rel = segment_rel(number)
    out = Path(root) / rel
    out.mkdir(parents=True)
    store = DocstoreWriter(out)
    row_maps = []          # per source: old row → new row (-1: dropped)
    for src_root, entry, deleted in sources:
        src = Docstore(inside(src_root, entry["path"], "segment"), entry["docs"])
        new_rows = np.full(entry["docs"], -1, dtype=np.int64)
        for row, uid, doc in src.iter_docs():
            if not deleted[row]:
                new_rows[row] = store.add(doc, uid if uids_from is None else uids_from + store.count)
        row_maps.append(new_rows)
    store.close()
    seg = {"name": out.name, "path": rel, "docs": store.count, "live": store.count, "deletes": None}
    for name, kind in registry.kinds(components):
        parts = [segment_part(src_root, entry, name) for src_root, entry, _ in sources]
        part = kind.merge_parts(MergeState(Path(root), name, components[name], parts, row_maps, out,
                                           (maps or {}).get(name)))
        if part is not None:
            seg[name] = part
    return seg
