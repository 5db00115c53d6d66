"""`ldr add folder/` as a sync: a document whose id is in the index with the same text, title and
metadata is dropped before it is encoded, and counted as unchanged (issue 45 item 9). Where it was
read from (`source`, `path`) is not content: a file moved under the same id is still unchanged.
The folder's documents that are gone from it are found too (`gone`; `ldr add --prune` deletes them)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..corpus import Doc
from ..paths import inside
from .docstore import Docstore


class Unchanged:
    """`unchanged(doc)`: is `doc` (checked and cleaned as the index stores it) in the index as it is?"""

    def __init__(self, root: Path, segments: list[dict], deleted: list[np.ndarray]):
        self.root, self.segments, self.deleted = root, segments, deleted
        self._stores: list[Docstore] | None = None

    def __call__(self, doc: Doc) -> bool:
        if self._stores is None:   # opened on the first document: an empty index reads nothing
            self._stores = [Docstore(inside(self.root, s["path"], "segment"), s["docs"]) for s in self.segments]
        for store, deleted in zip(self._stores, self.deleted):
            if doc.id in store and not deleted[row := store.row(doc.id)]:
                old = store.doc(row)     # one row group read; far cheaper than encoding the document
                return (old.text, old.title) == (doc.text, doc.title) and typed(old.meta) == typed(doc.meta)
        return False


def typed(meta) -> str:
    """Metadata as a value whose equality sees types: Python's `1 == True` and `2 == 2.0`, but a
    filter `urgent=true` or a value shown as 2.0 tells them apart (JSON writes them apart)."""
    import json

    return json.dumps(meta, sort_keys=True, default=repr)


class Seen:
    """Wraps the documents of an `ldr add FOLDER` and remembers the ids and files read; `report`
    (the add's IngestReport) names the files part of which was skipped (`report.partial`)."""

    def __init__(self, docs, report=None):
        self.docs, self.ids, self.paths = docs, set(), set()
        self.report = report

    @property
    def partial(self) -> set:
        return getattr(self.report, "partial", set())

    def __iter__(self):
        for doc in self.docs:
            self.ids.add(doc.id)
            if doc.path is not None:
                self.paths.add(doc.path)
            yield doc


def origins(root: Path, segments: list[dict], deleted: list[np.ndarray]) -> list[tuple]:
    """(id, folder, path, stamp) of each live document read from a folder's file (as ldr wrote the
    path; stamp: the file's "size:digest" then, or None)."""
    out = []
    for seg, dead in zip(segments, deleted):
        store = Docstore(inside(root, seg["path"], "segment"), seg["docs"])
        paths, roots, stamps = store.origins()
        for row, (path, where, stamp) in enumerate(zip(paths, roots, stamps)):
            if where is not None and path is not None and not dead[row] and _relative(path):
                out.append((store.ids[row], where, path, stamp))
    return out


def known_files(rows: list[tuple], folder: str):
    """`known(rel, stamp)`: does the index hold the document of `folder`'s file `rel` (its id) as
    read when the file had `stamp` (its bytes' size and digest)? Such a file is unchanged: `ldr add`
    does not parse it again (a 118-page PDF took 9 s to parse only to be found unchanged)."""
    stamps = {path: stamp for doc_id, where, path, stamp in rows if where == folder and stamp and doc_id == path}
    return lambda rel, stamp: stamps.get(rel) == stamp


def gone(rows: list[tuple], folder: str, seen: Seen) -> list[str]:
    """Ids of the documents (`origins`) read from `folder` (its absolute path) that this add did
    not read again: their file is no longer in the folder, or the file was read whole and no
    longer holds them (a record removed from a JSONL file). A file still there but not read whole
    (a record that failed to parse or is over --max-doc-mb, an unreadable file) keeps its
    documents: a skip is not a removal.

    A folder the index read before that this add read most of the documents of again is the same
    corpus moved (`ldr add COPY` of a changed copy): its documents whose file COPY lacks are
    gone too, though the unchanged ones still name the first folder."""
    base = Path(folder)
    live, again = {}, {}
    for doc_id, where, *_ in rows:
        live[where] = live.get(where, 0) + 1
        again[where] = again.get(where, 0) + (doc_id in seen.ids)
    moved = {w for w in live if w != folder and 2 * again[w] > live[w]}
    out = []
    for doc_id, where, path, *_ in rows:
        if where != folder and where not in moved:
            continue
        if doc_id in seen.ids or path in seen.partial:
            continue
        if path in seen.paths or not (base / path).is_file():
            out.append(doc_id)
    return sorted(out)

def _relative(path: str) -> bool:
    """A path as ldr writes them (relative, no ".."): any other is not looked up on disk."""
    from pathlib import PurePosixPath

    p = PurePosixPath(path)
    return not p.is_absolute() and ".." not in p.parts
