"""Metrics with trec_eval semantics (pytrec_eval), pure functions over {qid: {docid: x}}."""
from __future__ import annotations

import math

# ldr name → trec_eval measure
_MEASURES = {"ndcg@10": "ndcg_cut_10", "ndcg@1": "ndcg_cut_1", "recall@100": "recall_100",
             "recall@1000": "recall_1000", "recall@10": "recall_10", "mrr@10": "recip_rank", "map": "map"}


def _cut(run: dict[str, dict[str, float]], k: int) -> dict[str, dict[str, float]]:
    """The first k of each query in trec_eval's order: score descending, equal scores by
    document id descending (so a cut keeps the documents trec_eval itself ranks first)."""
    out = {}
    for qid, docs in run.items():
        top = sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
        out[qid] = dict(top)
    return out


def evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]],
             metrics=("ndcg@10", "recall@100", "acc@1", "mrr@10")) -> dict[str, float]:
    """Mean of each metric over the queries of `qrels` that have a relevant document (a query
    with no results scores 0; one with no relevant document does not count, as in trec_eval).

    acc@1 is nDCG@1 (the LongEmbed definition for single-relevant tasks); mrr@10 is trec_eval's
    reciprocal rank on the run cut at 10.
    """
    per_query = evaluate_per_query(qrels, run, metrics)
    n = len(per_query)
    return {m: (sum(q[m] for q in per_query.values()) / n if n else math.nan) for m in metrics}


def evaluate_per_query(qrels, run, metrics=("ndcg@10",)) -> dict[str, dict[str, float]]:
    import pytrec_eval

    qrels = {q: {d: int(r) for d, r in docs.items()} for q, docs in qrels.items()
             if any(int(r) > 0 for r in docs.values())}
    run = {q: {d: float(s) for d, s in run.get(q, {}).items()} for q in qrels}
    out = {q: {} for q in qrels}
    groups: dict[str, list[str]] = {}
    for m in metrics:
        if m == "acc@1":
            groups.setdefault("ndcg_cut_1@all", []).append(m)
        elif m == "mrr@10":
            groups.setdefault("recip_rank@10", []).append(m)
        elif m in _MEASURES:
            groups.setdefault(f"{_MEASURES[m]}@all", []).append(m)
        else:
            raise ValueError(f"unknown metric {m!r}; known: {', '.join(sorted(_MEASURES) + ['acc@1'])}")
    for key, names in groups.items():
        measure, cut = key.split("@")
        r = run if cut == "all" else _cut(run, int(cut))
        # trec_eval takes cut-offs as parameters: ndcg_cut.10 reports ndcg_cut_10
        param = measure.rsplit("_", 1)
        spec = f"{param[0]}.{param[1]}" if measure.startswith(("ndcg_cut", "recall")) else measure
        ev = pytrec_eval.RelevanceEvaluator(qrels, {spec})
        res = ev.evaluate({q: (docs if docs else {"__none__": 0.0}) for q, docs in r.items()})
        for q in qrels:
            val = res.get(q, {}).get(measure, 0.0)
            for name in names:
                out[q][name] = val
    return out
