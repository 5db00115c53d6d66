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

from ..corpus.text import page_of
from .marks import marks
from .normalise import minmax
from .window_counts import covers, in_order, occurrences, window_counts
from .window_scales import best_at, scale_key
from .window_features import FeatureMap, WindowFeatures
from .window_terms import WindowTerms

COVER = "cover"     # best_from: the largest share of the query's terms two neighbouring windows hold


@dataclass
class Passage:
    start: int           # character offsets into the document text: text == doc[start:end]
    end: int
    text: str
    score: float
    stage: str           # which source ranks this window highest: the vector kind ("dense") or the lexical one
    scores: dict
    highlights: list = field(default_factory=list)   # [start, end] of each word matching a query term (document offsets)
    # in a document with page breaks (a PDF): the 1-based page it starts on, and ends on
    page: int | None = None
    page_end: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("page", "page_end"):
            if d[k] is None or (k == "page_end" and d[k] == d["page"]):
                del d[k]
        return d


@dataclass
class Ranked:
    """The windows of the documents a query shows passages of, scored (PassageFinder.rank)."""
    win: np.ndarray
    vec: dict
    terms: np.ndarray
    contrib: dict
    total: np.ndarray
    order: dict                # docno → its windows (indices), best first


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

    def _vector_windows(self, reps: dict, docnos: list) -> dict:
        """{kind: [(sims, spans) of each of `docnos`]}: the windows each vector kind scored, each
        kind's documents in one call (their vectors read and scored together)."""
        return {kind: r.passage_scores(reps[kind], docnos) for kind, r in self.vectors.items()
                if reps.get(kind) is not None}

    @staticmethod
    def _windows_of(scored: dict, j: int, length: int) -> dict:
        """The windows of the j-th document (`length` characters) each kind scored, leaving out a
        kind whose spans are unknown (a segment from before spans were kept)."""
        out = {}
        for kind, each in scored.items():
            sims, spans = each[j]
            if spans is not None and len(spans) and not (spans < 0).any() and spans[:, 1].max() <= length:
                out[kind] = (np.asarray(sims, dtype=np.float64), np.asarray(spans, dtype=np.int64))
        return out

    def term_list(self, query: str) -> list[str]:
        """The query's terms in the order a window's term counts are columns (WindowFeatures.tf)."""
        return sorted(self.query_terms(query))

    # -- where the documents are (a shard): each window's counts and similarities -----------------
    def features(self, reps: dict, docnos, text_of, keys: dict | None, terms: list[str]) -> dict:
        """{docno: WindowFeatures}: each window of the documents, the counts of `terms` in it and
        each vector kind's similarity. `text_of(d)`: a document's text, read only when its windows
        are not cached yet; `keys` {docno: uid} lets later queries reuse the analysed windows."""
        lengths = self.cache.lengths
        docnos = list(docnos)
        scored = self._vector_windows(reps, docnos)
        got = []
        for j, d in enumerate(docnos):
            uid = keys[d] if keys is not None else None
            text = None
            if uid is None or uid not in lengths:
                text = text_of(d)
                if uid is not None:
                    lengths[uid] = len(text)
            found = self._windows_of(scored, j, len(text) if text is not None else lengths[uid])
            spans = np.concatenate([sp for _, sp in found.values()]) if found else None
            key = (uid, tuple(found)) if uid is not None else None
            entry = self.cache.get(key, text if text is not None else (lambda d=d: text_of(d)), spans)
            m = len(entry.win)
            vec, at = {}, 0
            for k, (sims, sp) in found.items():       # the windows are the kinds' spans, in this order
                col = np.full(m, np.nan)
                col[at:at + len(sp)] = sims
                vec[k] = col
                at += len(sp)
            got.append((d, entry, vec))
        out = FeatureMap()
        # the query's terms looked up in every document's postings at once, per vocabulary (one,
        # unless it started afresh during this query), after every document was analysed
        groups: dict = {}
        for item in got:
            groups.setdefault(id(item[1].vocab), []).append(item)
        for group in groups.values():
            vocab = group[0][1].vocab
            cols = [j for j, t in enumerate(terms) if t in vocab]
            ids = np.array([vocab[terms[j]] for j in cols], dtype=np.int64)
            cols = np.array(cols, dtype=np.int64)
            table, rows = window_counts([len(e.win) for _, e, _ in group],
                                        *occurrences([e.in_windows for _, e, _ in group], ids, cols), len(terms))
            places = in_order(len(group), *occurrences([e.in_stream for _, e, _ in group], ids, cols)[:3])
            # half the bytes a shard sends: a document's counts in uint16 where they fit (they do
            # unless a window holds a term 65,536 times)
            small = not table.size or table.max() < 1 << 16
            if small:
                table = table.astype(np.uint16)
            for (d, e, vec), at_rows, (at, at_col) in zip(group, rows, places):
                tf = table[at_rows]
                if not small and (not tf.size or tf.max() < 1 << 16):
                    tf = tf.astype(np.uint16)
                out[d] = WindowFeatures(e.win, e.lengths, tf, vec, at, at_col, e.n_terms)
        return FeatureMap((d, out[d]) for d in docnos if d in out)

    def cut(self, text: str, spans, n: int, qterms) -> list[tuple]:
        """A document's n passages from its windows `spans` (best first): each cut to whole
        sentences, a window overlapping a better one left out; [(window, start, end, marks, pages)]
        (pages: the pages it starts and ends on in a text with page breaks, else None)."""
        chosen: list[tuple] = []
        for j, (a, e) in enumerate(np.asarray(spans).tolist()):
            if len(chosen) >= n:
                break
            a, e = _tidy(text, a, e)
            if any(a < pe and ps < e for _, ps, pe, _, _ in chosen):
                continue   # overlapping windows: the better one stands for both
            chosen.append((j, a, e, [[a + s, a + t] for s, t in self.marks(text[a:e], set(qterms))],
                           None if "\f" not in text else (page_of(text, a), page_of(text, e))))
        return chosen

    # -- where the candidates are gathered: BM25 among their windows, the best, the passages ---------
    def _scored(self, feats: dict, docnos) -> tuple:
        """Every window of `docnos` (owner, spans, {kind: similarity or nan}, BM25 among these windows)."""
        got = [(d, feats[d]) for d in docnos if d in feats and len(feats[d].spans)]
        if not got:
            return np.zeros(0, np.int64), np.zeros((0, 2), np.int64), {k: np.zeros(0) for k in self.vectors}, np.zeros(0)
        owner = np.repeat(np.fromiter((d for d, _ in got), dtype=np.int64, count=len(got)),
                          np.fromiter((len(f.spans) for _, f in got), dtype=np.int64, count=len(got)))
        spans = np.concatenate([f.spans for _, f in got])
        vec = {k: np.concatenate([f.vec.get(k, np.full(len(f.spans), np.nan)) for _, f in got]) for k in self.vectors}
        lengths = np.concatenate([f.lengths for _, f in got]).astype(np.float64)
        tf = np.concatenate([f.tf for _, f in got]).astype(np.float64)
        return owner, spans, vec, self._bm25(lengths, tf)

    def best_from(self, feats: dict, docnos: list[int], scales=(), memo: dict | None = None) -> dict[int, dict[str, float]]:
        """{docno: {the lexical kind: the BM25 of its best window among these documents' windows,
        each vector kind: its best window's similarity (nan: none), COVER: the largest share of
        the query's terms two neighbouring windows hold, scale_key(S) for each size S of `scales`:
        the BM25 of its best window of S terms among these documents' windows of that size}}.
        COVER depends on the document and the query alone (the relevance stage reads it)."""
        owner, _, vec, terms = self._scored(feats, docnos)
        out = {d: {self.term_kind: 0.0, **{k: float("nan") for k in self.vectors}, COVER: 0.0} for d in docnos}
        n_cols = max((f.tf.shape[1] for f in feats.values()), default=0)
        for size in scales:
            for d, v in best_at(feats, docnos, size, n_cols, self.k1, self.b, memo).items():
                out[d][scale_key(size)] = v
        for d, v in covers(feats, docnos).items():
            out[d][COVER] = v
        if len(owner):
            # per document among these, each one's windows together (not per docno: an array as
            # long as the index, filled per kind, cost ~1.5 ms a query at a million documents)
            first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
            docs = owner[first].tolist()
            for kind, scores in [(self.term_kind, terms)] + list(vec.items()):
                best = np.fmax.reduceat(scores, first)     # fmax: a window a kind did not score is skipped
                for d, v, ok in zip(docs, best.tolist(), np.isfinite(best).tolist()):
                    if ok:
                        out[d][kind] = v
        return out

    def rank(self, feats: dict, docnos: list[int]) -> "Ranked":
        """Every window of `docnos` scored (each source min-max normalised over the windows it
        scored, then weighted, so passage scores compare across hits), each document's best first."""
        owner, win, vec, term_scores = self._scored(feats, docnos)
        contrib = {k: self.w_vec[k] * minmax(np.nan_to_num(v), ~np.isnan(v)) for k, v in vec.items()}
        contrib[self.term_kind] = self.w_terms * minmax(term_scores, np.ones(len(win), bool))
        total = sum(contrib.values()) if len(win) else np.zeros(0)
        order: dict[int, list[int]] = {d: [] for d in docnos}
        if len(win):        # each document's windows, best first (then by start): one sort for all of them
            ranked = np.lexsort((win[:, 0], -total, owner))
            first = np.flatnonzero(np.r_[True, owner[ranked][1:] != owner[ranked][:-1]])
            for a, e in zip(first.tolist(), np.append(first[1:], len(ranked)).tolist()):
                order[int(owner[ranked[a]])] = ranked[a:e].tolist()
        return Ranked(win, vec, term_scores, contrib, total, order)

    def passages_of(self, ranked: "Ranked", d: int, cuts: list[tuple], texts: list[str]) -> list[Passage]:
        """Document d's Passages from its cuts (`cut` over its windows in `ranked.order[d]`) and their texts."""
        out = []
        for (j, a, e, marks, pages), text in zip(cuts, texts):
            i = ranked.order[d][j]
            scores = {self.term_kind: float(ranked.terms[i])}
            scores.update({k: float(v[i]) for k, v in ranked.vec.items() if not np.isnan(v[i])})
            # the source that adds the most to this window's score; vector kinds first on a tie
            stage = max([k for k in self.vectors if k in scores] + [self.term_kind], key=lambda k: ranked.contrib[k][i])
            out.append(Passage(a, e, text, float(ranked.total[i]), stage, scores, marks, *(pages or (None, None))))
        return out

    # -- both halves in one process ---------------------------------------------------------------
    def best_window(self, query: str, reps: dict, docnos: list[int], text_of, keys: dict | None = None
                    ) -> dict[int, dict[str, float]]:
        """{docno: {the lexical kind: the BM25 of its best window among these documents' windows,
        each vector kind: its best window's similarity (nan: none)}}: the window stage's evidence
        that one part of a long document answers the query. `text_of(d)`: a document's text (read
        only for documents whose windows are not cached)."""
        return self.best_from(self.features(reps, docnos, text_of, keys, self.term_list(query)), docnos)

    def find(self, query: str, reps: dict, docs: dict[int, str], n: int, keys: dict | None = None) -> dict[int, list[Passage]]:
        """{docno: its n best passages, best first} for the documents {docno: text}; `reps`: the
        query's representation per vector kind; `keys` {docno: uid} lets the window terms of a
        document be reused by later queries."""
        if n < 1 or not docs:
            return {d: [] for d in docs}
        terms = self.term_list(query)
        ranked = self.rank(self.features(reps, list(docs), docs.__getitem__, keys, terms), list(docs))
        out = {}
        for d, text in docs.items():
            cuts = self.cut(text, ranked.win[ranked.order[d]], n, terms)
            out[d] = self.passages_of(ranked, d, cuts, [text[a:e] for _, a, e, _, _ in cuts])
        return out

    def _bm25(self, lengths: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """BM25 of each window among these windows (Lucene's idf and length normalisation):
        `lengths` its terms, `tf` (windows × query terms) its counts."""
        if not tf.shape[1] or not len(lengths):
            return np.zeros(len(lengths))
        n, avg = len(lengths), max(lengths.mean(), 1.0)
        df = (tf > 0).sum(axis=0)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1 - self.b + self.b * lengths / avg)
        return (idf * tf / (tf + norm[:, None])).sum(axis=1)

    def marks(self, text: str, qterms: set[str]) -> list[tuple[int, int]]:
        """Character ranges of the words in `text` that match a query term (search/marks.py)."""
        return marks(self.cache, text, qterms)


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


def window_terms(components: dict, cache: dict, lock) -> tuple[WindowTerms, str]:
    """(the analysed windows of an index, kept across searches in `cache` by what they depend
    on, the lexical kind they are analysed as)."""
    import json

    from .. import components as registry
    from ..components.analysis import Analyzer

    analyzer, term_kind = None, "bm25"
    for name, kind in registry.kinds(components):
        found = kind.passage_analyzer(components[name])
        if found is not None:
            analyzer, term_kind = found, name
            break
    vectors = {n: components[n].get("model", {}).get("settings") for n, kind in registry.kinds(components)
               if kind.passage_vectors(components[n])}
    # a uid's text never changes, but a rebuild may change the analyzer or the passage vectors
    sig = json.dumps([analyzer, vectors], sort_keys=True, default=str)
    with lock:
        if sig not in cache:
            cache[sig] = WindowTerms(Analyzer.from_dict(analyzer) if analyzer else Analyzer())
        return cache[sig], term_kind


def finder_for(components: dict, weights: dict | None, kinds, cache: dict, lock, retriever=None) -> PassageFinder:
    """The passage finder of an index: term windows analysed as its lexical kind analyses text,
    and the passage vectors of the searched `kinds` whose vectors are passages (dense MaxP).
    `retriever(kind)`: where the documents are, the loaded readers of those vectors (None: the
    coordinator's half, which scores what shards tell it)."""
    from .. import components as registry

    terms, term_kind = window_terms(components, cache, lock)
    vector_kinds = [n for n in kinds if n in components and registry.get(n).passage_vectors(components[n])]
    return PassageFinder(terms, weights, {k: retriever(k) if retriever else None for k in vector_kinds},
                         term_kind=term_kind)
