"""What both dense engines share (and a pre-exported ONNX folder's encoder): windows, prefixes,
pieces, token-budget batches and document pooling. Subclasses set the model facts and implement
_forward (a batch of pieces → normalised rows)."""
from __future__ import annotations

import contextlib

import numpy as np

from ..errors import ConfigError
from . import chunking
from .batching import SerialEncoder, batch_budget, budget_batches, special_tokens, token_ids, with_specials
from .chunking import EXTENSION_STRATEGIES

class _DenseCore(SerialEncoder):
    """What both engines share: windows, prefixes, pieces, batching and document pooling.
    Subclasses set the model facts and implement _forward (a batch of pieces → normalised rows)."""

    def _setup(self, st_max: int | None, prompts: dict, dim: int) -> None:
        s = self.settings
        st_max = st_max or self.trained
        self.window = min(s.max_length or st_max, self.trained) if self.kind == "ape" else (s.max_length or st_max)
        if s.max_length and self.kind == "ape" and s.max_length > self.trained:
            raise ConfigError(f"--max-length {s.max_length} exceeds the model's {self.trained} positions; "
                              f"use an extension strategy (gp, rp, pi) with --target-length instead")
        self.query_prefix = s.query_prefix if s.query_prefix is not None else prompts.get("query", "")
        self.doc_prefix = s.doc_prefix if s.doc_prefix is not None else (
            prompts.get("document") or prompts.get("passage") or "")
        self.target = s.target_length or 4 * self.trained
        self._head, self._tail = special_tokens(self.tokenizer)
        self.specials = len(self._head) + len(self._tail)
        self.dim = s.dim or dim
        if s.context is None:   # an index built before the setting existed had none
            from .models import card_context, resolve
            s.context = 0.0 if getattr(s, "from_index", False) else card_context(resolve(s.model)[0])

    def _inference(self):
        return contextlib.nullcontext()

    def _forward(self, batch) -> np.ndarray:
        raise NotImplementedError

    def _batches(self, lengths: list[int]):
        """The row indices of each forward pass (bf16 engines plan fixed shapes instead)."""
        return budget_batches(lengths, batch_budget(self.settings.batch_tokens, self.device))

    # -- tokenisation ------------------------------------------------------------------------
    def _pieces(self, texts, prefix, strategy, spans: bool = False):
        """All model inputs (with special tokens and prefix), the document each belongs to and,
        with `spans`, the characters of its document each covers ((m, 2), -1 when unknown)."""
        enc = token_ids(self.tokenizer, list(texts), spans=spans)
        pre = self.tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
        room = self.window - self.specials - len(pre)
        target = (self.target - self.specials - len(pre)) if strategy in EXTENSION_STRATEGIES else None
        if room < 1:
            raise ConfigError(f"window {self.window} leaves no room for text after the prefix and special tokens")
        pieces, owner, where = [], [], []
        for d, item in enumerate(enc):
            doc_ids, offsets = item if spans else (item, None)
            for a, b in chunking.split_ranges(strategy, len(doc_ids), room, self._stride(room), target):
                pieces.append(with_specials(self._head + pre, doc_ids[a:b], self._tail))
                owner.append(d)
                if spans:
                    where.append(chunking.char_span(offsets, a, b) if offsets is not None else (-1, -1))
        owner = np.asarray(owner, dtype=np.int64)
        if spans:
            return pieces, owner, np.asarray(where, dtype=np.int64).reshape(-1, 2)
        return pieces, owner

    def _stride(self, room: int) -> int:
        st = self.settings.stride
        return min(st, room) if st else room

    def _encode_pieces(self, pieces: list[list[int]], progress=None) -> np.ndarray:
        out = np.zeros((len(pieces), self.dim), dtype=np.float32)
        with self._inference():
            for rows in self._batches([len(p) for p in pieces]):
                out[rows] = self._forward([pieces[r] for r in rows])
                if progress is not None:
                    progress(sum(len(pieces[r]) for r in rows))
        return out

    # -- public protocol ---------------------------------------------------------------------
    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        """(n, d) float32, L2-normalised. Queries are short: always the plain model, truncated."""
        # a query never needs more characters than its window of tokens could hold
        pieces, _ = self._pieces([t[:self.window * 64] for t in texts], self.query_prefix, "truncate")
        return self._encode_pieces(pieces)

    def _encode_documents(self, texts: list[str], progress=None, spans: bool = False):
        """(vectors (m, d), owner (m,)): one vector per document, or per passage for maxp; with
        `spans`, also the (m, 2) character span of each vector in its document (hits show them)."""
        return self._finish_documents(self._prepare_documents(texts, spans=spans), progress)

    def _prepare_documents(self, texts: list[str], spans: bool = False):
        pieces, owner, *where = self._pieces(texts, self.doc_prefix, self.settings.strategy, spans=spans)
        return len(texts), pieces, owner, (where[0] if spans else None), spans

    def _finish_documents(self, job, progress=None):
        n_texts, pieces, owner, where, spans = job
        vecs = self._encode_pieces(pieces, progress)
        if self.settings.strategy == "pcw":
            vecs = doc_means(vecs, owner, n_texts).astype(np.float32)
            if spans and len(where):   # the averaged vector covers its whole document
                first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
                where = np.stack([np.minimum.reduceat(where[:, 0], first), np.maximum.reduceat(where[:, 1], first)], 1)
            owner = np.arange(n_texts, dtype=np.int64)
        elif self.settings.context and len(vecs):
            vecs = with_context(vecs, owner, n_texts, self.settings.context)
        return (vecs, owner, where) if spans else (vecs, owner)


def with_context(vecs: np.ndarray, owner: np.ndarray, n_docs: int, weight: float) -> np.ndarray:
    """Each passage vector plus `weight` x its document's mean direction, renormalised. Why: a
    query that summarises a whole document (a judgment's catchphrases, a meeting's summary) is
    near no single passage; in whitened space the mean direction is what the document is about
    and MaxP then prefers a passage of the document that is about it (bench/README.md, "adapted
    models": qmsum-train and legal lifted; raw MiniLM vectors lose on qmsum-train)."""
    mixed = vecs + weight * doc_means(vecs, owner, n_docs)[owner]
    return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)


def doc_means(vecs: np.ndarray, owner: np.ndarray, n_docs: int) -> np.ndarray:
    """(n_docs, d) float64: each document's passage vectors summed, normalised (pcw's vector, and
    the direction the document context mixes in)."""
    sums = np.zeros((n_docs, vecs.shape[1]), dtype=np.float64)
    np.add.at(sums, owner, vecs)
    return sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)
