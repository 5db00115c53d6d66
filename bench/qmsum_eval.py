"""What the qmsum-train sweeps and fitters share (bench/sweeps/, language_defaults.py): the data
folder, its qrels, `ldr eval` run files, nDCG@10 of a ranking, a table of paired t-tests and
cross-validation grouped by meeting."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qmsum-train"


def qrels(data: Path) -> dict[str, dict[str, int]]:
    out: dict = {}
    for line in list(open(next((Path(data) / "qrels").glob("*.tsv"))))[1:]:
        q, d, s = line.split("\t")[:3]
        out.setdefault(q, {})[d] = int(s)
    return out


def queries(data: Path) -> list[dict]:
    return [json.loads(x) for x in open(Path(data) / "queries.jsonl")]


def judged(data: Path) -> tuple[dict, dict[str, str]]:
    """(qrels, {query id: text} of the judged queries) of a BEIR-format folder."""
    rels = qrels(data)
    return rels, {q["_id"]: q["text"] for q in queries(data) if q["_id"] in rels}


def load_run(folder: Path, stage: str) -> dict[str, dict[str, float]]:
    """One stage's TREC run written by `ldr eval` (`*.{stage}.trec` in `folder`)."""
    out: dict = {}
    for line in open(next(Path(folder).glob(f"*.{stage}.trec"))):
        q, _, d, _, s, _ = line.split()
        out.setdefault(q, {})[d] = float(s)
    return out


def rank(scores: dict) -> list:
    """Document ids best first; equal scores by id."""
    return sorted(scores, key=lambda d: (-scores[d], d))


def ndcg10(ranked: list, rel: dict[str, int]) -> float:
    g = sum((2 ** rel.get(d, 0) - 1) / np.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(rel.values(), reverse=True)[:10]
    idcg = sum((2 ** x - 1) / np.log2(i + 2) for i, x in enumerate(ideal))
    return float(g / idcg) if idcg else 0.0


def paired_row(name: str, v, base, width: int = 36) -> None:
    """One line: mean nDCG@10 of `v`, its difference from `base` and a paired t-test."""
    from scipy.stats import ttest_rel

    v, base = np.asarray(v), np.asarray(base)
    p = ttest_rel(v, base).pvalue if np.any(v != base) else 1.0
    print(f"{str(name):<{width}}{100 * v.mean():7.2f}{100 * (v.mean() - base.mean()):+7.2f}   p={p:.4f}", flush=True)


def print_paired(res: dict, base_key: str, width: int = 36) -> None:
    """Mean nDCG@10 of each entry, its difference from `base_key` and a paired t-test."""
    for k, v in res.items():
        paired_row(k, v, res[base_key], width)


def folds(groups: list, k: int = 5) -> list[np.ndarray]:
    """Query positions per fold, by group (the query's relevant meeting): a meeting's queries
    stay in one fold, so no setting is chosen on queries about the meetings it is tested on."""
    names = sorted(set(groups))
    order = np.random.default_rng(0).permutation(len(names))
    fold_of = {names[g]: i % k for i, g in enumerate(order)}
    return [np.flatnonzero([fold_of[g] == f for g in groups]) for f in range(k)]


def cross_validate(scores: dict, groups: list, k: int = 5) -> tuple[np.ndarray, list]:
    """scores {setting: per-query array}: per query the held-out score of the setting its fold's
    complement liked best, and the picks."""
    keys = list(scores)
    mat = np.stack([scores[s] for s in keys])
    n = mat.shape[1]
    out, picks = np.zeros(n), []
    for held in folds(groups, k):
        train = np.setdiff1d(np.arange(n), held)
        best = int(np.argmax(mat[:, train].mean(axis=1)))
        out[held] = mat[best, held]
        picks.append(keys[best])
    return out, picks


def minmax(x: np.ndarray) -> np.ndarray:
    """As the search stages normalise (a constant column: all 1)."""
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


def last_mix_rows(idx, queries: dict, option: str, key: str, depth: int = 50, each=None) -> dict:
    """For the window stage's last mixes (phrases, aspects): {query id: (ids, the score before the
    mix, the evidence's raw value `scores[key]` of each, whether the query gets the evidence)},
    each query searched with `option` 0 (the score before) and 1 (the raw evidence). `each(q)`
    runs after each query (the sweep's own search, progress)."""
    rows = {}
    for i, q in enumerate(sorted(queries)):
        opts = {"k": depth, "relevance": False, "passages": 0}
        before = idx.search(queries[q], **{option: 0}, **opts)
        raw = {h.id: h.scores.get(key) for h in idx.search(queries[q], **{option: 1}, **opts)}
        ids = [h.id for h in before]
        rows[q] = (ids, np.array([h.score for h in before]), np.array([raw.get(d) or 0.0 for d in ids]),
                   any(v is not None for v in raw.values()))
        if each is not None:
            each(q)
        if i % 200 == 0:
            print(f"{i} of {len(queries)} queries", flush=True)
    return rows


def last_mix(row: tuple, u: float) -> list[str]:
    """A `last_mix_rows` row ranked as the stage mixes its evidence at weight u."""
    ids, before, raw, gets = row
    final = (1 - u) * minmax(before) + u * minmax(raw) if u and gets else before
    return [ids[j] for j in np.lexsort((np.arange(len(ids)), -final))]
