"""`ldr tune`: choose an index's search defaults (fusion method and weights, reranking) on qrels.

1. Each retriever runs once per query at the index's candidate depth (what hybrid search fuses).
2. Every fusion setting of a grid (rrf / minmax / zscore × weights in {0, ¼, ½, 1} per retriever,
   rrf k in {10, 60}) is fused offline from those runs by the fused stage's own functions
   (ldr/search/fusion.py) and scored per query; the best few, and the defaults, are scored again
   by searching with them (the whole plan: window stage, registered stages).
3. Reranking (none, the passage rescorer, a cross-encoder) at a few depths is scored with the real
   search pipeline for the fusion settings the previous step picked; each run also gives the
   scores of the reranker's score mixed with the fused one (`rerank_weight`), for several weights.
   `rerank_only` keeps the index's fusion and tunes only the reranking (a cross-encoder is slow:
   tune fusion on every query, then reranking on a sample with `max_queries`).
4. Held-out halves: the queries are split in two at random (seeded); a setting chosen on one half
   is scored on the other, so every query is scored by a choice made without it. The final
   setting is chosen on all queries and committed as the index's defaults (a new generation).
"""
from __future__ import annotations

import itertools
import logging
import random
from dataclasses import dataclass

import numpy as np

from .. import components as registry
from ..errors import ConfigError
from ..search import fusion
from ..stages import Stage
from ..search.options import ldr_default
from ..search.stages.base import Candidates

log = logging.getLogger(__name__)
GRID = (0.0, 0.25, 0.5, 1.0)
RRF_KS = (10, 60)


@dataclass
class TuneOptions:
    metric: str = "ndcg@10"
    seed: int = 0
    rerank_depths: tuple[int, ...] = (20, 100)     # () : never rerank
    rerank_model: str | None = None                # a cross-encoder to consider besides the passage rescorer
    rerank_weights: tuple[float, ...] = (1.0, 0.5, 0.25)   # the reranker's share of the final score
    rerank_only: bool = False                      # keep the index's fusion setting; tune only reranking
    max_queries: int | None = None
    shortlist: int = 3             # grid settings per half (and overall) scored again by searching with them
    stages: dict | None = None     # registered extra stages the searches run ({name: {setting: value}})
    progress: bool = True


def _reranks(setting: dict) -> bool:
    return bool(setting.get("rerank") or setting.get("rerank_model"))


def _key(setting: dict) -> tuple:
    w = setting.get("weights") or {}
    reranked = _reranks(setting)
    return (setting["fusion"], tuple(sorted(w.items())), setting.get("rrf_k", 60), setting.get("rerank"),
            setting.get("rerank_model"), setting.get("rerank_depth") if reranked else None,
            setting.get("rerank_weight", 1.0) if reranked else None)


def describe(setting: dict) -> str:
    w = setting.get("weights") or {}
    fusion = setting["fusion"] + (f" k={setting.get('rrf_k', 60)}" if setting["fusion"] == "rrf" else "")
    weights = "/".join(f"{n}={v:g}" for n, v in w.items())
    rr = setting.get("rerank_model") or setting.get("rerank")
    mixed = f" weight {setting['rerank_weight']:g}" if setting.get("rerank_weight", 1.0) < 1 else ""
    return f"{fusion} {weights}" + (f", rerank {rr} top {setting['rerank_depth']}{mixed}" if rr else ", no rerank")


class _Offline:
    """The retrievers' runs of each query as one score matrix, fused for many settings with the
    fused stage's own functions (ldr/search/fusion.py): a setting scores here as it searches."""

    def __init__(self, runs: dict[str, dict[str, dict[str, float]]], names: list[str], qids: list[str]):
        self.names = names
        self.q = {}
        for q in qids:
            keys, s = fusion.matrix([runs[n].get(q, {}) for n in names])
            order = np.argsort(keys, kind="stable") if keys else np.zeros(0, np.int64)
            docs = [keys[i] for i in order]          # sorted by id: the search's tie-break among equal scores
            self.q[q] = (docs, s[order] if len(keys) else s)

    def runs(self, method: str, k: int, weights: np.ndarray, depth: int) -> list[dict[str, dict[str, float]]]:
        """For each row of `weights` (settings × retrievers), the fused top-`depth` of every query
        (scores replaced by rank order, so ties cannot reorder them in the evaluator)."""
        out = [dict() for _ in range(len(weights))]
        for q, (docs, s) in self.q.items():
            if not docs:
                continue
            normed = fusion.columns(s, method, k)       # rows in id order: rrf ties by id, as a search
            ids = np.arange(len(docs))
            for c in range(len(weights)):
                fused = fusion.combine(normed, weights[c])
                top = np.lexsort((ids, -fused))[:depth]
                out[c][q] = {docs[i]: float(depth - r) for r, i in enumerate(top)}
        return out


def fuse_runs(runs: dict[str, dict[str, dict[str, float]]], setting: dict, qids, depth: int = 10
              ) -> dict[str, dict[str, float]]:
    """The fused top-`depth` of each query under one fusion setting (`fusion`, `weights`, `rrf_k`)
    from the retrievers' runs ({retriever: {qid: {doc: score}}}), as the search pipeline fuses
    them; scores are rank order. For evaluating a setting on queries whose runs are at hand."""
    names = list(runs)
    w = np.array([[setting["weights"][n] for n in names]])
    return _Offline(runs, names, list(qids)).runs(setting["fusion"], setting.get("rrf_k") or 60, w, depth)[0]


def _reweighted(result, weight: float, ids, tiebreak) -> list[str]:
    """A reranked search's hit ids as the search orders them with this rerank weight: its rerank
    stage's own combination of the reranker's scores (kept in the result) at another weight."""
    from dataclasses import replace

    stage = result.plan.stage(Stage.RERANKED.value)
    if stage is None or result.candidates.rescored is None:
        return [h.id for h in result]
    head, tail, scores, feats = result.candidates.rescored
    rows = replace(stage, weight=weight).combine(Candidates(result.query), head, tail, scores, feats, tiebreak)
    return [ids[d] for d, _, _ in rows[:len(result)]]


def _grid(names: list[str]) -> list[dict]:
    combos = set()
    for w in itertools.product(GRID, repeat=len(names)):
        if any(w):
            m = max(w)
            combos.add(tuple(round(x / m, 4) for x in w))    # scale does not change a ranking
    out = []
    for method in ("minmax", "zscore", "rrf"):
        for w in sorted(combos):
            for k in (RRF_KS if method == "rrf" else (60,)):
                out.append({"fusion": method, "weights": dict(zip(names, w)), "rrf_k": k})
    return out


def _mean(per_query: dict[str, float], qids) -> float:
    qs = [q for q in qids if q in per_query]
    return float(np.mean([per_query[q] for q in qs])) * 100 if qs else float("nan")


def _best(scores: dict, settings: dict, qs, default_key, plain_only: bool = False) -> dict:
    """The best setting on the queries `qs` (the defaults win ties); `plain_only`: without reranking."""
    keys = [k for k in scores if not (plain_only and _reranks(settings[k]))]
    return settings[max(keys, key=lambda k: (_mean(scores[k], qs), k == default_key))]


def _decide(scores: dict, settings: dict, halves: tuple, default_key) -> tuple:
    """(final setting, the settings chosen on each half, held-out per-query scores, rejected
    reranking or None). A setting chosen on one half is scored on the other. Reranking costs
    time at every query, so it is kept only when choosing it on one half also helps the other
    half more than choosing without it: on a small sample the best of many settings often wins
    by chance."""
    qids = sorted(halves[0] + halves[1])

    def held_out(plain_only: bool):
        picks = [_best(scores, settings, h, default_key, plain_only) for h in halves]
        held = {q: scores[_key(picks[0])][q] for q in halves[1]}
        held.update({q: scores[_key(picks[1])][q] for q in halves[0]})
        return picks, held

    picks, held = held_out(False)
    final = _best(scores, settings, qids, default_key)
    if _reranks(final):
        plain_picks, plain_held = held_out(True)
        if _mean(held, qids) <= _mean(plain_held, qids):
            rejected = {"setting": describe(final), "held_out": _mean(held, qids),
                        "held_out_without": _mean(plain_held, qids)}
            return _best(scores, settings, qids, default_key, True), plain_picks, plain_held, rejected
    return final, picks, held, None


class _Tuning:
    """One tuning run: the retrievers' runs, the scored settings and the queries' halves."""

    def __init__(self, index, queries: dict[str, str], qrels: dict, opts: TuneOptions, runs: dict | None):
        from .metrics import evaluate_per_query

        self.index, self.queries, self.opts = index, queries, opts
        qids = sorted(q for q in queries if any(int(r) > 0 for r in qrels.get(q, {}).values()))
        if opts.max_queries:
            qids = random.Random(opts.seed).sample(qids, min(opts.max_queries, len(qids)))
        if len(qids) < 4:
            raise ConfigError(f"tuning needs at least 4 queries with relevance judgements (found {len(qids)})")
        self.qids, self.qrels = qids, {q: qrels[q] for q in qids}
        self.cut = int(opts.metric.split("@")[1]) if "@" in opts.metric else 1000
        self.names = index.retriever_names
        d = index.search_defaults()
        self.defaults = d
        self.default = {"fusion": d["fusion"], "weights": {n: d["weights"][n] for n in self.names},
                        "rrf_k": d["rrf_k"], "rerank": d["rerank"], "rerank_model": d["rerank_model"],
                        "rerank_depth": d["rerank_depth"], "rerank_weight": d["rerank_weight"]}
        shuffled = qids[:]
        random.Random(opts.seed).shuffle(shuffled)
        self.halves = (sorted(shuffled[: len(shuffled) // 2]), sorted(shuffled[len(shuffled) // 2:]))
        self.scores: dict[tuple, dict[str, float]] = {}
        self.settings: dict[tuple, dict] = {}
        self.offline_only: set = set()       # settings scored on the fused list alone (the grid)
        self._evaluate = evaluate_per_query
        self.runs = self._retrieve(runs or {})

    def per_query(self, run) -> dict[str, float]:
        m = self.opts.metric
        return {q: v[m] for q, v in self._evaluate(self.qrels, run, (m,)).items()}

    def add(self, setting: dict, per_query: dict, offline: bool = False) -> None:
        self.scores[_key(setting)], self.settings[_key(setting)] = per_query, setting
        (self.offline_only.add if offline else self.offline_only.discard)(_key(setting))

    def _retrieve(self, given: dict) -> dict:
        """Each retriever's run at the index's candidate depth (what a hybrid search fuses)."""
        from tqdm.auto import tqdm

        depth = min(int(self.defaults["depth"]), len(self.index))
        bar = tqdm(total=len(self.names) * len(self.qids), desc="tune: retrieving", unit="query",
                   disable=not self.opts.progress, leave=False)
        runs = {}
        for n in self.names:
            if n in given:
                runs[n] = {q: given[n].get(q, {}) for q in self.qids}
                bar.update(len(self.qids))
                continue
            runs[n] = {}
            for qid, res in self.index.search_many({q: self.queries[q] for q in self.qids}, k=depth, mode=n, passages=0,
                                                   rerank=False):
                runs[n][qid] = {} if isinstance(res, Exception) else {h.id: h.score for h in res}
                bar.update(1)
        bar.close()
        return runs

    def grid(self) -> None:
        """Every fusion setting of the grid, fused offline by the fused stage's own functions."""
        from tqdm.auto import tqdm

        names = self.names
        if len(names) == 1:   # one retriever: nothing to fuse
            s = {"fusion": self.default["fusion"], "weights": {names[0]: 1.0}, "rrf_k": self.default["rrf_k"],
                 "rerank": None}
            self.add(s, self.per_query(self.runs[names[0]]), offline=True)
            return
        offline = _Offline(self.runs, names, self.qids)
        # --rerank-only: the index's own fusion is the only one
        grid = [{k: self.default[k] for k in ("fusion", "weights", "rrf_k")}] if self.opts.rerank_only else _grid(names)
        by_method: dict[tuple, list[dict]] = {}
        for s in grid:
            by_method.setdefault((s["fusion"], s.get("rrf_k", 60)), []).append(s)
        for (method, k), group in tqdm(by_method.items(), desc="tune: fusion grid", disable=not self.opts.progress,
                                       leave=False):
            w = np.array([[s["weights"][n] for n in names] for s in group])
            for s, run in zip(group, offline.runs(method, k, w, max(self.cut, 10))):
                self.add({**s, "rerank": None}, self.per_query(run), offline=True)

    def online(self, s: dict, weights=(None,)) -> list[dict[str, float]]:
        """Score a setting by searching with it: the whole plan (the window stage, any
        registered stage, reranking), once per rerank weight: a reranked run keeps the reranker's
        scores, and its rerank stage re-mixes them at the other weights without reranking again."""
        from tqdm.auto import tqdm

        from ..search.gather import CandidateOrder

        kw = {"fusion": s["fusion"], "weights": s["weights"], "rerank": s.get("rerank") or False,
              "rerank_model": s.get("rerank_model"), "rerank_depth": s.get("rerank_depth"),
              "rerank_weight": s.get("rerank_weight", 1.0), "stages": self.opts.stages, "passages": 0}
        if s["fusion"] == "rrf":
            kw["rrf_k"] = s.get("rrf_k", 60)
        cut = max(self.cut, 10)
        k = max(cut, s.get("rerank_depth") or 0) if _reranks(s) else cut
        runs = [{} for _ in weights]
        for qid, res in tqdm(self.index.search_many({q: self.queries[q] for q in self.qids}, k=k, **kw),
                             total=len(self.qids), desc=f"tune: {describe(s)}", disable=not self.opts.progress,
                             leave=False):
            hits = [] if isinstance(res, Exception) else list(res)
            for run, w in zip(runs, weights):
                order = [h.id for h in hits] if w is None or not hits else \
                    _reweighted(res, w, res.ids, CandidateOrder(res.ids))
                run[qid] = {d: float(len(order) - r) for r, d in enumerate(order[:cut])}
        return [self.per_query(run) for run in runs]

    def best(self, qs, plain_only: bool = False) -> dict:
        return _best(self.scores, self.settings, qs, _key(self.default), plain_only)

    def searched(self, shortlist: int) -> None:
        """The grid's best few (on each half and on all queries) and the defaults, scored again
        by searching with them: the choice is made on what a search with the setting returns."""
        keep = {_key(self.default)}
        for qs in (*self.halves, self.qids):
            ranked = sorted(self.offline_only, key=lambda k: -_mean(self.scores[k], qs))
            keep.update(ranked[:shortlist])
        for key in sorted(keep, key=str):
            s = self.settings.get(key, self.default)
            self.add(s, self.online(s)[0])
        for key in list(self.offline_only):     # the rest were judged on the fused list alone
            self.scores.pop(key)
            self.settings.pop(key)
        self.offline_only.clear()

    def rerankers(self) -> None:
        """Reranking, on the fusion settings chosen on each half and on all queries."""
        opts, names = self.opts, self.names
        found = []
        if opts.rerank_depths and any(registry.get(n).passage_features for n in names):
            found += [{"rerank": "passage", "rerank_depth": d} for d in opts.rerank_depths]
        if opts.rerank_model:
            found += [{"rerank": None, "rerank_model": opts.rerank_model, "rerank_depth": d}
                      for d in (opts.rerank_depths or (100,))]
        weights = sorted({1.0, *opts.rerank_weights}, reverse=True)
        bases = {_key(b): b for b in (self.best(self.halves[0]), self.best(self.halves[1]), self.best(self.qids))}
        for base in bases.values():
            for r in found:
                s = {**base, "rerank": None, "rerank_model": None, **r, "rerank_weight": 1.0}
                s["rerank_depth"] = min(s["rerank_depth"], len(self.index))
                if _key(s) in self.scores:
                    continue
                for w, sc in zip(weights, self.online(s, weights)):
                    self.add({**s, "rerank_weight": w}, sc)

    def report(self) -> dict:
        scores, settings, qids, halves = self.scores, self.settings, self.qids, self.halves
        dk = _key(self.default)
        final, chosen_halves, held, rejected = _decide(scores, settings, halves, dk)
        ranked = sorted(scores, key=lambda k: -_mean(scores[k], qids))
        return {
            "metric": self.opts.metric, "queries": len(qids), "seed": self.opts.seed,
            "default": self.default, "chosen": final,
            "held_out": {"default": _mean(scores[dk], qids), "tuned": _mean(held, qids),
                         "halves": [{"chosen_on": i, "setting": describe(chosen_halves[i]),
                                     "default": _mean(scores[dk], halves[1 - i]),
                                     "tuned": _mean(scores[_key(chosen_halves[i])], halves[1 - i])} for i in (0, 1)]},
            "full": {"default": _mean(scores[dk], qids), "chosen": _mean(scores[_key(final)], qids)},
            "candidates": [{"setting": describe(settings[k]), "score": _mean(scores[k], qids)} for k in ranked[:10]],
            "n_settings": len(scores), "n_grid": self.n_grid, "rerank_rejected": rejected,
        }


def tune(index, queries: dict[str, str], qrels: dict[str, dict[str, int]], opts: TuneOptions | None = None,
         runs: dict | None = None) -> dict:
    """Choose search defaults for `index` on (queries, qrels); nothing is committed here.
    `runs` ({retriever: {qid: {doc id: score}}} at the index's depth): the retrievers' runs when
    the caller has them already (cross-validation tunes many query subsets of one index).

    The fusion grid is scored on the fused lists (offline, by the fused stage's functions); its
    best `shortlist` settings per half and overall, the defaults and every reranking are then
    scored by searching with them (the whole plan: the window stage, registered stages, the
    second stage), and the choice is made among those.

    Returns {"chosen", "default", "held_out": {"default", "tuned", "halves"}, "full", "queries",
    "metric", "candidates", "n_settings", "n_grid"} (scores in percent)."""
    t = _Tuning(index, queries, qrels, opts or TuneOptions(), runs)
    t.grid()
    t.n_grid = len(t.scores)
    t.searched(t.opts.shortlist)
    t.rerankers()
    return t.report()


def as_search_defaults(chosen: dict, current: dict) -> dict:
    """The manifest's `search` entry with the tuned setting."""
    out = dict(current)
    out.update({"fusion": chosen["fusion"], "weights": dict(chosen["weights"]), "rrf_k": chosen.get("rrf_k", 60),
                "rerank": chosen.get("rerank"),
                "rerank_depth": chosen.get("rerank_depth") or out.get("rerank_depth") or ldr_default("rerank_depth"),
                "rerank_weight": chosen.get("rerank_weight", 1.0)})
    if chosen.get("rerank_model"):
        out["rerank_model"] = chosen["rerank_model"]
    else:
        out.pop("rerank_model", None)
    return out
