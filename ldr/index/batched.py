"""Shared by the encoder-backed components: documents are buffered and encoded in batches."""
from __future__ import annotations

from ..corpus import Doc


def doc_text(doc: Doc) -> str:
    """What the encoders see of a document: title and body."""
    return f"{doc.title}\n{doc.text}" if doc.title else doc.text


class BatchedWriter:
    def __init__(self, docs_per_batch: int = 32, chars_per_batch: int = 4 << 20):
        self._pending: list[tuple[int, str, int]] = []
        self._per_batch, self._chars, self._max_chars = docs_per_batch, 0, chars_per_batch

    def add(self, docno: int, doc: Doc) -> None:
        # the body starts after "title\n": spans into the encoded text shift by that much
        self._pending.append((docno, doc_text(doc), len(doc.title) + 1 if doc.title else 0))
        self._chars += len(doc.text)
        # a batch is bounded in characters too: 32 long documents would hold GBs of tokens
        if len(self._pending) >= self._per_batch or self._chars >= self._max_chars:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._write_batch([d for d, _, _ in self._pending], [t for _, t, _ in self._pending],
                              [b for _, _, b in self._pending])
            self._pending, self._chars = [], 0

    def _write_batch(self, docnos: list[int], texts: list[str], body_starts: list[int]) -> None:
        raise NotImplementedError
