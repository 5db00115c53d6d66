"""Late interaction on qmsum-train: which token vectors to keep (dims), how much to pool, and
what weight the colbert leg gets in the default min-max fusion. Chooses the colbert defaults on
this data only.

    python bench/sweeps/colbert_sweep.py --runs EVAL_OUT/runs [--cache /tmp/colbert-vectors] [--every 1]

Every meeting is encoded once with ldr's ColbertEncoder (colbert-small, no pooling, all 384
dimensions; cached per document), then each variant is derived from those vectors exactly as
the component stores them (first `dims` dimensions, normalised, Ward pooling per window, int8).
The bm25/dense/sparse legs are the run files `ldr eval --bench beir` wrote for the default index
(depth 1000: every meeting), fused with ldr.search.fusion.fuse exactly as a search does."""
from __future__ import annotations

import sys
import argparse
import json
import time
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import DATA, load_run, ndcg10, print_paired, qrels as read_qrels, queries as read_queries, rank  # noqa: E402


def main() -> None:
    from ldr.components.colbert_store import quantise
    from ldr.encode.colbert import ColbertEncoder, ColbertSettings, normalise, pool
    from ldr.search.fusion import fuse

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True, help="the runs/ folder of `ldr eval --bench beir` on qmsum-train")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--cache", default="/tmp/colbert-vectors")
    ap.add_argument("--every", type=int, default=1, help="every n-th query (1: all)")
    ap.add_argument("--dims", default="128,384")
    ap.add_argument("--pools", default="1,2,3")
    ap.add_argument("--weights", default="0.25,0.5,1,2")
    a = ap.parse_args()
    data, cache = Path(a.data), Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    queries = {q["_id"]: q["text"] for q in read_queries(data)}
    qrels = read_qrels(data)
    legs = {s: load_run(Path(a.runs), s) for s in ("bm25", "dense", "sparse")}
    fused_run = load_run(Path(a.runs), "fused")
    enc = ColbertEncoder(ColbertSettings(model="colbert-small", pool_factor=1))
    t0, n_tok = time.perf_counter(), 0
    docs = {}
    for line in open(data / "corpus.jsonl"):
        r = json.loads(line)
        f = cache / f"{r['_id']}.npy"
        if not f.exists():
            text = f"{r['title']}\n{r['text']}" if r.get("title") else r["text"]
            v = enc.finish_documents(enc.prepare_documents([text]))[0]
            np.save(f, v.astype(np.float16))
            n_tok += len(v)
        docs[r["_id"]] = np.load(f).astype(np.float32)
    if n_tok:
        print(f"encoded {n_tok} tokens at {n_tok / (time.perf_counter() - t0):.0f} tokens/s")
    n_tokens = sum(len(v) for v in docs.values())
    qids = [q for q in qrels if q in fused_run][:: a.every]
    qvec = {q: enc.encode_query(queries[q]) for q in qids}
    default = {"bm25": 1.0, "dense": 0.25, "sparse": 0.25}
    res = {"fused (3 legs)": [ndcg10(rank(fused_run[q]), qrels[q]) for q in qids]}
    sizes = {}
    for dims in map(int, a.dims.split(",")):
        for factor in map(int, a.pools.split(",")):
            vs = {}
            for d, v in docs.items():
                v = normalise(v[:, :dims])
                v = np.concatenate([normalise(pool(v[i:i + 509], factor)) for i in range(0, len(v), 509)]) \
                    if factor > 1 else v
                c, s = quantise(v)
                vs[d] = c.astype(np.float32) * s.astype(np.float32)[:, None]
            n_vec = sum(len(x) for x in vs.values())
            sizes[(dims, factor)] = n_vec * (dims + 2) / n_tokens
            tag = f"d{dims} p{factor}"
            for q in qids:
                qn = normalise(qvec[q][:, :dims])
                cs = {d: float((qn @ v.T).max(1).sum()) for d, v in vs.items()}
                res.setdefault(f"colbert {tag} alone", []).append(ndcg10(rank(cs), qrels[q]))
                for w in map(float, a.weights.split(",")):
                    f = fuse({**{k: legs[k].get(q, {}) for k in legs}, "colbert": cs}, "minmax",
                             {**default, "colbert": w})
                    res.setdefault(f"fused + colbert {tag} w={w:g}", []).append(ndcg10(rank(f), qrels[q]))
            print(f"{tag}: {sizes[(dims, factor)]:.0f} bytes per document token", flush=True)
    print(f"\nqmsum-train, {len(qids)} queries, {len(docs)} meetings ({n_tokens} tokens); nDCG@10, paired t-test vs fused")
    print_paired(res, "fused (3 legs)", 36)

if __name__ == "__main__":
    main()
