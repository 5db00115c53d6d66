"""Does evidence the default search does not already weigh tell a meeting from its siblings (issue
77)? Each is min-max mixed at weight w into the default's own top 10 on qmsum-train, w chosen by
5-fold CV grouped by relevant meeting:

- lexical: the idf-weighted share of the query's terms a candidate holds at all (`cover`); the
  idf of its rare query terms (df <= 8, `rare`); BM25 nearly binary in tf (k1 0.3); the idf of
  the query terms a candidate holds that most other candidates lack (`disc`);
- dense: each query sentence's best MaxP passage (MiniLM) in the candidate, summed (`sum`), as a
  z-score among the candidates (`z`), the sentences it wins (`wins`), the whole query's (`whole`);
- order: a summary tells its meeting in order; each query sentence's best window of 200 terms
  (overlapping by half, BM25-like term weights), then Kendall's tau between the sentences' order
  and their windows' (`order tau`), and the longest increasing run's share (`order run`); queries of
  3 sentences or more.

    python bench/sweeps/sibling_evidence.py --index IDX --data ../shared/data/qmsum-train
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import cross_validate, judged, minmax, ndcg10  # noqa: E402

WEIGHTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def lexical(qterms: Counter, ids: list[str], tf: dict, df: Counter, idf: dict, length: dict, avg: float) -> dict:
    n = len(tf)
    total = sum(idf.get(t, 0) for t in qterms) or 1.0
    rare = [t for t in qterms if df.get(t, n) <= 8]
    held = {d: {t for t in qterms if tf[d].get(t)} for d in ids}
    k1 = 0.3
    return {
        "cover": np.array([sum(idf.get(t, 0) for t in held[d]) / total for d in ids]),
        "rare": np.array([sum(idf[t] for t in rare if t in held[d]) for d in ids]),
        "bm25 k1 0.3": np.array([sum(c * idf.get(t, 0) * tf[d].get(t, 0) * (k1 + 1)
                                     / (tf[d].get(t, 0) + k1 * (0.25 + 0.75 * length[d] / avg))
                                     for t, c in qterms.items()) for d in ids]),
        "disc": np.array([sum(idf.get(t, 0) for t in held[d]
                              if sum(t in held[o] for o in ids if o != d) < (len(ids) - 1) / 2) for d in ids]),
    }


def dense(sent_vecs: np.ndarray, query_vec: np.ndarray, ids: list[str], passages: dict) -> dict:
    per = np.array([(sent_vecs @ passages[d].T).max(axis=1) for d in ids])     # (candidates, sentences)
    return {"dense sum": per.sum(1), "dense z": ((per - per.mean(0)) / (per.std(0) + 1e-6)).sum(1),
            "dense wins": (per == per.max(0, keepdims=True)).sum(1).astype(float),
            "dense whole": np.array([(passages[d] @ query_vec).max() for d in ids])}


def order(sentences: list[set], ids: list[str], windows: dict, idf: dict) -> dict:
    tau, run = np.zeros(len(ids)), np.zeros(len(ids))
    if len(sentences) < 3:
        return {"order tau": tau, "order run": run}
    for j, d in enumerate(ids):
        pos = [int(np.argmax([sum(idf.get(t, 0) * c.get(t, 0) / (c.get(t, 0) + 1.2) for t in s) for c in windows[d]]))
               for s in sentences]
        pairs = [np.sign(pos[b] - pos[a]) for a in range(len(pos)) for b in range(a + 1, len(pos))]
        tau[j] = sum(pairs) / max(1, sum(p != 0 for p in pairs))
        tails: list[int] = []
        for p in pos:
            k = bisect.bisect_right(tails, p)
            tails[k:k + 1] = [p]
        run[j] = len(tails) / len(pos)
    return {"order tau": tau, "order run": run}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True, type=Path)
    a = ap.parse_args()
    import ldr
    from ldr.components.analysis import Analyzer, text_analyzer
    from ldr.encode.dense import DenseSettings, load_dense
    from scipy import stats

    qrels, queries = judged(a.data)
    qids = sorted(queries)
    idx = ldr.open(a.index)
    runs = {q: [(h.id, h.score) for h in idx.search(queries[q], k=10, passages=0)] for q in qids}
    corpus = [json.loads(line) for line in open(a.data / "corpus.jsonl")]
    an = text_analyzer(Analyzer())
    tf = {d["_id"]: Counter(an.analyze(d["text"])) for d in corpus}
    df = Counter(t for c in tf.values() for t in c)
    idf = {t: math.log(1 + (len(tf) - n + 0.5) / (n + 0.5)) for t, n in df.items()}
    length = {d: sum(c.values()) for d, c in tf.items()}
    windows = {}
    for d in corpus:
        terms = an.analyze(d["text"])
        windows[d["_id"]] = [Counter(terms[i:i + 200]) for i in range(0, max(1, len(terms) - 100), 100)]
    avg = float(np.mean(list(length.values())))
    enc = load_dense(DenseSettings())
    vecs, owner = enc.encode_documents([d["text"] for d in corpus])
    rows = defaultdict(list)
    for r, o in enumerate(owner):
        rows[corpus[int(o)]["_id"]].append(r)
    passages = {d: vecs[r] for d, r in rows.items()}
    sentences = {q: [s for s in re.split(r"(?<=[.!?])\s+", queries[q]) if len(s.split()) >= 4] or [queries[q]]
                 for q in qids}
    flat = enc.encode_queries([s for q in qids for s in sentences[q]])
    whole = enc.encode_queries([queries[q] for q in qids])
    feats, at = [], 0
    for i, q in enumerate(qids):
        ids = [h[0] for h in runs[q]]
        s = flat[at:at + len(sentences[q])]
        at += len(sentences[q])
        feats.append({**lexical(Counter(an.analyze(queries[q])), ids, tf, df, idf, length, avg),
                      **dense(s, whole[i], ids, passages),
                      **order([set(an.analyze(x)) for x in sentences[q]], ids, windows, idf)})

    def scored(name: str | None, w: float):
        out, missed = [], 0
        for q, f in zip(qids, feats):
            ids, sc = [h[0] for h in runs[q]], np.array([h[1] for h in runs[q]])
            mixed = minmax(sc) + w * minmax(f[name]) if name else sc
            order = [ids[j] for j in np.argsort(-mixed, kind="stable")]
            out.append(ndcg10(order, qrels[q]))
            missed += order[0] not in qrels[q]
        return np.array(out), missed

    base, missed = scored(None, 0)
    groups = [sorted(qrels[q])[0] for q in qids]
    print(f"default {100 * base.mean():.2f}, top hit wrong {missed}")
    for name in feats[0]:
        cand = {w: scored(name, w)[0] for w in WEIGHTS}
        cv, picks = cross_validate(cand, groups)
        best = max(WEIGHTS, key=lambda w: cand[w].mean())
        print(f"{name:12s} best w {best}: {100 * cand[best].mean():.2f} ({scored(name, best)[1]} wrong); "
              f"5-fold CV {100 * cv.mean():.2f} ({100 * (cv - base).mean():+.2f}, p {stats.ttest_rel(cv, base).pvalue:.3f}; "
              f"picks {picks})")


if __name__ == "__main__":
    main()
