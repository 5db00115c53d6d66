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

import math
import re
from collections import Counter
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
    stage: str           # which stage ranks this window highest: "dense" or "bm25"
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


class PassageFinder:
    """Scores windows of given documents for one query. `dense`: the generation's MultiDense when
    its vectors are passages (MaxP), else None; `analyzer`: the index's BM25 Analyzer settings;
    `weights`: fusion weights."""

    def __init__(self, analyzer, weights: dict | None = None, dense=None, k1: float = 1.2, b: float = 0.75):
        from ..index.bm25.analysis import cjk_pretokenize
        from ..index.bm25.tantivy_backend import _analyzer

        self._an = _analyzer(analyzer)
        self._pre = cjk_pretokenize if analyzer.is_cjk else (lambda t: t)
        self.dense = dense
        w = weights or {}
        self.w_dense = float(w.get("dense", 1.0)) if dense is not None else 0.0
        self.w_terms = float(w.get("bm25", 1.0))
        if self.w_dense == 0 and self.w_terms == 0:   # a sparse-only weighting: words still locate passages
            self.w_terms = 1.0
        self.k1, self.b = k1, b

    def terms(self, text: str) -> list[str]:
        return self._an.analyze(self._pre(text))

    def query_terms(self, query: str) -> set[str]:
        from ..index.bm25.base import first_terms
        return set(first_terms(self.terms(query)))

    def find(self, query: str, qvec, docs: dict[int, str], n: int) -> dict[int, list[Passage]]:
        """{docno: its n best passages, best first} for the documents {docno: text}."""
        if n < 1 or not docs:
            return {d: [] for d in docs}
        qterms = self.query_terms(query)
        windows: list[tuple[int, int, int]] = []       # (docno, start, end)
        dense_scores: list[float] = []
        have_dense = []
        for d, text in docs.items():
            spans, sims = None, None
            if self.dense is not None and qvec is not None:
                sims, spans = self.dense.passage_scores(qvec, d)
                if spans is not None and (len(spans) == 0 or (spans < 0).any() or spans[:, 1].max() > len(text)):
                    spans = None   # a segment from before spans were kept, or not MaxP passages
            if spans is not None:
                for (a, e), s in zip(spans.tolist(), sims.tolist()):
                    windows.append((d, a, e))
                    dense_scores.append(s)
                    have_dense.append(True)
            else:
                for a, e in word_windows(text):
                    windows.append((d, a, e))
                    dense_scores.append(0.0)
                    have_dense.append(False)
        term_scores = self._bm25([docs[d][a:e] for d, a, e in windows], qterms)
        dense_arr = np.asarray(dense_scores, dtype=np.float64)
        has = np.asarray(have_dense, dtype=bool)
        dn = _minmax(dense_arr, has)
        tn = _minmax(term_scores, np.ones(len(windows), bool))
        total = self.w_dense * dn + self.w_terms * tn
        out: dict[int, list[Passage]] = {d: [] for d in docs}
        order = sorted(range(len(windows)), key=lambda i: (-total[i], windows[i][1]))
        for i in order:
            d, a, e = windows[i]
            chosen = out[d]
            if len(chosen) >= n or any(a < p.end and p.start < e for p in chosen):
                continue   # overlapping word windows: the better one stands for both
            scores = {"bm25": float(term_scores[i])}
            if has[i]:
                scores["dense"] = float(dense_arr[i])
            stage = "dense" if has[i] and self.w_dense * dn[i] >= self.w_terms * tn[i] else "bm25"
            a, e = _tidy(docs[d], a, e)
            chosen.append(Passage(a, e, docs[d][a:e], float(total[i]), stage, scores))
        return out

    def _bm25(self, texts: list[str], qterms: set[str]) -> np.ndarray:
        """BM25 of each window among these windows (Lucene's idf and length normalisation)."""
        if not texts or not qterms:
            return np.zeros(len(texts))
        tfs, lengths = [], np.zeros(len(texts))
        for i, t in enumerate(texts):
            toks = self.terms(t)
            lengths[i] = len(toks)
            tfs.append(Counter(x for x in toks if x in qterms))
        df = Counter(t for c in tfs for t in c)
        n, avg = len(texts), max(lengths.mean(), 1.0)
        idf = {t: math.log1p((n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        norm = self.k1 * (1 - self.b + self.b * lengths / avg)
        return np.array([sum(idf[t] * tf / (tf + norm[i]) for t, tf in c.items()) for i, c in enumerate(tfs)])

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


def _tidy(text: str, a: int, e: int) -> tuple[int, int]:
    """Drop the whitespace and stray punctuation a token boundary leaves at a window's edges
    (".\n\n## 8." becomes "## 8."), so a passage reads from a word."""
    while a < e and (text[a].isspace() or (text[a] in ".,;:)]}!?" and a + 1 < e and text[a + 1].isspace())):
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
