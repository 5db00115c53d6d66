"""The ridge of `ldr tune --relevance` (eval/relevance_fit.py: RIDGE, FEATURE_RIDGE), chosen on
manpages and qmsum-train: for each setting, the recalibration fitted on 10/20/40/80 judged queries
drawn at random (8 draws) and scored on the other queries (held-out ECE mean/worst, the precision
of held-out hits at p >= 0.8). Platt alone (no features) against Platt plus the estimate's
features, each under a ridge of (scale, features) pseudo-observations. The rows are cached.

    python bench/sweeps/relevance_ridge.py NAME IDX DATA     # e.g. manpages /tmp/idx-manpages ../manpages
"""
import sys, random, glob, pickle, numpy as np, os
from pathlib import Path
import ldr
from ldr.eval import relevance_fit as rf
from ldr.eval.beir import load_qrels, load_queries
name, idx, data = sys.argv[1], sys.argv[2], sys.argv[3]
cache = f"/tmp/relevance-rows-{name}.pkl"
if os.path.exists(cache):
    rows = pickle.load(open(cache, "rb"))
else:
    split = Path(glob.glob(f"{data}/qrels/*.tsv")[0]).stem
    queries, qrels = load_queries(Path(data)), load_qrels(Path(data), split)
    qids = sorted(q for q in qrels if q in queries)
    rows = rf.dominant(rf.collect(ldr.open(idx), queries, qrels, qids))
    pickle.dump(rows, open(cache, "wb"))
P, Y, Q, X = rows["p"], rows["y"], rows["q"], rows["x"]
print(name, rows["names"], len(P), Y.sum())
def fit(m, lam_ab, lam_f, feats):
    cols = [rf.logit(P[m]), np.ones(m.sum())] + ([X[m][:, j] for j in range(X.shape[1])] if feats else [])
    A = np.column_stack(cols); y = Y[m]
    sd = A.std(0); sd[:2] = 1; sd[sd == 0] = 1
    A = A / sd
    prior = np.zeros(A.shape[1]); prior[0] = 1
    L = np.diag([lam_ab, lam_ab] + [lam_f] * (A.shape[1] - 2))
    w = prior.copy()
    for _ in range(60):
        q = 1/(1+np.exp(-np.clip(A@w, -30, 30)))
        g = A.T@(q-y) + L@(w-prior); H = (A*(q*(1-q))[:, None]).T@A + L
        s = np.linalg.solve(H, g); w -= s
        if abs(s).max() < 1e-9: break
    return w / sd
def pred(w, m, feats):
    cols = [rf.logit(P[m]), np.ones(m.sum())] + ([X[m][:, j] for j in range(X.shape[1])] if feats else [])
    return 1/(1+np.exp(-np.clip(np.column_stack(cols)@w, -30, 30)))
qs = sorted(set(Q.tolist()))
for feats, lam_ab, lam_f in ((False, 1, 0), (False, 5, 0), (True, 1, 5), (True, 1, 20), (True, 5, 20), (True, 5, 50)):
    line = []
    for n in (10, 20, 40, 80):
        e, pr = [], []
        for seed in range(8):
            tr = set(random.Random(seed).sample(qs, n)); m = np.array([q in tr for q in Q])
            w = fit(m, lam_ab, lam_f, feats); p = pred(w, ~m, feats); y = Y[~m]
            e.append(rf.ece(p, y)); k = p >= 0.8; pr.append(y[k].mean() if k.any() else np.nan)
        line.append(f"{n}:{np.mean(e):.3f}/{np.max(e):.3f} p@.8 {np.nanmean(pr):.2f}")
    print(feats, lam_ab, lam_f, " | ".join(line))
