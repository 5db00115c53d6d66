"""The calibrated relevance: an estimate of P(the document is relevant to the query) that a RAG
application can cut on (`min_score`), the same number whether the document came first among a
hundred candidates or alone through a filter. Its features depend on the query, the document and
the whole index's statistics only, never on the other candidates.

Two families of logistic regressions, both in calibration.json with the data they were fitted
and checked on:

- `query_fits` (issue 59), fitted across datasets by bench/fit_calibration.py and reported on each
  dataset held out of the fit: the document's BM25 placed in the query's own distribution of BM25
  scores over every document of the index (a z-score, and a share of the index's best score: the
  distribution comes as sums from each shard, search/gather.py), the largest share of the query's
  terms two neighbouring windows of the document hold (`cover`). Their scale does not move with
  the corpus's size, its documents' length or the query's, nor with the language or the dense
  model (a dense cosine as a z-score in its model's scores of unrelated documents got a weight of
  0.05 and changed nothing held out: bench/README.md). They need BM25 scores over the whole
  index (the native backend, the default) and `min_docs` documents in the index.
- `fits` (the first estimate, fitted on qmsum-train or klexikon-de-dev alone): one feature per
  kind, its score over the highest score the query can reach where the kind knows it (BM25: the
  fraction of the query the document holds, weighted by rarity), else as it is. They serve what
  the query fits cannot: a tantivy or Lucene BM25, a dense-only index, an index of fewer than
  `min_docs` documents (its distribution says little).

An exact match is near certain: where two neighbouring windows of the document hold every term of a
query of EXACT["min_words"] words or more (a quoted sentence), the estimate is at least EXACT["p"],
the smallest share of such hits that were relevant on any dataset it was measured on (`exact`).
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from .. import components as registry
from .passages import COVER  # noqa: F401  (the relevance stage reads it here)

TABLE = Path(__file__).with_name("calibration.json")


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(TABLE.read_text(encoding="utf-8")) if TABLE.is_file() else {"fits": []}


def fits() -> list[dict]:
    return table()["fits"]


def exact() -> dict | None:
    """{"min_words", "p", ...}: the measured floor of an exact match, or None."""
    return table().get("exact")


def models(components: dict, kinds) -> dict[str, str | None]:
    """{kind: the model its scores come from}."""
    return {k: registry.get(k).model_name(components[k]) for k in kinds}


def fit_for(components: dict, kinds: list[str]) -> dict | None:
    """The fit reading the most of `kinds` whose models match this index's, or None."""
    have = models(components, kinds)
    usable = [f for f in fits() if all(k in have and have[k] == m for k, m in f["models"].items())]
    return max(usable, key=lambda f: len(f["models"]), default=None)


def query_fit_for(components: dict, kinds: list[str]) -> dict | None:
    """The query fit whose kinds this index scores over every document (native BM25), or None."""
    from .. import components as registry

    def whole(kind: str) -> bool:
        return kind in kinds and bool(registry.get(kind).collection_stats(components[kind]))

    usable = [f for f in table().get("query_fits", []) if all(whole(k) for k in f["reads"])]
    return max(usable, key=lambda f: len(f["reads"]), default=None)


def min_docs() -> int:
    return int(table().get("min_docs", 0))


def small_index_note(documents: int) -> str:
    """What the relevance of an index under `min_docs()` documents does, as measured on random
    sub-corpora (table()["small_indexes"], bench/bench_relevance_small.py; issue 78)."""
    n = f"{documents} document{'' if documents == 1 else 's'}"
    small = table().get("small_indexes") or {}
    m = list((small.get("sets") or {}).values())
    if not m:
        return f"{n}, under {min_docs()}: the first estimate applies"

    def span(side: str, what: str, fmt: str) -> str:
        v = [r[side][what] for r in m]
        return f"{min(v):{fmt}}-{max(v):{fmt}}"
    return (f"{n}, under {min_docs()}: the first estimate applies, and it under-states right answers: on "
            f"{small['size']}-document sub-corpora of {len(m)} datasets the top hit was right "
            f"{span('answered', 'top1_accuracy', '.0%')} of the time at a mean relevance of "
            f"{span('answered', 'mean_top1_relevance', '.2f')}, and {span('unanswered', 'mean_top1_relevance', '.2f')} "
            "where the corpus held no answer (bench/README.md). Cut low, or fit it on ~40 judged queries: "
            "`ldr tune --relevance`")


def query_features(fit: dict, scores: dict, distributions: dict, cover: float) -> dict | None:
    """The query fit's features of one document: `scores` its first stages' ({kind: score}, 0
    where a kind did not list it), `distributions` the query's over the whole index per kind;
    None where a distribution it reads is absent."""
    x = {"cover": float(cover)}
    for kind in fit["reads"]:
        d = distributions.get(kind)
        if d is None or d["n"] < 1:
            return None
        s = float(scores.get(kind, 0.0))
        mean = d["sum"] / d["n"]
        std = math.sqrt(max(d["sumsq"] / d["n"] - mean * mean, 0.0)) or 1.0
        x[kind + ".z"] = (s - mean) / std
        x[kind + ".best"] = s / d["max"] if d["max"] > 0 else 0.0
    return x


def features(scores: dict, bounds: dict, kinds) -> dict[str, float]:
    out = {}
    for k in kinds:
        v = float(scores.get(k, 0.0))
        out[k] = v / bounds[k] if bounds.get(k) else v
    return out


def is_exact(query: str, cover: float | None) -> bool:
    """A query of the measured length whose every term one window of the document holds."""
    rule = exact()
    return rule is not None and cover is not None and cover >= 1.0 and len(query.split()) >= rule["min_words"]


def relevance(x: dict[str, float], fit: dict | None, exact_match: bool = False) -> float | None:
    if fit is None:
        return None
    z = fit["intercept"] + sum(w * x[k] for k, w in fit["weights"].items())
    p = 1 / (1 + math.exp(-z)) if z > -700 else 0.0
    return max(p, exact()["p"]) if exact_match else p
