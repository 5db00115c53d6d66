from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Doc:
    """One document as it enters the index."""

    id: str
    text: str
    title: str = ""
    meta: dict = field(default_factory=dict)   # the user's own fields, never touched by ldr
    # ldr's bookkeeping, kept apart from `meta` so a user's `source` or `path` field is never
    # overwritten: where the document was read ("c.jsonl line 3") and the file it came from
    source: str | None = None
    path: str | None = None
    # the folder (absolute) `path` is relative to, for documents read from a corpus folder: what
    # `ldr add FOLDER` compares to find the folder's documents whose file is gone
    root: str | None = None
    # "size:digest" of the file's bytes (one document a file): an `ldr add` of the folder skips the
    # file unparsed when the index holds its document with the same stamp
    stamp: str | None = None
