"""A language's search defaults, chosen by 5-fold cross-validation on its development set:
fusion weights (which legs run), the window stage's depth, weight and window scorer (BM25 over
windows, the vector kinds' best-window similarity, or a mix).

    python bench/language_defaults.py --data ../shared/data/klexikon-de-dev --index KLEXIKON_INDEX \
        --language de --out bench/results/language_defaults_de.json
    python bench/language_defaults.py --data ../shared/data/qmsum-train --index QMSUM_INDEX \
        --language en --groups relevant --out bench/results/language_defaults_en.json

--index: the index `ldr eval --bench beir --data DATA` caches (built with ldr's defaults for that
language). Each query is searched once per (fusion weights, window depth) with the window
stage's evidence recorded (`window_weight` 1, `window_vectors` 0.5: the search keeps the BM25
and each vector kind's best window as scores); the stage's mix is then formed here for every
(weight, vectors) exactly as ldr/search/stages/windows.py forms it, so a setting scores here as it
searches (the chosen one is checked by searching with it: `online`). Folds group queries by their
relevant document (a meeting's queries stay in one fold). Each fold picks the setting best on the
other four; the held-out nDCG@10 is compared, paired, with today's default and the dense leg
alone. The setting best on all queries is what `--out` records (ldr/language_defaults.json
takes it, with where it came from)."""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from qmsum_eval import cross_validate, judged, ndcg10, paired_row  # noqa: E402

from ldr.search.stages.windows import Windows  # noqa: E402

DEPTHS = (20, 50, 100)
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
VECTORS = (0.0, 0.25, 0.5, 0.75, 1.0)
DENSE = (0.25, 0.5, 1.0, 2.0, 4.0)      # the dense leg's fusion weight, BM25 at 1 (sparse at its default)


def searched(index, text: str, weights: dict, depth: int) -> list[tuple]:
    """(id, fused score, best-window BM25, {vector kind: best-window similarity}) of the top `depth`."""
    hits = index.search(text, k=depth, weights=weights, window_weight=1.0, window_depth=depth, window_vectors=0.5,
                        rerank=False, passages=0)
    out = []
    for h in hits:
        vec = {k.split(".", 1)[1]: v for k, v in h.scores.items() if k.startswith("windows.") and k != "windows.best"}
        out.append((h.id, h.scores.get("fused", 0.0), h.scores.get("windows.best", 0.0), vec))
    return out


def ranking(cands: list[tuple], w: float, v: float, vec_weights: dict) -> list[str]:
    """The window stage's order at weight w, vectors v: its own evidence and mix
    (ldr/search/stages/windows.py); ties by id, as the index's id ranks."""
    stage = Windows(len(cands), w, v, "bm25", tuple(vec_weights.items()))
    best = {i: {"bm25": c[2], **c[3]} for i, c in enumerate(cands)}
    evidence, _ = stage.evidence(best, list(range(len(cands))))
    final = stage.mix(np.array([c[1] for c in cands]), evidence)
    return [cands[i][0] for i in sorted(range(len(cands)), key=lambda i: (-final[i], cands[i][0]))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from", dest="saved", default=None, help="record the choice of a saved --out instead of sweeping")
    ap.add_argument("--data")
    ap.add_argument("--index")
    ap.add_argument("--language", default=None, help="the language family these defaults are for (en, de, ...)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--record", action="store_true", help="write the chosen setting into ldr/language_defaults.json")
    ap.add_argument("--dense", default=None, help="comma-separated dense weights to try (default: 0.25..4)")
    a = ap.parse_args()
    if a.saved:
        return record(json.loads(Path(a.saved).read_text()))

    import ldr
    from ldr.search.options import index_defaults

    data = Path(a.data)
    qrels, qs = judged(data)
    qids = sorted(qs)
    groups = [sorted(qrels[q])[0] for q in qids]
    index = ldr.open(a.index)
    base, _ = index_defaults({}, index.manifest["components"])
    kinds = list(base.weights)
    lexical = "bm25" if "bm25" in kinds else None
    dense_ws = [float(x) for x in a.dense.split(",")] if a.dense else list(DENSE)
    if base.weights.get("dense") not in dense_ws:
        dense_ws.insert(0, base.weights["dense"])
    weight_sets = [dict(base.weights, dense=d) for d in dense_ws] if "dense" in kinds else [dict(base.weights)]
    print(f"{data.name}: {len(qids)} queries, {len(set(groups))} groups; kinds {kinds}; ldr's weights {base.weights}",
          flush=True)

    scores: dict[tuple, np.ndarray] = {}
    t0 = time.time()
    for ws, depth in itertools.product(weight_sets, DEPTHS):
        cands = {q: searched(index, qs[q], ws, depth) for q in qids}
        vec_weights = {k: ws[k] for k in kinds if k != lexical}
        wkey = tuple(sorted(ws.items()))
        for w, v in itertools.product(WEIGHTS, VECTORS):
            if w == 0 and (v > 0 or depth != DEPTHS[0]):
                continue             # the fused list: one setting per weights
            scores[(wkey, depth if w else 0, w, v if w else 0.0)] = np.array(
                [ndcg10(ranking(cands[q], w, v, vec_weights), qrels[q]) for q in qids])
        print(f"  weights {ws} depth {depth}: searched ({time.time() - t0:.0f} s)", flush=True)
    legs = {}
    for kind in kinds:
        legs[kind] = np.array([ndcg10([h.id for h in index.search(qs[q], k=10, mode=kind, passages=0)], qrels[q])
                               for q in qids])
    today = scores[(tuple(sorted(base.weights.items())), base.window_depth, base.window_weight, 0.0)]
    cv_sets = dict(scores)
    if "dense" in legs:
        cv_sets[("dense alone",)] = legs["dense"]

    print(f"\nnDCG@10 against today's default ({100 * today.mean():.2f}), paired t")
    for kind, v in legs.items():
        paired_row(f"{kind} alone", v, today, 58)
    ranked = sorted(scores, key=lambda k: -scores[k].mean())
    for key in ranked[:15]:
        paired_row(label(key), scores[key], today, 58)
    held, picks = cross_validate(cv_sets, groups)
    print()
    paired_row("5-fold CV (grouped by relevant document), vs today", held, today, 58)
    if "dense" in legs:
        paired_row("5-fold CV, vs the dense leg alone", held, legs["dense"], 58)
    print("picks per fold:", "; ".join(label(p) for p in picks))
    # today's default stays unless choosing by this grid beats it held out (paired t, p < 0.05)
    today_key = (tuple(sorted(base.weights.items())), base.window_depth, base.window_weight, 0.0)
    better = held.mean() > today.mean() and p_value(held, today) < 0.05
    chosen = max(cv_sets, key=lambda k: cv_sets[k].mean()) if better else today_key
    print("chosen:", label(chosen), f"{100 * cv_sets[chosen].mean():.2f}",
          "(best on all queries: choosing beat today held out)" if better else "(today's: choosing did not beat it)")
    models = {k: c["model"]["name"] for k, c in index.manifest["components"].items()
              if isinstance(c.get("model"), dict) and c["model"].get("name")}
    out = {"language": a.language, "data": data.name, "queries": len(qids), "index": str(a.index),
           "kinds": kinds, "models": models, "chosen": setting(chosen), "chosen_ndcg10": float(cv_sets[chosen].mean()),
           "today": {"ndcg10": float(today.mean())}, "legs": {k: float(v.mean()) for k, v in legs.items()},
           "cv": {"held_out_ndcg10": float(held.mean()), "picks": [setting(p) for p in picks],
                  "p_vs_today": p_value(held, today),
                  "p_vs_dense": p_value(held, legs["dense"]) if "dense" in legs else None},
           "kept_today": not better, "grid": {label(k): float(v.mean()) for k, v in cv_sets.items()}}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
        print("wrote", a.out)
    if a.record:
        record(out)


def record(out: dict) -> None:
    """The chosen setting as its language's defaults, with the data and figures behind it
    (`python bench/language_defaults.py --from RESULTS.json` records a saved run's choice)."""
    from ldr import language_defaults

    held_out = {"ndcg10": round(100 * out["cv"]["held_out_ndcg10"], 2), "today": round(100 * out["today"]["ndcg10"], 2),
                "chosen_on_all": round(100 * out["chosen_ndcg10"], 2),
                "p_vs_today": round(out["cv"]["p_vs_today"], 4)}
    if out["cv"].get("p_vs_dense") is not None:
        held_out.update(dense_alone=round(100 * out["legs"]["dense"], 2),
                        p_vs_dense_alone=round(out["cv"]["p_vs_dense"], 4))
    table = json.loads(language_defaults.TABLE.read_text()) if language_defaults.TABLE.exists() else {}
    table[out["language"]] = {**table.get(out["language"], {}), "chosen_on": out["data"], "queries": out["queries"],
                              "by": "bench/language_defaults.py (5-fold CV, folds by relevant document)",
                              "models": out["models"], "settings": out["chosen"], "held_out": held_out,
                              # held_out: choosing by the grid, scored on folds it did not see
                              "kept_today": out.get("kept_today", False)}
    language_defaults.TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print("recorded in", language_defaults.TABLE)


def setting(key: tuple) -> dict:
    """A grid key as search options."""
    if key == ("dense alone",):
        return {"mode": "dense"}
    weights, depth, w, v = key
    out = {"weights": dict(weights), "window_weight": w}
    if w:
        out.update(window_depth=depth, window_vectors=v)
    return out


def label(key: tuple) -> str:
    s = setting(key)
    if "mode" in s:
        return "dense alone"
    ws = "/".join(f"{k}={v:g}" for k, v in s["weights"].items())
    if not s["window_weight"]:
        return f"{ws}, fused"
    return f"{ws}, windows d{s['window_depth']} w{s['window_weight']:g} v{s['window_vectors']:g}"


def p_value(a, b) -> float:
    from scipy.stats import ttest_rel
    return float(ttest_rel(a, b).pvalue) if np.any(np.asarray(a) != np.asarray(b)) else 1.0


if __name__ == "__main__":
    main()
