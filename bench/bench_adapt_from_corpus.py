"""Label-free adaptation of the dense leg (issue 77), as a user runs it, on a BEIR folder:

    ldr index DATA/corpus.jsonl -o BASE                       # the default index (or --index BASE)
    ldr train dense --from-corpus -i BASE -o MODEL            # pseudo-queries of BASE's documents only
    ldr index DATA/corpus.jsonl -o ADAPTED --dense MODEL      # the default build with the adapted model

then the dense leg and the default search of both indexes scored on DATA's queries and qrels
(nDCG@10, paired t-test). The training sees the documents' text only: no query, no judgement.
Prints a table row and writes JSON: the figures, the pseudo-queries kept, the time of each step
and the training's time per 100 documents.

    python bench/bench_adapt_from_corpus.py --data ../shared/data/qmsum-train --work /tmp/adapt [--index BASE]
        [--shapes "summaries,keyword sets,document keywords"] [--method whitening]

`--method whitening` runs `ldr train whitening -i BASE -o MODEL` in place of the fine-tuning (the
index's passage vectors whitened into a copy of its dense model; no pseudo-query); with `--apply`,
a copy of BASE takes the model in place (`ldr train whitening -i COPY -o MODEL --apply`: its stored
passages mapped, nothing re-encoded) instead of the re-index.
"""
from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def run(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t


def scores(index_path: str, data: Path, mode: str) -> dict[str, float]:
    import ldr
    from ldr.eval.beir import load_qrels, load_queries
    from ldr.eval.metrics import evaluate_per_query

    split = Path(glob.glob(str(data / "qrels" / "*.tsv"))[0]).stem
    queries, qrels = load_queries(data), load_qrels(data, split)
    qids = sorted(q for q in qrels if q in queries)
    opts = {} if mode == "default" else {"mode": mode}
    with ldr.open(index_path) as index:
        got = {q: ({} if isinstance(r, Exception) else {h.id: h.score for h in r})
               for q, r in index.search_many({q: queries[q] for q in qids}, k=10, passages=0, with_meta=False,
                                             **opts)}
    per = evaluate_per_query({q: qrels[q] for q in qids}, got, ("ndcg@10",))
    return {q: 100 * per[q]["ndcg@10"] for q in qids}


def main() -> None:
    from scipy import stats

    from ldr import open as ldr_open

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--index", default=None, help="the default index of DATA's corpus, built before")
    ap.add_argument("--queries", type=int, default=None, help="pseudo-queries (default: ldr's)")
    ap.add_argument("--shapes", default=None, help="the pseudo-queries' shapes (default: ldr's)")
    ap.add_argument("--method", choices=("pseudo-queries", "whitening"), default="pseudo-queries")
    ap.add_argument("--apply", action="store_true", help="whitening: applied to a copy of BASE, no re-index")
    a = ap.parse_args()
    if a.apply and a.method != "whitening":
        ap.error("--apply is --method whitening's")
    a.work.mkdir(parents=True, exist_ok=True)
    corpus = str(a.data / "corpus.jsonl")
    ldr_cli = [sys.executable, "-m", "ldr.cli"]
    took = {}
    base = a.index or str(a.work / "base")
    if not a.index:
        took["base index"] = run(ldr_cli + ["index", corpus, "-o", base, "-q"])
    model = a.work / "model"
    adapted = str(a.work / "adapted")
    if a.apply:
        import shutil
        shutil.copytree(base, adapted, symlinks=True)
        took["train --from-corpus"] = run(ldr_cli + ["train", "whitening", "-i", adapted, "-o", str(model), "--apply"])
    elif a.method == "whitening":
        took["train --from-corpus"] = run(ldr_cli + ["train", "whitening", "-i", base, "-o", str(model)])
    else:
        took["train --from-corpus"] = run(ldr_cli + ["train", "dense", "--from-corpus", "-i", base, "-o", str(model),
                                                     "-q"] + (["--queries", str(a.queries)] if a.queries else [])
                                          + (["--shapes", a.shapes] if a.shapes else []))
    card = json.loads((model / "ldr-train.json").read_text())
    if not a.apply:
        took["adapted index"] = run(ldr_cli + ["index", corpus, "-o", adapted, "--dense", str(model), "-q"])
    with ldr_open(base) as index:
        documents = len(index)
    out = {"data": str(a.data), "method": a.method, "documents": documents, "pseudo": card.get("pseudo"),
           "dev": card.get("dev"), "seconds": {k: round(v, 1) for k, v in took.items()},
           "train_s_per_100_docs": round(100 * took["train --from-corpus"] / documents, 1)}
    for mode in ("dense", "default"):
        before, after = scores(base, a.data, mode), scores(adapted, a.data, mode)
        q = sorted(before)
        x, y = np.array([before[i] for i in q]), np.array([after[i] for i in q])
        out[mode] = {"before": round(x.mean(), 2), "after": round(y.mean(), 2), "p": float(stats.ttest_rel(y, x).pvalue),
                     "better": int((y > x).sum()), "worse": int((y < x).sum())}
        print(f"{a.data.name} {mode}: {x.mean():.2f} -> {y.mean():.2f} (p {out[mode]['p']:.2g}; "
              f"{out[mode]['better']} better, {out[mode]['worse']} worse)", flush=True)
    print(f"training {took['train --from-corpus']:.1f} s for {documents} documents "
          f"({out['train_s_per_100_docs']:.1f} s per 100)" + ("; applied in place, nothing re-indexed" if a.apply
                                                               else f"; re-indexing {took['adapted index']:.0f} s"))
    (a.work / "adapt.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
