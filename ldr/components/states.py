"""What a kind's writer, reader, merger and checker are handed (Lucene's SegmentWriteState,
SegmentReadState and MergeState): typed values instead of the manifest's dicts, and the one place
a part's place on disk is written: a kind's part of a segment is the folder `<segment>/<kind>`
(its entry's `path`, checked to stay inside the index, when reading)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..paths import inside


def part_folder(segment: Path, kind: str) -> Path:
    """Where a kind writes its part of a segment."""
    return Path(segment) / kind


def part_entry(kind: str, **about) -> dict:
    """A kind's part entry in the manifest (`segments[i][kind]`): its folder and what it records."""
    return {"path": kind, **about}


@dataclass(frozen=True)
class SegmentPart:
    """One segment's part of a kind, as a reader, a merge or a check sees it."""

    folder: Path              # the part's folder, inside the index
    docs: int                 # the segment's rows
    entry: dict               # the part's manifest entry (segments[i][kind])
    segment: dict = field(default_factory=dict, repr=False)   # the segment's own entry
    root: Path | None = None  # the index the segment belongs to (its index-level files: a codebook)


def segment_part(root: Path, seg: dict, kind: str, where: str = "segment") -> SegmentPart | None:
    """The part of `kind` in segment entry `seg` (None: the segment has none)."""
    entry = seg.get(kind)
    if not entry:
        return None
    return SegmentPart(inside(root, f"{seg['path']}/{entry['path']}", where), seg["docs"], entry, seg, Path(root))


@dataclass(frozen=True)
class WriteState:
    """A new segment being written: the kind's part goes in `folder`."""

    segment: Path                                # the segment's folder
    kind: str
    comp: dict                                   # the kind's index-level manifest entry
    encoder: Callable[[], Any] | None = None     # loads the kind's model on first use
    pipeline: Any = None                         # the build's encoding pipeline (ldr/encode/pipeline.py)
    allow_small: bool = True
    root: Path | None = None                     # the index (index-level files: a dense codebook)

    @property
    def folder(self) -> Path:
        return part_folder(self.segment, self.kind)


@dataclass(frozen=True)
class ReadState:
    """A pinned generation a kind opens its reader over: files only (the model that encodes the
    kind's queries belongs to its query side, components/query_side.py)."""

    root: Path
    kind: str
    comp: dict
    segments: Any                                # ldr/index/snapshot.Segments (offsets, deletions, docstore)

    def parts(self) -> list[SegmentPart | None]:
        """Each segment's part of the kind, in docno order (None where a segment has none)."""
        return [segment_part(self.root, e, self.kind) for e in self.segments.entries]


@dataclass(frozen=True)
class MergeState:
    """Segments being merged into a new one: `sources[i]` the kind's part of source segment i (None:
    it has none), `row_maps[i][old row]` the row in the new segment (-1: dropped)."""

    root: Path
    kind: str
    comp: dict
    sources: list[SegmentPart | None]
    row_maps: list[np.ndarray]
    out: Path                                    # the new segment's folder
    rows_map: Callable | None = None             # (vectors, owner) -> the vectors the new segment holds

    @property
    def folder(self) -> Path:
        return part_folder(self.out, self.kind)
