"""The calibrated relevance: an estimate of P(the document is relevant to the query) that a RAG
application can cut on (`min_score`), the same number whether the document came first among a
hundred candidates, alone through a filter, or in an index of one.

Its features depend on the query, the document and the index's statistics only, never on the
other candidates, and their scale does not move with the corpus, the query's length or the model:

- a lexical kind's score over the highest score the query can reach (BM25: every query term
  saturated, so the fraction of the query the document holds, weighted by the terms' rarity);
- `cover`: the largest share of the query's terms one window of the document holds (a quoted
  sentence: 1), and `cover_doc`: the share the whole document holds;
- a vector kind's score as a z-score in its model's own distribution of scores of unrelated
  documents (`nulls`, measured once per model), so one fit serves every dense model measured.

A kind that did not return the document within its depth counts 0. Logistic regressions over
them were fitted by bench/fit_calibration.py across datasets and checked leave-one-dataset-out;
calibration.json holds each fit with the features it reads, the data it was fitted on and its
held-out figures. A search uses the fit that reads the most of its kinds; a vector kind whose
model has no measured distribution is not read.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from .. import components as registry

TABLE = Path(__file__).with_name("calibration.json")
WINDOW_FEATURES = ("cover", "cover_doc")


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(TABLE.read_text(encoding="utf-8")) if TABLE.is_file() else {"fits": [], "nulls": {}}


def fits() -> list[dict]:
    return table()["fits"]


def models(components: dict, kinds) -> dict[str, str | None]:
    """{kind: the model its scores come from}."""
    return {k: registry.get(k).model_name(components[k]) for k in kinds}


def nulls(components: dict, kinds) -> dict[str, tuple[float, float]]:
    """{vector kind: (mean, std) of its model's scores of unrelated documents}, where measured."""
    known = table().get("nulls", {})
    return {k: (known[m]["mean"], known[m]["std"]) for k, m in models(components, kinds).items()
            if m is not None and m in known}


def readable(components: dict, kinds) -> list[str]:
    """The kinds a fit may read here: lexical ones (no model), vector ones whose model was measured."""
    have, measured = models(components, kinds), nulls(components, kinds)
    return [k for k in kinds if have[k] is None or k in measured]


def fit_for(components: dict, kinds: list[str]) -> dict | None:
    """The fit reading the most of this index's readable kinds (and only those), or None."""
    can = set(readable(components, kinds))
    usable = [f for f in fits() if "kinds" in f and set(f["kinds"]) <= can]   # (fits of before v2 have none)
    return max(usable, key=lambda f: (len(f["kinds"]), len(f["weights"])), default=None)


def features(scores: dict, bounds: dict, kinds, windows: dict | None = None,
             null: dict | None = None) -> dict[str, float]:
    """The features of one document for one query: `scores` its scores by kind, `bounds` each
    lexical kind's highest score for the query, `windows` its best-window evidence
    (PassageFinder.best_from), `null` each vector kind's (mean, std) of unrelated scores."""
    out = {}
    for k in kinds:
        v = float(scores.get(k, 0.0))
        if bounds.get(k):
            out[k] = v / bounds[k]
        elif null and k in null:
            mean, std = null[k]
            out[k] = (v - mean) / std if k in scores else 0.0
        else:
            out[k] = v
    for name in WINDOW_FEATURES:
        out[name] = float((windows or {}).get(name, 0.0))
    return out


def relevance(x: dict[str, float], fit: dict | None) -> float | None:
    if fit is None:
        return None
    z = fit["intercept"] + sum(w * x.get(k, 0.0) for k, w in fit["weights"].items())
    return 1 / (1 + math.exp(-z)) if z > -700 else 0.0
