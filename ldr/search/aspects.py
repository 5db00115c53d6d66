"""The window stage's aspect evidence: a query of several sentences (a meeting's summary, a list of
catchphrases) asks about several parts of a document, and the document it is about answers each
part somewhere, where a sibling answers one part well. Each aspect (a sentence, merged with the
next until it holds MIN_TERMS analysed terms) finds its own best window of SIZE terms, scored by
BM25 of that aspect's terms among the candidates' windows of that size; a candidate's evidence is
the sum over aspects. On qmsum-train, after the phrases: +0.72 nDCG@10 held out by 5-fold CV
grouped by meeting (bench/README.md).

Queries of fewer than two aspects get none. It reads what the shards already send for the window
scales (where the query's terms occur in each candidate's term stream): no new call, no new bytes."""
from __future__ import annotations

import re

import numpy as np

from .window_scales import best_per_group

KEY = "aspects"          # the raw score's key among a document's window evidence
# an aspect holds at least this many analysed terms: legal catchphrases ("remuneration of;") alone
# lose 0.14 nDCG@10 at weight 0.4, merged to 6 terms they gain 0.06 (qmsum-train equal either way)
MIN_TERMS = 6
SIZE = 40                # each aspect's windows (qmsum-train: 40 terms +0.72, 30 +0.62, 20 +0.34)
# at most this many aspects: neighbouring sentences share one beyond it, so a pasted document costs
# what 16 aspects cost (qmsum-train's queries hold up to 11, legal's catchphrase lists up to 40:
# merged to 8, 12 or 16, every legal ranking stays the same)
MAX_ASPECTS = 16
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])")      # full-width ends need no space


def split(query: str, analyse) -> list[list[str]]:
    """The query's aspects, each its analysed terms: sentences (ended by . ! ? ; or their
    full-width forms) merged forward, and the last one backward, until each holds MIN_TERMS
    terms, then neighbours merged into MAX_ASPECTS runs of as even a size as can be; [] for a
    query of fewer than two."""
    out: list[list[str]] = []
    for sentence in _SENTENCE_END.split(query):
        terms = analyse(sentence) if sentence.strip() else []
        if out and len(out[-1]) < MIN_TERMS:
            out[-1] += terms
        elif terms:
            out.append(list(terms))
    if len(out) > 1 and len(out[-1]) < MIN_TERMS:
        last = out.pop()
        out[-1] += last
    if len(out) > MAX_ASPECTS:
        out = [[t for j in run for t in out[j]] for run in np.array_split(np.arange(len(out)), MAX_ASPECTS)]
    return out if len(out) > 1 else []


def aspect_scores(feats: dict, docnos: list[int], aspects: list[list[str]], columns: list[str],
                  k1: float, b: float, memo: dict | None = None) -> dict[int, float]:
    """{docno: the sum over `aspects` of the BM25 of its best window of SIZE terms holding that
    aspect's terms, among these documents' windows} (`columns`: the order the shards count the
    query's terms in; `feats`: each document's WindowFeatures; a document without them scores 0;
    `memo`: the windows of SIZE terms a scale of the same query placed, window_scales._cells)."""
    col = {t: j for j, t in enumerate(columns)}
    groups = [np.array(sorted({col[t] for t in terms if t in col}), dtype=np.int64) for terms in aspects]
    best = best_per_group(feats, docnos, SIZE, [g for g in groups if len(g)], len(columns), k1, b, memo)
    return {d: float(v.sum()) for d, v in best.items()}
