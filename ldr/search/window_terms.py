"""The analysed terms of documents' windows, kept across searches (the window stage's and the
passages' BM25 over the candidates' windows reads them), and the word windows of a text whose
vector kinds kept no spans."""
from __future__ import annotations

import re
from collections import OrderedDict
from itertools import chain
from typing import NamedTuple

import numpy as np

from .window_counts import Postings

WORDS, STRIDE = 160, 80
VOCAB_FLOOR, VOCAB_SLACK = 100_000, 4     # WindowTerms.retain: when the vocabulary starts afresh
_WORD = re.compile(r"\S+")


def word_windows(text: str, size: int = WORDS, stride: int = STRIDE) -> list[tuple[int, int]]:
    """Windows of `size` words every `stride` words (the last one ends at the text's end)."""
    starts, ends = [], []
    for m in _WORD.finditer(text):
        starts.append(m.start())
        ends.append(m.end())
    n = len(starts)
    if n == 0:
        return []
    if n <= size:
        return [(starts[0], ends[-1])]
    out = [(starts[i], ends[i + size - 1]) for i in range(0, n - size + 1, stride)]
    if (n - size) % stride:
        out.append((starts[n - size], ends[-1]))
    return out


class WindowTerms:
    """The analysed terms of each window of documents, kept by a key that never changes for the
    same text (the document's uid): a document's windows are analysed once, and each later query
    only counts its terms (numpy), instead of analysing megabytes of text per search. Bounded by
    `max_tokens` (int32 term ids, least recently used dropped first); thread-safe."""

    def __init__(self, analyzer, max_tokens: int = 16_000_000, max_terms: int = 1_000_000,
                 max_words: int = 200_000):
        """`analyzer`: the index's BM25 Analyzer settings (built once here, used by every search).
        `max_tokens` bounds the analysed windows kept (int32 term ids: 4 bytes each), `max_terms`
        the vocabulary and the text lengths: past it they start afresh (documents come and go on
        a living index, and their terms would otherwise stay for ever); `max_words` the words
        whose terms are remembered (~200 bytes each)."""
        import threading

        from ..components.analysis import cjk_pretokenize
        from ..components.analysis import text_analyzer

        self._an = text_analyzer(analyzer)
        self.pretokenizes = analyzer.is_cjk
        self._pre = cjk_pretokenize if analyzer.is_cjk else (lambda t: t)
        # swapped for new objects, never cleared in place: a search holding the old ones finishes
        # consistently (each entry keeps the vocabulary its term ids index)
        self.vocab: dict[str, int] = {}
        # a whitespace-separated word → its term ids: the analyzers split at whitespace (tantivy's
        # simple and whitespace tokenizers) and filter token by token, so a window's terms are its
        # words' terms in order, and a word seen before is not analysed again (a 120-word text:
        # 55 µs through the analyzer, 28 µs by its words; bench/README.md)
        self._words: dict[str, tuple] = {}
        self._docs: OrderedDict = OrderedDict()
        self.lengths: dict = {}    # uid → its text's length: a cached document's text is never read again
        self._tokens, self.max_tokens, self.max_terms, self.max_words = 0, max_tokens, max_terms, max_words
        self._lock = threading.Lock()

    def retain(self, alive) -> None:
        """Keep only the documents `alive(uids)` (a bool per uid) says the index still holds; start
        the vocabulary afresh when it is mostly the terms of documents gone (VOCAB_SLACK x the
        kept windows' tokens and past VOCAB_FLOOR): on a living index the cache follows the live
        documents, not every document it ever held (add/search/delete churn grew it by ~430 MB)."""
        with self._lock:
            keys = list(self._docs)
            uids = np.fromiter((k[0] for k in keys), dtype=np.int64, count=len(keys))
            ok = alive(uids) if len(keys) else np.zeros(0, bool)
            docs = OrderedDict((k, self._docs[k]) for k, keep in zip(keys, ok.tolist()) if keep)
            lengths = list(self.lengths)
            keep_len = alive(np.asarray(lengths, dtype=np.int64)) if lengths else np.zeros(0, bool)
            self.lengths = {u: self.lengths[u] for u, keep in zip(lengths, keep_len.tolist()) if keep}
            self._docs, self._tokens = docs, sum(e.size() for e in docs.values())
            if len(self.vocab) > max(VOCAB_FLOOR, VOCAB_SLACK * self._tokens):
                self.vocab, self._words, self._docs, self._tokens = {}, {}, OrderedDict(), 0

    def terms(self, text: str) -> list[str]:
        return self._an.analyze(self._pre(text))

    def words(self, text: str) -> list[str]:
        """The pieces of `text` the analyzer's tokenizer sees apart (no token spans whitespace)."""
        return self._pre(text).split()

    def word_ids(self, words: list[str]) -> tuple[list[tuple], dict]:
        """(each word's term ids, the vocabulary they index): `words` as `words()` gives them."""
        with self._lock:
            self._bound()
            return self._ids(words), self.vocab

    def _bound(self) -> None:
        """Past its bounds the vocabulary starts afresh with everything indexing it; the words alone
        start afresh past theirs (their term ids stay valid). Under the lock."""
        if len(self.vocab) > self.max_terms or len(self.lengths) > self.max_terms:
            self.vocab, self._words, self._docs, self.lengths, self._tokens = {}, {}, OrderedDict(), {}, 0
        elif len(self._words) > self.max_words:
            self._words = {}

    def _ids(self, words: list[str]) -> list[tuple]:
        """Each word's term ids in self.vocab, a word analysed the first time it is seen. Under the lock."""
        vocab, known = self.vocab, self._words
        got = list(map(known.get, words))       # the words seen before, in C
        if None in got:
            for j, ids in enumerate(got):
                if ids is None:
                    got[j] = known[words[j]] = tuple(vocab.setdefault(t, len(vocab)) for t in self._an.analyze(words[j]))
        return got

    def get(self, key, text, spans) -> "Analysed":
        """A document's analysed windows: `spans` when given (the dense passages), else word
        windows. `text`: the text, or a function returning it (called only on a miss: reading a
        long text from the docstore costs more than scoring it)."""
        with self._lock:
            hit = self._docs.get(key) if key is not None else None
            if hit is not None:
                self._docs.move_to_end(key)
                return hit
        text = text() if callable(text) else text
        win = np.asarray(spans if spans is not None else word_windows(text), dtype=np.int64).reshape(-1, 2)
        words = [self.words(text[a:e]) for a, e in win.tolist()]
        whole = self.words(text)
        with self._lock:
            self._bound()
            vocab, flat, counts = self.vocab, [], []
            for ws in words:
                n0 = len(flat)
                flat.extend(chain.from_iterable(self._ids(ws)))
                counts.append(len(flat) - n0)
            ids = np.fromiter(flat, dtype=np.int32, count=len(flat))
            indptr = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            # the term stream, for windows of any size placed over it (the window stage's scales)
            stream = np.fromiter(chain.from_iterable(self._ids(whole)), dtype=np.int32)
            entry = Analysed(win, indptr, np.diff(indptr), vocab, len(stream), Postings.of_windows(ids, indptr),
                             Postings.of(stream))
            if key is not None:
                self._docs[key] = entry
                self._tokens += entry.size()
                while self._tokens > self.max_tokens and len(self._docs) > 1:
                    self._tokens -= self._docs.popitem(last=False)[1].size()
        return entry


class Analysed(NamedTuple):
    """A document's windows as analysed terms: their character spans (m, 2), where each window's
    terms start among the windows' term ids (m + 1) and how many each holds, the vocabulary the
    ids index, the length of the whole text's term stream, and the postings of the windows' term
    ids (by window, counted) and of the stream (window_counts.py: a query's terms are looked up, not
    read for)."""
    win: np.ndarray
    indptr: np.ndarray
    lengths: np.ndarray
    vocab: dict
    n_terms: int
    in_windows: Postings
    in_stream: Postings

    def size(self) -> int:
        """The tokens it holds (what the cache's `max_tokens` bounds): its windows' and its stream's."""
        return int(self.indptr[-1]) + len(self.in_stream.where)
