"""The calibrated relevance: an estimate of P(the document is relevant to the query) that a RAG
application can cut on (`min_score`), the same number whether the document came first among a
hundred candidates, alone through a filter, or in an index of one.

Its features depend on the query, the document and the index's statistics only, never on the
other candidates: one per retriever kind searched, the kind's score of the document, over the
highest score the query can reach where the kind knows it (BM25: every query term saturated, so
the fraction of the query the document holds, weighted by the terms' rarity), else as it is (a
cosine). A kind that did not return the document within its depth counts 0.

Logistic regressions over them were fitted by bench/fit_calibration.py on development data;
calibration.json holds each fit with the kinds it reads, the models their scores came from, the
data, and its out-of-fold AUC, Brier score and calibration error. A search uses the fit that reads
the most of its kinds, under the same models.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from .. import components as registry

TABLE = Path(__file__).with_name("calibration.json")


@lru_cache(maxsize=1)
def fits() -> list[dict]:
    return json.loads(TABLE.read_text(encoding="utf-8"))["fits"] if TABLE.is_file() else []


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


def relevance(x: dict[str, float], fit: dict | None) -> float | None:
    if fit is None:
        return None
    z = fit["intercept"] + sum(w * x[k] for k, w in fit["weights"].items())
    return 1 / (1 + math.exp(-z)) if z > -700 else 0.0
