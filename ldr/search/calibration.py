"""The calibrated relevance: an estimate of P(the document is relevant to the query) that a RAG
application can cut on (`min_score`), the same number whether the document came first among a
hundred candidates, alone through a filter, or in an index of one.

Its features depend on the query, the document and the index's statistics only, never on the
other candidates: one per retriever kind searched, the kind's score of the document, over the
highest score the query can reach where the kind knows it (BM25: every query term saturated, so
the fraction of the query the document holds, weighted by the terms' rarity), else as it is (a
cosine). A kind that did not return the document within its depth counts 0.

Logistic regressions over them were fitted by bench/fit_own_calibration.py on development data;
calibration.json holds each fit with the kinds it reads, the models their scores came from, the
data, and its out-of-fold AUC, Brier score and calibration error. A search uses the fit that reads
the most of its kinds, under the same models.

An exact match is near certain: where two neighbouring windows of the document hold every term of a query of
EXACT["min_words"] words or more (a quoted sentence), the estimate is at least EXACT["p"], the
smallest share of such hits that were relevant on any dataset it was measured on (`exact` in
calibration.json, measured by bench/fit_calibration.py: 0.82, from quoted manual sentences; quoted
needles and QMSum's exact matches were all relevant). bench/fit_calibration.py also reports the
estimate on every dataset it was not fitted on.
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
