"""Does the cross-encoder still add after the window stage? Its depth, passages per document and
weight, chosen by 5-fold cross-validation on qmsum-train (folds grouped by meeting), with its
latency per query on this machine.

    python bench/sweeps/rerank_after_windows.py --index QMSUM_INDEX [--every 6] [--out FILE.json]

--index: the qmsum-train index `ldr eval --bench beir` caches. A sample of meetings (every
`--every`-th, all their queries) keeps the CPU time bounded. Each query is searched once with
the default plan (the window stage last) and its top MAX_DEPTH hits' MAX_WINDOWS best passages
(the passages a `--rerank-model` search hands the cross-encoder); the cross-encoder scores every
(query, passage) pair once. The second stage is then formed here for each (depth, passages,
weight) as ldr/search/stages/rerank.py forms it: a document's score is the max over its first n
passages, mixed with the window stage's score by `mix`. The passages of a shallower depth are
taken from the deepest one's (the BM25 among windows differs a little): the setting chosen is
checked by searching with it (`online`), with its latency."""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import DATA, judged, ndcg10, paired_row  # noqa: E402
from stack_sweep import cross_validate  # noqa: E402

from ldr.search.stages.rerank import mix  # noqa: E402

MODEL = "ms-marco-minilm-l12"
DEPTHS = (10, 20)
WINDOWS = (1, 2, 4)
WEIGHTS = (0.1, 0.15, 0.25, 0.5, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--every", type=int, default=6, help="every N-th meeting's queries")
    ap.add_argument("--online", type=int, default=20, help="queries searched with the chosen setting (latency)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--record", action="store_true", help="write the GPU default into ldr/language_defaults.json")
    ap.add_argument("--from", dest="saved", default=None, help="record a saved --out instead of measuring")
    a = ap.parse_args()
    if a.saved:
        return record(json.loads(Path(a.saved).read_text()))

    import ldr
    from ldr.rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings

    qrels, qs = judged(Path(a.data))
    meetings = sorted({sorted(r)[0] for r in qrels.values()})
    keep = set(meetings[::a.every])
    qids = sorted(q for q in qs if sorted(qrels[q])[0] in keep)
    groups = [sorted(qrels[q])[0] for q in qids]
    index = ldr.open(a.index)
    ce = CrossEncoderReranker(CrossEncoderSettings(model=MODEL))
    print(f"qmsum-train: {len(qids)} queries of {len(keep)} meetings; cross-encoder {MODEL} ({ce.settings.backend})",
          flush=True)
    depth, n = max(DEPTHS), max(WINDOWS)
    per_q, pairs, ce_s = {}, 0, 0.0
    t_search = 0.0
    for i, q in enumerate(qids):
        t0 = time.perf_counter()
        hits = index.search(qs[q], k=depth, passages=n, rerank=False)
        t_search += time.perf_counter() - t0
        texts = [p.text for h in hits for p in h.passages]
        t0 = time.perf_counter()
        flat = ce.score(qs[q], texts, [[t] for t in texts], 1) if texts else np.zeros(0)
        ce_s += time.perf_counter() - t0
        pairs += len(texts)
        at, rows = 0, []
        for h in hits:
            rows.append((h.id, h.score, list(flat[at:at + len(h.passages)])))
            at += len(h.passages)
        per_q[q] = rows
        if i % 25 == 0:
            print(f"  {i}/{len(qids)}: {pairs} pairs, {1e3 * ce_s / max(pairs, 1):.1f} ms a pair", flush=True)
    ms_pair = 1e3 * ce_s / pairs
    scores = {("windows",): np.array([ndcg10([r[0] for r in per_q[q]], qrels[q]) for q in qids])}
    for d, w, mw in itertools.product(DEPTHS, WINDOWS, WEIGHTS):
        scores[(d, w, mw)] = np.array([ndcg10(reranked(per_q[q], d, w, mw), qrels[q]) for q in qids])
    base = scores[("windows",)]
    print(f"\nnDCG@10 against the window stage ({100 * base.mean():.2f}), paired t; "
          f"cross-encoder {ms_pair:.1f} ms a (query, passage) pair on this CPU")
    for key in sorted(scores, key=lambda k: -scores[k].mean())[:12]:
        if key != ("windows",):
            paired_row(f"depth {key[0]}, {key[1]} passages, weight {key[2]} (~{key[0] * key[1] * ms_pair / 1e3:.1f} s)",
                       scores[key], base, 58)
    held, picks = cross_validate(scores, groups)
    paired_row("5-fold CV (grouped by meeting), vs the window stage", held, base, 58)
    print("picks per fold:", picks)
    best = max((k for k in scores if k != ("windows",)), key=lambda k: scores[k].mean())
    online = check_online(index, qs, qrels, qids[:a.online], best)
    print(f"online, {a.online} queries, depth {best[0]}, {best[1]} passages, weight {best[2]}: "
          f"p50 {online['p50_s']:.2f} s a query against {online['windows_p50_s']:.3f} s without it; "
          f"nDCG@10 {online['ndcg10']:.2f} (offline {100 * scores[best][:a.online].mean():.2f})")
    from scipy.stats import ttest_rel
    out = {"queries": len(qids), "meetings": len(keep), "model": MODEL, "backend": ce.settings.backend,
           "ms_per_pair": ms_pair, "windows_ndcg10": float(base.mean()),
           "best": {"depth": best[0], "windows": best[1], "weight": best[2], "ndcg10": float(scores[best].mean()),
                    "p": float(ttest_rel(scores[best], base).pvalue)},
           "cv": {"held_out_ndcg10": float(held.mean()), "p": float(ttest_rel(held, base).pvalue)
                  if np.any(held != base) else 1.0, "picks": [list(p) for p in picks]},
           "online": online, "grid": {str(k): float(v.mean()) for k, v in scores.items()}}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    if a.record:
        record(out)


def record(out: dict) -> None:
    """English's GPU second stage: the best setting when choosing one beat the window stage held
    out (paired t, p < 0.05), else none; with the figures either way (a CPU runs none: seconds a
    query). `--from RESULTS.json` records a saved run."""
    from ldr import language_defaults

    table = json.loads(language_defaults.TABLE.read_text())
    held, base = out["cv"]["held_out_ndcg10"], out["windows_ndcg10"]
    adds = held > base and out["cv"]["p"] < 0.05
    b = out["best"]
    table["en"]["gpu_second_stage"] = {"rerank_model": out["model"], "rerank_depth": b["depth"],
                                       "rerank_windows": b["windows"], "rerank_weight": b["weight"]} if adds else None
    table["en"]["second_stage_measured"] = {
        "on": f"qmsum-train, {out['queries']} queries of {out['meetings']} meetings",
        "by": "bench/sweeps/rerank_after_windows.py (5-fold CV grouped by meeting)",
        "windows_ndcg10": round(100 * base, 2), "held_out_ndcg10": round(100 * held, 2), "p": round(out["cv"]["p"], 4),
        "best": b, "cpu_seconds_per_query": round(out["online"]["p50_s"], 2)}
    language_defaults.TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print("recorded in", language_defaults.TABLE, "(on a GPU by default)" if adds else "(off by default)")


def reranked(rows: list, depth: int, windows: int, weight: float) -> list[str]:
    """The order after the second stage at this setting (rows: the window stage's, best first)."""
    head, tail = rows[:depth], rows[depth:]
    ce = [max(r[2][:windows]) if r[2] else -np.inf for r in head]
    final = mix(ce, [r[1] for r in head], weight)
    order = sorted(range(len(head)), key=lambda i: (-final[i], head[i][0]))
    return [head[i][0] for i in order] + [r[0] for r in tail]


def check_online(index, qs, qrels, qids, best) -> dict:
    """The chosen setting searched for real: its nDCG@10 and latency, against the window stage's."""
    d, w, mw = best
    took, base, got = [], [], []
    for q in qids:
        t0 = time.perf_counter()
        hits = index.search(qs[q], k=10, passages=0, rerank_model=MODEL, rerank_depth=d, rerank_windows=w,
                            rerank_weight=mw)
        took.append(time.perf_counter() - t0)
        got.append(ndcg10([h.id for h in hits], qrels[q]))
        t0 = time.perf_counter()
        index.search(qs[q], k=10, passages=0, rerank=False)
        base.append(time.perf_counter() - t0)
    return {"p50_s": float(np.median(took)), "windows_p50_s": float(np.median(base)),
            "ndcg10": 100 * float(np.mean(got))}


if __name__ == "__main__":
    main()
