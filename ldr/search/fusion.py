"""Score fusion: pure functions over {docid: score} (one query) or {qid: {docid: score}} (a run).

- rrf: Σ_r w_r / (k + rank_r(d)); a document missing from a run contributes nothing.
- minmax / zscore: Σ_r w_r · norm_r(score_r(d)); a document missing from a run ranked below
  everything the run returned: it gets 0 under min-max (the bottom of [0, 1]) and the run's
  lowest z-score under zscore.
"""
from __future__ import annotations

import math
from typing import Mapping

METHODS = ("rrf", "minmax", "zscore")

Scores = Mapping[str, float]


def ranks(scores: Scores) -> dict:
    """1-based ranks, ties broken by id for determinism."""
    return {d: r for r, (d, _) in enumerate(sorted(scores.items(), key=lambda kv: (-kv[1], str(kv[0]))), 1)}


def normalize(scores: Scores, method: str) -> dict:
    if not scores:
        return {}
    vals = list(scores.values())
    if method == "minmax":
        lo, hi = min(vals), max(vals)
        return {d: ((s - lo) / (hi - lo) if hi > lo else 1.0) for d, s in scores.items()}
    if method == "zscore":
        mean = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        return {d: ((s - mean) / sd if sd > 0 else 0.0) for d, s in scores.items()}
    raise ValueError(f"unknown normalisation {method!r}")


def rrf(runs: Mapping[str, Scores], weights: Mapping[str, float] | None = None, k: int = 60) -> dict:
    out: dict = {}
    for name, scores in runs.items():
        w = 1.0 if weights is None else weights.get(name, 0.0)
        if not w:
            continue
        for d, r in ranks(scores).items():
            out[d] = out.get(d, 0.0) + w / (k + r)
    return out


def weighted_sum(runs: Mapping[str, Scores], weights: Mapping[str, float] | None = None,
                 norm: str = "minmax") -> dict:
    normed = {name: normalize(s, norm) for name, s in runs.items()}
    docs = set().union(*[set(s) for s in normed.values()]) if normed else set()
    out = dict.fromkeys(docs, 0.0)
    for name, scores in normed.items():
        w = 1.0 if weights is None else weights.get(name, 0.0)
        if not w or not scores:
            continue
        floor = 0.0 if norm == "minmax" else min(scores.values())
        for d in docs:
            out[d] += w * scores.get(d, floor)
    return out


def fuse(runs: Mapping[str, Scores], method: str = "rrf", weights: Mapping[str, float] | None = None,
         k: int = 60) -> dict:
    """Fuse the per-retriever scores of one query."""
    if method == "rrf":
        return rrf(runs, weights, k)
    if method in ("minmax", "zscore"):
        return weighted_sum(runs, weights, method)
    raise ValueError(f"unknown fusion method {method!r}; choose one of {', '.join(METHODS)}")


def fuse_runs(runs: Mapping[str, Mapping[str, Scores]], method: str = "rrf",
              weights: Mapping[str, float] | None = None, k: int = 60) -> dict:
    """Fuse whole runs {stage: {qid: {docid: score}}} query by query."""
    qids = set().union(*[set(r) for r in runs.values()]) if runs else set()
    return {q: fuse({name: r.get(q, {}) for name, r in runs.items()}, method, weights, k) for q in sorted(qids)}


def parse_weights(text: str | None) -> dict[str, float] | None:
    """'bm25=1,dense=0.5' → {'bm25': 1.0, 'dense': 0.5}."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, _, val = part.partition("=")
        try:
            out[name.strip()] = float(val)
        except ValueError:
            raise ValueError(f"bad weight {part!r}; write name=number, e.g. bm25=1,dense=0.5,sparse=0.5") from None
    return out
