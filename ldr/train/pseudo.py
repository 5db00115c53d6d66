"""Training examples drawn from the corpus itself: no query and no judgement of the user's
(`ldr train dense --from-corpus`).

Long documents are cut into windows of whole sentences. A sampled window gives a pseudo-query of
one of these shapes, taken in turn (`shapes`; the first two by default):
- a summary: the window's sentences that carry the most of what sets it apart from the corpus
  (their terms' tf in the window times their idf over the documents), in text order, up to
  `query_words` words; the window without those sentences (the inverse cloze task) is the
  positive half of the time, so the model learns what surrounds a topic, not only copies of it;
- a keyword set: the window's top terms by the same weight, each written as its most frequent
  form in the window (catchwords, as a lawyer or a searcher types them);
- a document's keywords: the whole document's top terms by tf·idf, as it writes them (what it is
  about, as a judgment's catchphrases say it), its window holding most of their weight the positive.
The index's own default search is the teacher: a pseudo-query is kept only when the search ranks
its source document in the top `top` (a query too vague to name its document teaches noise), and
its hard negatives are the documents the search ranks above or next to the source (siblings that
share the topic and the vocabulary), each represented by its window that shares the most of the
query's weight.
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass

from ..errors import ConfigError
from .mining import Example

MARKER = re.compile(r"\{[a-z]+\}")          # transcripts' {disfmarker}, {vocalsound}: no query has them
SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
WORD = re.compile(r"\S+")


SHAPES = ("summaries", "keyword sets", "document keywords")


@dataclass
class PseudoSettings:
    queries: int = 1000          # pseudo-queries drawn (before the round trip drops the vague ones)
    window_words: int = 100      # a positive: whole sentences up to this many words (~140 tokens)
    query_words: int = 40        # a summary query: its sentences add up to at least this many words
    keywords: int = 10           # a keyword query: this many terms
    document_keywords: int = 20  # a document's keyword query: this many of the whole document's terms
    shapes: tuple = ("summaries", "keyword sets")   # the pseudo-queries' shapes, taken in turn
    top: int = 3                 # kept when the teacher ranks the source document at most this deep
    negatives: int = 1           # hard negatives per pseudo-query
    seed: int = 0

    def __post_init__(self):
        if self.queries < 4:
            raise ConfigError("--queries: at least 4 pseudo-queries (a dev split needs some)")
        if self.window_words < 20:
            raise ConfigError("the windows need at least 20 words")
        unknown = set(self.shapes) - set(SHAPES)
        if unknown or not self.shapes:
            raise ConfigError(f"pseudo-query shapes: {', '.join(SHAPES)} (got {', '.join(sorted(unknown)) or 'none'})")


@dataclass
class Window:
    doc: str
    sentences: list[str]
    terms: list[list[str]]       # each sentence's analysed terms

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    def weights(self, idf: dict[str, float]) -> Counter:
        tf = Counter(t for ts in self.terms for t in ts)
        return Counter({t: n * idf.get(t, 0.0) for t, n in tf.items()})


def sentences(text: str) -> list[str]:
    """The text's sentences (lines, then sentence ends), markers and spacing cleaned."""
    out = []
    for s in SENTENCE.split(MARKER.sub(" ", text)):
        s = " ".join(s.split())
        if s:
            out.append(s)
    return out


def windows(doc: str, text: str, size: int, analyse) -> list[Window]:
    """Consecutive windows of whole sentences, each at most `size` words (a longer sentence is cut)."""
    out, cur, cur_terms, n = [], [], [], 0
    for s in sentences(text):
        words = s.split()
        for i in range(0, len(words), size):
            piece = " ".join(words[i:i + size])
            w = min(size, len(words) - i)
            if cur and n + w > size:
                out.append(Window(doc, cur, cur_terms))
                cur, cur_terms, n = [], [], 0
            cur.append(piece)
            cur_terms.append(analyse(piece))
            n += w
    if cur:
        out.append(Window(doc, cur, cur_terms))
    return out


class Terms:
    """The index's own analysis of a word, cached: a corpus repeats its words."""

    def __init__(self, index):
        from .. import components as registry
        from ..components.analysis import Analyzer, cjk_pretokenize, text_analyzer

        comps = index.components
        found = next((f for n, kind in registry.kinds(comps) if (f := kind.passage_analyzer(comps[n])) is not None),
                     None)
        a = Analyzer.from_dict(found) if found else Analyzer()
        self._an, self._cjk, self._pre = text_analyzer(a), a.is_cjk, cjk_pretokenize
        self._cache: dict[str, list[str]] = {}

    def word(self, w: str) -> list[str]:
        got = self._cache.get(w)
        if got is None:
            got = self._cache[w] = self._an.analyze(self._pre(w) if self._cjk else w)
        return got

    def __call__(self, text: str) -> list[str]:
        return [t for w in WORD.findall(text) for t in self.word(w)]

    def surface(self, window: Window) -> dict[str, str]:
        """Each term's most frequent written form in the window."""
        forms: dict[str, Counter] = {}
        for s in window.sentences:
            for w in WORD.findall(s):
                clean = w.strip(".,;:!?()[]\"'").lower()
                for t in self.word(clean) if clean else ():
                    forms.setdefault(t, Counter())[clean] += 1
        return {t: c.most_common(1)[0][0] for t, c in forms.items()}


def summary_query(w: Window, idf: dict, query_words: int) -> tuple[str, set[int]]:
    """(the query, the indexes of the sentences it took)."""
    weight = w.weights(idf)
    score = [sum(weight[t] / max(1, w.terms[i].count(t)) for t in set(ts)) / math.sqrt(len(ts) + 5)
             for i, ts in enumerate(w.terms)]
    taken, words = set(), 0
    for i in sorted(range(len(score)), key=lambda i: -score[i]):
        if words >= query_words:
            break
        taken.add(i)
        words += len(w.sentences[i].split())
    return " ".join(w.sentences[i] for i in sorted(taken)), taken


def keyword_query(w: Window, idf: dict, n: int, terms: Terms) -> str:
    forms = terms.surface(w)
    top = [t for t, _ in w.weights(idf).most_common() if t in forms][:n]
    return " ".join(forms[t] for t in top)


def document_query(ws: list[Window], idf: dict, n: int, terms: Terms) -> str:
    """The whole document's top `n` terms by tf·idf, each in its most frequent written form: what
    the document is about as catchwords (a judgment's catchphrases), not one window's detail."""
    whole = Window(ws[0].doc, [x for w in ws for x in w.sentences], [t for w in ws for t in w.terms])
    return keyword_query(whole, idf, n, terms)


def _draw(wins: dict[str, list[Window]], n: int, min_words: int, rng: random.Random) -> list[Window]:
    """`n` windows over the documents, as even a share per document as they allow."""
    pool = {d: [w for w in ws if len(w.text.split()) >= min_words] for d, ws in wins.items()}
    pool = {d: ws for d, ws in pool.items() if ws}
    for ws in pool.values():
        rng.shuffle(ws)
    out, depth = [], 0
    while len(out) < n and any(depth < len(ws) for ws in pool.values()):
        docs = [d for d, ws in pool.items() if depth < len(ws)]
        rng.shuffle(docs)
        out.extend(pool[d][depth] for d in docs[:n - len(out)])
        depth += 1
    return out


def best_window(ws: list[Window], query_terms: set[str], idf: dict) -> Window:
    return max(ws, key=lambda w: sum(idf.get(t, 0.0) for t in query_terms & {t for ts in w.terms for t in ts}))


def pseudo_examples(index, settings: PseudoSettings, progress: bool = True) -> tuple[list[Example], dict]:
    """(examples, counts): pseudo-queries with their positive window and hard-negative windows,
    from the documents of `index` as its default search ranks them."""
    from tqdm.auto import tqdm

    s, rng = settings, random.Random(settings.seed)
    ids = index.live_ids()
    if len(ids) < 2:
        raise ConfigError(f"{index.path} has {len(ids)} document(s): training from the corpus needs at least two "
                          "(the negatives are other documents)")
    terms = Terms(index)
    wins, df = {}, Counter()
    for d in tqdm(ids, desc="reading the corpus", unit="doc", disable=not progress, leave=False):
        wins[d] = windows(d, index.document(d).text, s.window_words, terms)
        df.update({t for w in wins[d] for ts in w.terms for t in ts})
    idf = {t: math.log(1 + (len(ids) - n + 0.5) / (n + 0.5)) for t, n in df.items()}
    drawn = _draw(wins, s.queries, max(10, s.window_words // 5), rng)
    queries, positives, shapes, asked = [], [], [], set()
    for i, w in enumerate(drawn):
        shape = s.shapes[i % len(s.shapes)]
        if shape == "document keywords" and w.doc in asked:
            shape = "repeated"          # a document has one such query: a second would be the same
            q = pos = ""
        elif shape == "summaries":
            q, taken = summary_query(w, idf, s.query_words)
            cloze = rng.random() < 0.5 and len(taken) < len(w.sentences)
            pos = " ".join(x for j, x in enumerate(w.sentences) if not (cloze and j in taken))
        elif shape == "keyword sets":
            q, pos = keyword_query(w, idf, s.keywords, terms), w.text
        else:       # the document's own catchwords; the positive its window that holds most of them
            asked.add(w.doc)
            q = document_query(wins[w.doc], idf, s.document_keywords, terms)
            pos = best_window(wins[w.doc], set(terms(q)), idf).text
        shapes.append(shape)
        queries.append(q)
        positives.append(pos)
    examples, counts = [], Counter(drawn=len(drawn), repeated=shapes.count("repeated"))
    asks = {str(i): q for i, (q, shape) in enumerate(zip(queries, shapes)) if shape != "repeated"}
    searched = index.search_many(asks, k=s.top + s.negatives, passages=0, with_meta=False, batch_size=64)
    bar = tqdm(total=len(asks), desc="the search as teacher", unit="query", disable=not progress, leave=False)
    for qid, result in searched:
        bar.update(1)
        i = int(qid)
        w = drawn[i]
        got = [] if isinstance(result, Exception) else [h.id for h in result]
        if w.doc not in got[:s.top]:
            counts["vague"] += 1        # the teacher cannot name its document: not a query to learn from
            continue
        negs = [d for d in got if d != w.doc][:s.negatives]
        if not negs:
            counts["no negative"] += 1
            continue
        qterms = set(terms(queries[i]))
        examples.append(Example(f"pseudo-{i}", queries[i], [positives[i]],
                                [best_window(wins[d], qterms, idf).text for d in negs], [w.doc], negs))
        counts[shapes[i]] += 1
    bar.close()
    counts["kept"] = len(examples)
    return examples, {k: v for k, v in counts.items() if v or k != "repeated"}
