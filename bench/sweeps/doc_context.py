"""The document context of `ldr train whitening` (issue 77): each whitened passage vector mixed
with its document's mean direction at weight beta (`DenseSettings.context`), the dense leg's MaxP
scored on a BEIR set's judged queries. The set's documents and queries are encoded once by the
dense model (cached in --cache); the whitening is fitted on all its passages, as `ldr train
whitening` fits an index's; beta is chosen by 5-fold CV grouped by the relevant document's family
(a meeting's series: ES2002a-d one group), and every beta's mean is printed against the raw
vectors and the whitened ones without context.

    python bench/sweeps/doc_context.py --data ../shared/data/qmsum-train --cache /tmp/ctx [--model NAME]
"""
from __future__ import annotations

import argparse
import json
import pickle
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import cross_validate, judged, ndcg10, paired_row  # noqa: E402

BETAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0)


def encoded(data: Path, cache: Path, model: str | None) -> dict:
    """The documents' passage vectors (and owners) and the judged queries' vectors, cached."""
    from ldr.encode.dense import DenseSettings, load_dense

    path = cache / f"{data.name}-{(model or 'default').replace('/', '_')}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    enc = load_dense(DenseSettings(**({"model": model} if model else {})))
    docs = [json.loads(line) for line in open(data / "corpus.jsonl", encoding="utf-8")]
    vecs, owner = enc.encode_documents([(d.get("title", "") + "\n" + d["text"]).strip() for d in docs])
    qrels, queries = judged(data)
    qids = sorted(queries)
    out = {"ids": [d["_id"] for d in docs], "vecs": vecs, "owner": owner, "qids": qids,
           "qv": enc.encode_queries([queries[q] for q in qids])}
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(out))
    return out


def main() -> None:
    from ldr.encode.dense_core import with_context
    from ldr.train.whitening import fit

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--cache", required=True, type=Path)
    ap.add_argument("--model", default=None, help="dense model (default: ldr's for English; e5-small-multilingual "
                                                   "for German and Chinese)")
    a = ap.parse_args()
    d = encoded(a.data, a.cache, a.model)
    qrels, _ = judged(a.data)
    ids, owner, n = d["ids"], np.asarray(d["owner"]), len(d["ids"])
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)

    def scores(vecs: np.ndarray, queries: np.ndarray) -> np.ndarray:
        sims = queries @ vecs.T
        best = np.full((len(queries), n), -np.inf, dtype=np.float32)
        for j in range(n):              # MaxP: a document scores its best passage
            best[:, j] = sims[:, owner == j].max(axis=1)
        return np.array([ndcg10([ids[k] for k in np.argsort(-row)[:10]], qrels[q])
                         for row, q in zip(best, d["qids"])])

    mean, matrix = fit(d["vecs"])
    white_v, white_q = unit((d["vecs"] - mean) @ matrix), unit((d["qv"] - mean) @ matrix)
    res = {"raw vectors": scores(d["vecs"], d["qv"])}
    for beta in BETAS:
        res[f"whitened, context {beta}"] = scores(with_context(white_v, owner, n, beta) if beta else white_v, white_q)
    print(f"{a.data.name}: {len(d['vecs'])} passages of {n} documents, {len(d['qids'])} queries")
    for k, v in res.items():
        paired_row(k, v, res["raw vectors"])
    family = [re.sub(r"[a-d]$", "", sorted(qrels[q])[0]) for q in d["qids"]]
    grid = {b: res[f"whitened, context {b}"] for b in BETAS}
    held, picks = cross_validate(grid, family)
    paired_row(f"CV picks {picks}", held, res["raw vectors"], 0)


if __name__ == "__main__":
    main()
