"""Issue 59: would the hit's place in its result list close the held-out top-1 gaps?

Reads the per-hit features `bench/fit_calibration.py --collected FILE` wrote (each query's top 20
hits of the default search, with BM25's z-score and ratio to the index's best, cover, the dense
and sparse scores), adds features of the hit's place in its list, and fits the relevance
leave-one-dataset-out as fit_calibration does (logistic, each dataset weighted equally;
klexikon-de-dev only scored, never fitted on). Prints, per feature set and held-out dataset:
mean top-1 relevance minus top-1 accuracy / ECE / precision at 0.5 / right top-1 hits kept at 0.5.

    python bench/sweeps/calibration_rank_features.py collected.json
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/: fit_calibration
import fit_calibration as fc  # noqa: E402

NEVER_FITTED = "klexikon-de-dev"
FEATURES = {
    "z": lambda x: x["bm25.z"], "best": lambda x: x["bm25.best"], "cover": lambda x: x["cover"],
    "top": lambda x: x["list.top"],                  # the list's first hit
    "inv_rank": lambda x: x["list.inv_rank"],        # 1 / its rank in the list
    "dense_top": lambda x: x.get("dense.top", 0.0),  # the dense leg ranks it first among the list's hits
    "z_vs_top": lambda x: x["list.z_vs_top"],        # its z-score over the list's first hit's
    "strong": lambda x: np.log(x["list.strong"]),    # hits of the list within 80% of the best z-score
    "log_words": lambda x: np.log(max(x["words"], 1)),
    "margin": lambda x: x["list.margin"],            # its z-score minus the best other hit's
    "near": lambda x: np.log1p(x["list.near"]),      # other hits within 10% of its z-score
}
TRIED = [("z", "best", "cover"), ("z", "best", "cover", "dense_top"), ("z", "best", "cover", "log_words"),
         ("z", "best", "cover", "inv_rank"), ("z", "best", "cover", "top"), ("z", "best", "cover", "top", "z_vs_top"),
         ("z", "best", "cover", "top", "strong"), ("z", "best", "cover", "top", "dense_top"),
         ("z", "best", "cover", "margin"), ("z", "best", "cover", "top", "margin"), ("z", "best", "cover", "top", "near"),
         ("z", "best", "cover", "top", "margin", "near", "dense_top")]


def add_list_features(ds: dict) -> None:
    by_query = collections.defaultdict(list)
    for row in ds["rows"]:
        by_query[row[0]].append(row)
    for rows in by_query.values():
        first = min(rows, key=lambda r: r[1])[2]["bm25.z"]
        zs = [r[2]["bm25.z"] for r in rows]
        dense = [r[2].get("dense") for r in rows]
        for i, r in enumerate(rows):
            x, others = r[2], zs[:i] + zs[i + 1:]
            x["list.margin"] = x["bm25.z"] - max(others) if others else x["bm25.z"]
            x["list.near"] = sum(abs(o - x["bm25.z"]) < 0.1 * max(abs(x["bm25.z"]), 1.0) for o in others)
            x["list.top"], x["list.inv_rank"] = float(r[1] == 1), 1.0 / r[1]
            x["list.z_vs_top"] = x["bm25.z"] / first if first > 0 else 0.0
            x["list.strong"] = sum(z >= 0.8 * max(zs) for z in zs)
            if None not in dense:
                x["dense.top"] = float(x["dense"] == max(dense))


def _matrix(ds: dict, names: tuple) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([[FEATURES[n](r[2]) for n in names] for r in ds["rows"]]),
            np.array([r[3] for r in ds["rows"]], dtype=np.float64))


def _fit(sets: list[dict], names: tuple) -> np.ndarray:
    parts = [_matrix(ds, names) for ds in sets]
    sw = np.concatenate([np.full(len(y), 1.0 / ds["queries"]) for (_, y), ds in zip(parts, sets)])
    return fc.fit_logistic(np.vstack([X for X, _ in parts]), np.concatenate([y for _, y in parts]),
                           sw * len(sets) * 100)


def held_out(sets: list[dict], never: list[dict], names: tuple) -> dict:
    out = {}
    for ds in sets + never:
        w = _fit([o for o in sets if o is not ds], names)
        r = fc.scores(ds, fc.predict(w, _matrix(ds, names)[0]))
        gap = r["mean_top1_relevance"] - r["top1_accuracy"]
        ok = abs(gap) <= 0.10 and r["ece"] <= 0.05 and (r["at_0.5"]["precision"] or 0) >= 0.7 \
            and r["at_0.5"]["right_top1_kept"] >= 0.5
        out[ds["name"]] = {"gap": round(gap, 3), "ece": r["ece"], "precision_0.5": r["at_0.5"]["precision"],
                           "kept_0.5": r["at_0.5"]["right_top1_kept"], "meets": ok}
    return out


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text())
    for ds in data.values():
        add_list_features(ds)
    sets = [ds for name, ds in data.items() if name != NEVER_FITTED]
    never = [data[NEVER_FITTED]] if NEVER_FITTED in data else []
    names = [ds["name"] for ds in sets + never]
    print("| features | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for feats in TRIED:
        res = held_out(sets, never, feats)
        cells = [f"{'' if r['meets'] else '**'}{r['gap']:+.2f} / {r['ece']:.3f} / {r['precision_0.5']:.2f} / "
                 f"{r['kept_0.5']:.2f}{'' if r['meets'] else '**'}" for r in (res[n] for n in names)]
        print(f"| {' + '.join(feats)} | " + " | ".join(cells) + " |")
    # each dataset fitted on itself alone: what the features can say within one corpus
    print("\nin-sample (fitted and scored on the dataset itself):\n| features | " + " | ".join(names) + " |\n|---|"
          + "---|" * len(names))
    for feats in (TRIED[0], TRIED[-1]):
        cells = []
        for ds in sets + never:
            r = fc.scores(ds, fc.predict(_fit([ds], feats), _matrix(ds, feats)[0]))
            cells.append(f"{r['mean_top1_relevance'] - r['top1_accuracy']:+.2f} / {r['ece']:.3f} / "
                         f"{r['at_0.5']['precision']:.2f} / {r['at_0.5']['right_top1_kept']:.2f}")
        print(f"| {' + '.join(feats)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
