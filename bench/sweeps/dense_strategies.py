"""Quality of each long-document strategy: Acc@1 per length on synthetic passkey and nDCG@10 on a
BEIR folder (qmsum-train), for one dense model. Writes JSON, a Markdown table and a PNG.

    python bench/sweeps/dense_strategies.py --strategies truncate,pcw,maxp,gp,rp,pi --lengths 256,...,8192

Documents go through ldr's DenseEncoder exactly as at index time; scoring is the same inner
product / max-over-passages the FAISS component computes, done in numpy here so that one
loaded model serves every length.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ldr.encode.dense import DenseEncoder, DenseSettings
from ldr.eval.metrics import evaluate
from ldr.eval.synthetic import passkey

ROOT = Path(__file__).resolve().parents[2]


def run(encoder, corpus: dict[str, str], queries: dict[str, str], depth=100) -> dict[str, dict[str, float]]:
    ids = list(corpus)
    vecs, owner = encoder.encode_documents([corpus[i] for i in ids])
    q = encoder.encode_queries(list(queries.values()))
    sims = q @ vecs.T
    doc_scores = np.full((len(q), len(ids)), -np.inf, dtype=np.float32)
    for j in range(len(ids)):
        doc_scores[:, j] = sims[:, owner == j].max(axis=1)
    out = {}
    for qi, qid in enumerate(queries):
        top = np.argsort(-doc_scores[qi])[:depth]
        out[qid] = {ids[t]: float(doc_scores[qi, t]) for t in top}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--strategies", default="truncate,pcw,maxp,gp,rp,pi")
    ap.add_argument("--target-length", type=int, default=4096)
    ap.add_argument("--lengths", default="256,512,1024,2048,4096,8192")
    ap.add_argument("--beir", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--out", default=str(ROOT / "bench/results/dense_strategies"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in args.lengths.split(",")]
    task = passkey(lengths=lengths)
    from ldr.eval.beir import load_qrels, load_queries
    beir = Path(args.beir)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    for strat in args.strategies.split(","):
        key = strat if strat not in ("gp", "rp", "pi", "ntk", "selfextend") else f"{strat}-{args.target_length}"
        enc = DenseEncoder(DenseSettings(model=args.model, strategy=strat, target_length=args.target_length))
        res = {"passkey": {}, "seconds": {}}
        t0 = time.perf_counter()
        for L in lengths:
            corpus, queries, qrels = task.split(L)
            res["passkey"][L] = 100 * evaluate(qrels, run(enc, corpus, queries), ("acc@1",))["acc@1"]
        res["seconds"]["passkey"] = time.perf_counter() - t0
        res["passkey_avg"] = float(np.mean(list(res["passkey"].values())))
        if beir.exists():
            t0 = time.perf_counter()
            corpus = {}
            for line in open(beir / "corpus.jsonl", encoding="utf-8"):
                r = json.loads(line)
                corpus[r["_id"]] = (r["title"] + "\n" + r["text"]) if r.get("title") else r["text"]
            m = evaluate(load_qrels(beir), run(enc, corpus, load_queries(beir)), ("ndcg@10", "recall@100"))
            res["qmsum"] = {k: 100 * v for k, v in m.items()}
            res["seconds"]["qmsum"] = time.perf_counter() - t0
        results[key] = res
        print(key, json.dumps(res), flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    write_report(results, out)


def write_report(results: dict, out: Path) -> None:
    lengths = sorted({int(L) for r in results.values() for L in r["passkey"]})
    lines = ["| strategy | " + " | ".join(str(L) for L in lengths) + " | passkey avg | qmsum nDCG@10 | qmsum R@100 |",
             "|---" * (len(lengths) + 4) + "|"]
    for k, r in results.items():
        pk = [f"{r['passkey'].get(str(L), r['passkey'].get(L, float('nan'))):.0f}" for L in lengths]
        q = r.get("qmsum", {})
        lines.append(f"| {k} | " + " | ".join(pk) + f" | {r['passkey_avg']:.1f} | {q.get('ndcg@10', float('nan')):.1f} | "
                     f"{q.get('recall@100', float('nan')):.1f} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, r in results.items():
        ax.plot(lengths, [r["passkey"].get(str(L), r["passkey"].get(L)) for L in lengths], marker="o", label=k)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("passkey Acc@1 (%)")
    ax.set_title("Passkey retrieval by document strategy")
    ax.legend(fontsize=8)
    ax.grid(alpha=.3)
    fig.tight_layout()
    fig.savefig(out / "passkey.png", dpi=120)


if __name__ == "__main__":
    main()
