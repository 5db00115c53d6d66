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
    """Wraps the documents of an `ldr add FOLDER` and remembers the ids and files read."""

    def __init__(self, docs):
        self.docs, self.ids, self.paths = docs, set(), set()

    def __iter__(self):
        for doc in self.docs:
            self.ids.add(doc.id)
            if doc.path is not None:
                self.paths.add(doc.path)
            yield doc


def gone(root: Path, segments: list[dict], deleted: list[np.ndarray], folder: str, seen: Seen) -> list[str]:
    """Ids of the index's documents read from `folder` (its absolute path) that this add did not
    read again: their file is no longer in the folder, or the file was read and no longer holds
    them (a record removed from a JSONL file). A file still there but not read (now unreadable,
    too large, hidden) keeps its documents: only what is known gone is listed."""
    out = []
    base = Path(folder)
    for seg, dead in zip(segments, deleted):
        store = Docstore(inside(root, seg["path"], "segment"), seg["docs"])
        paths, roots = store.origins()
        for row, (path, where) in enumerate(zip(paths, roots)):
            if where != folder or path is None or dead[row] or not _relative(path):
                continue
            doc_id = store.ids[row]
            if doc_id not in seen.ids and (path in seen.paths or not (base / path).is_file()):
                out.append(doc_id)
    return sorted(out)


def _relative(path: str) -> bool:
    """A path as ldr writes them (relative, no ".."): any other is not looked up on disk."""
    from pathlib import PurePosixPath

    p = PurePosixPath(path)
    return not p.is_absolute() and ".." not in p.parts
