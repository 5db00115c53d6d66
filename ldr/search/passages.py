"""A hit's best passages: character windows of its document, scored by the vectors of the windows
the encoders saw (dense MaxP passages, colbert windows scored by their own MaxSim; their spans
kept at index time) and by BM25 over the query's terms inside each window. A RAG application
puts these, not a 50-page document, into its prompt.

Windows are the union of the vector kinds' windows when the index has them for the document;
otherwise (other strategies, vector-less indexes) word windows (window_terms.WORDS words every STRIDE).
Term scores are BM25 over the windows of the documents being looked at (idf and average length
among those windows), with the index's analyzer, so "running" in the query matches "run" in the
text as BM25 does.
Per window each source is min-max normalised over the windows it scored among those looked at and
combined with the index's fusion weights, so passage scores compare across hits.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

from .normalise import minmax
from .window_terms import WindowTerms

_MARKABLE = re.compile(r"\w+", re.UNICODE)


@dataclass
class Passage:
    start: int           # character offsets into the document text: text == doc[start:end]
    end: int
    text: str
    score: float
    stage: str           # which source ranks this window highest: the vector kind ("dense") or the lexical one
    scores: dict
    highlights: list = field(default_factory=list)   # [start, end] of each word matching a query term (document offsets)

    def to_dict(self) -> dict:
        return asdict(self)


class PassageFinder:
    """Scores windows of given documents for one query. `terms`: the index's WindowTerms (its
    analyzer and the analysed windows, shared by the searches of an index); `vectors`: {kind:
    retriever} of the searched kinds whose vectors are passages with characters (dense MaxP,
    colbert windows); `weights`: fusion weights."""

    def __init__(self, terms: WindowTerms, weights: dict | None = None, vectors: dict | None = None,
                 k1: float = 1.2, b: float = 0.75, term_kind: str = "bm25"):
        """`term_kind`: the lexical component the term scores are weighted and labelled by."""
        self.cache = terms
        self.term_kind = term_kind
        w = weights or {}
        # a kind weighted 0 in the fusion does not place passages either (nor is its query encoded)
        self.vectors = {k: r for k, r in (vectors or {}).items() if float(w.get(k, 1.0)) != 0}
        self.w_vec = {k: float(w.get(k, 1.0)) for k in self.vectors}   # w: the plan's (every kind) or none
        self.w_terms = float(w.get(term_kind, 1.0))
        if not self.w_vec and self.w_terms == 0:   # a sparse-only weighting: words still locate passages
            self.w_terms = 1.0
        self.k1, self.b = k1, b

    @property
    def vector_kinds(self) -> list[str]:
        return list(self.vectors)

    def terms(self, text: str) -> list[str]:
        return self.cache.terms(text)

    def query_terms(self, query: str) -> set[str]:
        from ..components.analysis import first_terms
        return set(first_terms(self.terms(query)))

    def _vector_windows(self, reps: dict, d: int, length: int):
        """The windows of document d (`length` characters) each vector kind scored ({kind: (sims,
        spans)}), leaving out a kind whose spans are unknown (a segment from before spans were kept)."""
        out = {}
        for kind, r in self.vectors.items():
            if reps.get(kind) is None:
                continue
            sims, spans = r.passage_scores(reps[kind], d)
            if spans is not None and len(spans) and not (spans < 0).any() and spans[:, 1].max() <= length:
                out[kind] = (np.asarray(sims, dtype=np.float64), np.asarray(spans, dtype=np.int64))
        return out

    def _windows(self, reps: dict, docnos, text_of, keys: dict | None):
        """Every window of the documents: (owner (m,), spans (m, 2), {kind: its score per window,
        nan where it has none}, [(indptr, term ids)] per document). `text_of(d)`: a document's
        text, read only when its windows are not cached yet."""
        kinds = list(self.vectors)
        owners, spans_all, parts = [], [], []
        vec_all: dict[str, list] = {k: [] for k in kinds}     # per kind, per window: its score or nan
        lengths = self.cache.lengths
        for d in docnos:
            uid = keys[d] if keys is not None else None
            text = None
            if uid is None or uid not in lengths:
                text = text_of(d)
                if uid is not None:
                    lengths[uid] = len(text)
            found = self._vector_windows(reps, d, len(text) if text is not None else lengths[uid])
            spans = np.concatenate([sp for _, sp in found.values()]) if found else None
            key = (uid, tuple(found)) if uid is not None else None
            win, indptr, ids, vocab = self.cache.get(key, text if text is not None else (lambda d=d: text_of(d)), spans)
            m = len(win)
            cols, at = {k: np.full(m, np.nan) for k in kinds}, 0
            for k, (sims, sp) in found.items():       # the windows are the kinds' spans, in this order
                cols[k][at:at + len(sp)] = sims
                at += len(sp)
            for k in kinds:
                vec_all[k].append(cols[k])
            owners.append(np.full(m, d, dtype=np.int64))
            spans_all.append(win)
            parts.append((indptr, ids, vocab))
        if not sum(len(o) for o in owners):
            return np.zeros(0, np.int64), np.zeros((0, 2), np.int64), {}, parts
        return (np.concatenate(owners), np.concatenate(spans_all),
                {k: np.concatenate(v) for k, v in vec_all.items()}, parts)

    def best_window(self, query: str, reps: dict, docnos: list[int], text_of, keys: dict | None = None
                    ) -> dict[int, dict[str, float]]:
        """{docno: {the lexical kind: the BM25 of its best window among these documents' windows,
        each vector kind: its best window's similarity (nan: none)}}: the window stage's evidence
        that one part of a long document answers the query. `text_of(d)`: a document's text (read
        only for documents whose windows are not cached)."""
        owner, _, vec, parts = self._windows(reps, docnos, text_of, keys)
        out = {d: {self.term_kind: 0.0, **{k: float("nan") for k in self.vectors}} for d in docnos}
        if len(owner):
            # per document among these (not per docno: an array as long as the index, filled per
            # kind, cost ~1.5 ms a query at a million documents)
            docs, at = np.unique(owner, return_inverse=True)
            for kind, scores in [(self.term_kind, self._bm25(parts, self.query_terms(query)))] + list(vec.items()):
                best = np.full(len(docs), -np.inf)
                np.fmax.at(best, at, scores)         # fmax: a window a kind did not score is skipped
                for d, v, ok in zip(docs.tolist(), best.tolist(), np.isfinite(best).tolist()):
                    if ok:
                        out[d][kind] = v
        return out

    def find(self, query: str, reps: dict, docs: dict[int, str], n: int, keys: dict | None = None) -> dict[int, list[Passage]]:
        """{docno: its n best passages, best first} for the documents {docno: text}; `reps`: the
        query's representation per vector kind; `keys` {docno: uid} lets the window terms of a
        document be reused by later queries."""
        if n < 1 or not docs:
            return {d: [] for d in docs}
        qterms = self.query_terms(query)
        kinds = list(self.vectors)
        owner, win, vec, parts = self._windows(reps, list(docs), docs.__getitem__, keys)
        if not len(owner):
            return {d: [] for d in docs}
        term_scores = self._bm25(parts, qterms)
        # each source min-max normalised over the windows it scored, then weighted
        contrib = {k: self.w_vec[k] * minmax(np.nan_to_num(v), ~np.isnan(v)) for k, v in vec.items()}
        contrib[self.term_kind] = self.w_terms * minmax(term_scores, np.ones(len(win), bool))
        total = sum(contrib.values())
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
            scores.update({k: float(v[i]) for k, v in vec.items() if not np.isnan(v[i])})
            # the source that adds the most to this window's score; vector kinds first on a tie
            stage = max([k for k in kinds if k in scores] + [self.term_kind], key=lambda k: contrib[k][i])
            marks = [[a + s, a + t] for s, t in self.marks(docs[d][a:e], qterms)]
            chosen.append(Passage(a, e, docs[d][a:e], float(total[i]), stage, scores, marks))
            if all(len(c) >= n for c in out.values()):
                break
        return out

    def _bm25(self, parts: list[tuple], qterms: set[str]) -> np.ndarray:
        """BM25 of each window among these windows (Lucene's idf and length normalisation). A
        query term is a column when some window's vocabulary knows it, columns in the order of the
        newest vocabulary's ids (the parts of one search share one vocabulary but for a reset)."""
        lengths = np.concatenate([np.diff(ip) for ip, _, _ in parts]).astype(np.float64)
        newest = self.cache.vocab
        known = {t for t in qterms if any(t in v for v in {id(v): v for _, _, v in parts}.values())}
        terms = sorted(known, key=lambda t: (newest.get(t, len(newest)), t))
        if not terms or not len(lengths):
            return np.zeros(len(lengths))
        tf = np.zeros((len(lengths), len(terms)))
        tables: dict = {}
        row0 = 0
        for indptr, ids, vocab in parts:
            table = tables.get(id(vocab))
            if table is None:      # this vocabulary's ids of the query terms → their columns
                pairs = sorted((vocab[t], j) for j, t in enumerate(terms) if t in vocab)
                qids = np.array([q for q, _ in pairs], dtype=np.int32)
                cols = np.array([j for _, j in pairs], dtype=np.int64)
                wanted = np.zeros(len(vocab) + 1, dtype=bool)   # a lookup table: one gather per term
                wanted[qids] = True
                table = tables[id(vocab)] = (qids, cols, wanted)
            qids, cols, wanted = table
            hit = np.flatnonzero(wanted[ids]) if len(qids) else ()
            if len(hit):
                rows = np.searchsorted(indptr, hit, side="right") - 1 + row0
                np.add.at(tf, (rows, cols[np.searchsorted(qids, ids[hit])]), 1)
            row0 += len(indptr) - 1
        n, avg = len(lengths), max(lengths.mean(), 1.0)
        df = (tf > 0).sum(axis=0)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1 - self.b + self.b * lengths / avg)
        return (idf * tf / (tf + norm[:, None])).sum(axis=1)

    def marks(self, text: str, qterms: set[str]) -> list[tuple[int, int]]:
        """Character ranges of the words in `text` that match a query term (for highlighting)."""
        found = list(_MARKABLE.finditer(text))
        words = [m.group(0).lower() for m in found]
        if not self.cache.pretokenizes:            # a word is one piece: its terms are the word's
            ids, vocab = self.cache.word_ids(words)
            wanted = {vocab[t] for t in qterms if t in vocab}
            return [(m.start(), m.end()) for m, got in zip(found, ids) if not wanted.isdisjoint(got)]
        pieces = [self.cache.words(w) for w in words]
        ids, vocab = self.cache.word_ids([p for ps in pieces for p in ps])
        wanted = {vocab[t] for t in qterms if t in vocab}
        out, at = [], 0
        for m, ps in zip(found, pieces):
            if any(not wanted.isdisjoint(ids[j]) for j in range(at, at + len(ps))):
                out.append((m.start(), m.end()))
            at += len(ps)
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


def term_kind(components: dict) -> str:
    """The lexical kind whose analyzer finds terms in windows (the window stage's BM25)."""
    from .. import components as registry

    return next((n for n, kind in registry.kinds(components) if kind.passage_analyzer(components[n]) is not None),
                "bm25")


def finder_for(components: dict, weights: dict | None, retrievers: dict, cache: dict, lock) -> PassageFinder:
    """The passage finder of an index: term windows analysed as its lexical kind analyses text,
    and the passage vectors of a kind whose vectors are passages (dense MaxP), when searched.
    `cache` ({signature: WindowTerms}) keeps analysed windows across searches."""
    import json

    from .. import components as registry
    from ..components.analysis import Analyzer

    analyzer, term_kind, vector_kinds = None, "bm25", []
    for name, kind in registry.kinds(components):
        found = kind.passage_analyzer(components[name])
        if found is not None and analyzer is None:
            analyzer, term_kind = found, name
        if name in retrievers and kind.passage_vectors(components[name]):
            vector_kinds.append(name)
    vectors = {k: components[k].get("model", {}).get("settings") for k in vector_kinds}
    # a uid's text never changes, but a rebuild may change the analyzer or the passage vectors
    sig = json.dumps([analyzer, vectors], sort_keys=True, default=str)
    with lock:
        if sig not in cache:
            cache[sig] = WindowTerms(Analyzer.from_dict(analyzer) if analyzer else Analyzer())
        terms = cache[sig]
    return PassageFinder(terms, weights, {k: retrievers[k] for k in vector_kinds}, term_kind=term_kind)
