"""`ldr add folder/` as a sync: a document whose id is in the index with the same text, title and
metadata is dropped before it is encoded, and counted as unchanged (issue 45 item 9). Where it was
read from (`source`, `path`) is not content: a file moved under the same id is still unchanged."""
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
