"""Score normalisation, one module for every stage (fusion, the window stage, the reranker's mix,
the passage finder, tune). numpy in, numpy out; the dict helpers wrap the same functions.

Policy for constant input (one candidate, or every score equal): the scores carry no evidence to
order by, so each value takes the place a tie at the top would: 1.0 under min-max (the top of
[0, 1]: a lone candidate is as good as the best, never 0) and 0.0 under z-scores (the mean).
`valid` masks leave the other entries at 0.
"""
from __future__ import annotations

import numpy as np

METHODS = ("minmax", "zscore")


def _masked(x, valid, scale) -> np.ndarray:
    """`scale(values)` applied to the valid entries of x; the others (and all, when none is valid) 0."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(len(x))
    mask = np.ones(len(x), bool) if valid is None else np.asarray(valid, bool)
    if mask.any():
        out[mask] = scale(x[mask])
    return out


def _minmax(v: np.ndarray):
    lo, hi = v.min(), v.max()
    return (v - lo) / (hi - lo) if hi > lo else 1.0


def _zscore(v: np.ndarray):
    sd = v.std()
    return (v - v.mean()) / sd if sd > 0 else 0.0


def minmax(x, valid=None) -> np.ndarray:
    return _masked(x, valid, _minmax)


def zscore(x, valid=None) -> np.ndarray:
    return _masked(x, valid, _zscore)


def normalise(x, method: str, valid=None) -> np.ndarray:
    if method == "minmax":
        return minmax(x, valid)
    if method == "zscore":
        return zscore(x, valid)
    raise ValueError(f"unknown normalisation {method!r}; choose one of {', '.join(METHODS)}")


def normalise_dict(scores: dict, method: str) -> dict:
    """{key: normalised score} of {key: score}."""
    if not scores:
        return {}
    return dict(zip(scores, normalise(list(scores.values()), method).tolist()))
