"""A hit's best passages: character windows of its document, scored by the dense passage vectors
(MaxP: the windows the encoder saw, their spans kept at index time) and by BM25 over the query's
terms inside each window. A RAG application puts these, not a 50-page document, into its prompt.

Windows are the dense passages when the index has them for the document; otherwise (other
strategies, dense-less indexes) windows of WORDS words every STRIDE words. Term scores are BM25
over the windows of the documents being looked at (idf and average length among those windows),
with the index's analyzer, so "running" in the query matches "run" in the text as BM25 does.
Per window the stages are min-max normalised over every window looked at and combined with the
index's fusion weights, so passage scores compare across hits.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

WORDS, STRIDE = 160, 80
_WORD = re.compile(r"\S+")
_MARKABLE = re.compile(r"\w+", re.UNICODE)


@dataclass
class Passage:
    start: int           # character offsets into the document text: text == doc[start:end]
    end: int
    text: str
    score: float
    stage: str           # which source ranks this window highest: the vector kind ("dense") or the lexical one
    scores: dict

    def to_dict(self) -> dict:
        return asdict(self)


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

    def __init__(self, analyzer, max_tokens: int = 16_000_000):
        """`analyzer`: the index's BM25 Analyzer settings (built once here, used by every search)."""
        import threading
        from collections import OrderedDict

        from ..components.bm25_store.analysis import cjk_pretokenize
        from ..components.bm25_store.tantivy_backend import _analyzer

        self._an = _analyzer(analyzer)
        self._pre = cjk_pretokenize if analyzer.is_cjk else (lambda t: t)
        self.vocab: dict[str, int] = {}
        self._docs: OrderedDict = OrderedDict()
        self._tokens, self.max_tokens = 0, max_tokens
        self._lock = threading.Lock()

    def terms(self, text: str) -> list[str]:
        return self._an.analyze(self._pre(text))

    def get(self, key, text: str, spans) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(spans (m, 2), indptr (m + 1), term ids) of a document's windows: `spans` when given
        (the dense passages), else word windows."""
        with self._lock:
            hit = self._docs.get(key) if key is not None else None
            if hit is not None:
                self._docs.move_to_end(key)
                return hit
        win = np.asarray(spans if spans is not None else word_windows(text), dtype=np.int64).reshape(-1, 2)
        per = [self.terms(text[a:e]) for a, e in win.tolist()]
        with self._lock:
            ids = np.fromiter((self.vocab.setdefault(t, len(self.vocab)) for toks in per for t in toks),
                              dtype=np.int32, count=sum(len(t) for t in per))
            indptr = np.zeros(len(per) + 1, dtype=np.int64)
            np.cumsum([len(t) for t in per], out=indptr[1:])
            entry = (win, indptr, ids)
            if key is not None:
                self._docs[key] = entry
                self._tokens += len(ids)
                while self._tokens > self.max_tokens and len(self._docs) > 1:
                    _, (_, _, old) = self._docs.popitem(last=False)
                    self._tokens -= len(old)
        return entry


class PassageFinder:
    """Scores windows of given documents for one query. `terms`: the index's WindowTerms (its
    analyzer and the analysed windows, shared by the searches of an index); `dense`: the
    generation's MultiDense when its vectors are passages (MaxP), else None; `weights`: fusion
    weights."""

    def __init__(self, terms: WindowTerms, weights: dict | None = None, dense=None, k1: float = 1.2,
                 b: float = 0.75, vector_kind: str = "dense", term_kind: str = "bm25"):
        """`vector_kind` / `term_kind`: the component names the two sources are weighted and
        labelled by (the retriever whose vectors are passages, the lexical one)."""
        self.cache = terms
        self.dense = dense
        self.vector_kind, self.term_kind = vector_kind, term_kind
        w = weights or {}
        self.w_dense = float(w.get(vector_kind, 1.0)) if dense is not None else 0.0
        self.w_terms = float(w.get(term_kind, 1.0))
        if self.w_dense == 0 and self.w_terms == 0:   # a sparse-only weighting: words still locate passages
            self.w_terms = 1.0
        self.k1, self.b = k1, b

    def terms(self, text: str) -> list[str]:
        return self.cache.terms(text)

    def query_terms(self, query: str) -> set[str]:
        from ..components.bm25_store.analysis import first_terms
        return set(first_terms(self.terms(query)))

    def find(self, query: str, qvec, docs: dict[int, str], n: int, keys: dict | None = None) -> dict[int, list[Passage]]:
        """{docno: its n best passages, best first} for the documents {docno: text}; `keys`
        {docno: uid} lets the window terms of a document be reused by later queries."""
        if n < 1 or not docs:
            return {d: [] for d in docs}
        qterms = self.query_terms(query)
        owners, spans_all, dense_all, has_all, parts = [], [], [], [], []
        for d, text in docs.items():
            spans, sims = None, None
            if self.dense is not None and qvec is not None:
                sims, spans = self.dense.passage_scores(qvec, d)
                if spans is not None and (len(spans) == 0 or (spans < 0).any() or spans[:, 1].max() > len(text)):
                    spans = None   # a segment from before spans were kept, or not MaxP passages
            key = (keys[d], spans is not None) if keys is not None else None
            win, indptr, ids = self.cache.get(key, text, spans)
            m = len(win)
            owners.append(np.full(m, d, dtype=np.int64))
            spans_all.append(win)
            dense_all.append(sims if spans is not None else np.zeros(m))
            has_all.append(np.full(m, spans is not None))
            parts.append((indptr, ids))
        if not sum(len(o) for o in owners):
            return {d: [] for d in docs}
        owner, win = np.concatenate(owners), np.concatenate(spans_all)
        dense_arr = np.concatenate(dense_all).astype(np.float64)
        has = np.concatenate(has_all)
        term_scores = self._bm25(parts, qterms)
        dn = _minmax(dense_arr, has)
        tn = _minmax(term_scores, np.ones(len(win), bool))
        total = self.w_dense * dn + self.w_terms * tn
        out: dict[int, list[Passage]] = {d: [] for d in docs}
        for i in np.lexsort((win[:, 0], -total)).tolist():
            d = int(owner[i])
            chosen = out[d]
            if len(chosen) >= n:
                continue
            a, e = _tidy(docs[d], *win[i].tolist())
            if any(a < p.end and p.start < e for p in chosen):
                continue   # overlapping windows: the better one stands for both
            scores = {self.term_kind: float(term_scores[i])}
            if has[i]:
                scores[self.vector_kind] = float(dense_arr[i])
            stage = self.vector_kind if has[i] and self.w_dense * dn[i] >= self.w_terms * tn[i] else self.term_kind
            chosen.append(Passage(a, e, docs[d][a:e], float(total[i]), stage, scores))
            if all(len(c) >= n for c in out.values()):
                break
        return out

    def _bm25(self, parts: list[tuple[np.ndarray, np.ndarray]], qterms: set[str]) -> np.ndarray:
        """BM25 of each window among these windows (Lucene's idf and length normalisation)."""
        lengths = np.concatenate([np.diff(ip) for ip, _ in parts]).astype(np.float64)
        qids = np.array(sorted(self.cache.vocab[t] for t in qterms if t in self.cache.vocab), dtype=np.int32)
        if not len(qids) or not len(lengths):
            return np.zeros(len(lengths))
        tf = np.zeros((len(lengths), len(qids)))
        row0 = 0
        for indptr, ids in parts:
            hit = np.flatnonzero(np.isin(ids, qids))
            if len(hit):
                rows = np.searchsorted(indptr, hit, side="right") - 1 + row0
                np.add.at(tf, (rows, np.searchsorted(qids, ids[hit])), 1)
            row0 += len(indptr) - 1
        n, avg = len(lengths), max(lengths.mean(), 1.0)
        df = (tf > 0).sum(axis=0)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1 - self.b + self.b * lengths / avg)
        return (idf * tf / (tf + norm[:, None])).sum(axis=1)

    def marks(self, text: str, qterms: set[str]) -> list[tuple[int, int]]:
        """Character ranges of the words in `text` that match a query term (for highlighting)."""
        out, seen = [], {}
        for m in _MARKABLE.finditer(text):
            w = m.group(0).lower()
            if w not in seen:
                seen[w] = bool(qterms.intersection(self.terms(w)))
            if seen[w]:
                out.append((m.start(), m.end()))
        return out


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s|\n\s*\n")
SNAP = 240   # characters a passage may grow by at each edge to end on whole sentences


def _tidy(text: str, a: int, e: int) -> tuple[int, int]:
    """A window cut at token boundaries, grown to whole sentences (at most SNAP characters at
    each edge) and trimmed of whitespace: a passage reads from the start of a sentence to the end
    of one, and a fact cut by a window boundary is whole in the passage."""
    if a > 0:
        lo = max(0, a - SNAP)
        ends = [m.end() for m in _SENTENCE_END.finditer(text, lo, a)]
        if ends:
            a = ends[-1]
        elif a - SNAP <= 0:
            a = 0
    if e < len(text):
        m = _SENTENCE_END.search(text, max(a, e - 2), min(len(text), e + SNAP))
        if m:
            e = m.start() + 1 if text[m.start()] in ".!?" else m.start()
            while e < len(text) and text[e] in "\"')]":
                e += 1
        elif e + SNAP >= len(text):
            e = len(text)
    while a < e and text[a].isspace():
        a += 1
    while e > a and text[e - 1].isspace():
        e -= 1
    return a, e


def _minmax(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x))
    if not valid.any():
        return out
    lo, hi = x[valid].min(), x[valid].max()
    out[valid] = (x[valid] - lo) / (hi - lo) if hi > lo else 1.0
    return out


def snippet(text: str, marks: list[tuple[int, int]], width: int = 160, style=None) -> str:
    """A one-line excerpt of `text` of about `width` characters around its first marked word,
    marked words passed through `style` (e.g. bold in a terminal)."""
    centre = marks[0][0] if marks else 0
    a = max(0, centre - width // 3)
    if a:
        sp = text.find(" ", a)
        a = sp + 1 if 0 <= sp < centre else a
    e = min(len(text), a + width)
    parts, pos = [], a
    for s, t in marks:
        if s < a or t > e:
            continue
        parts.append(text[pos:s])
        parts.append(style(text[s:t]) if style else text[s:t])
        pos = t
    parts.append(text[pos:e])
    body = " ".join("".join(parts).split())
    return ("…" if a > 0 else "") + body + ("…" if e < len(text) else "")


def finder_for(components: dict, weights: dict | None, retrievers: dict, cache: dict, lock) -> PassageFinder:
    """The passage finder of an index: term windows analysed as its lexical kind analyses text,
    and the passage vectors of a kind whose vectors are passages (dense MaxP), when searched.
    `cache` ({signature: WindowTerms}) keeps analysed windows across searches."""
    import json

    from .. import components as registry
    from ..components.bm25_store.analysis import Analyzer

    analyzer, term_kind, vector_kind = None, "bm25", None
    for name, kind in registry.kinds(components):
        found = kind.passage_analyzer(components[name])
        if found is not None and analyzer is None:
            analyzer, term_kind = found, name
        if vector_kind is None and name in retrievers and kind.passage_vectors(components[name]):
            vector_kind = name
    vectors = components[vector_kind].get("model", {}).get("settings") if vector_kind else None
    # a uid's text never changes, but a rebuild may change the analyzer or the passage vectors
    sig = json.dumps([analyzer, vectors], sort_keys=True, default=str)
    with lock:
        if sig not in cache:
            cache[sig] = WindowTerms(Analyzer.from_dict(analyzer) if analyzer else Analyzer())
        terms = cache[sig]
    return PassageFinder(terms, weights, retrievers.get(vector_kind) if vector_kind else None,
                         vector_kind=vector_kind or "dense", term_kind=term_kind)
