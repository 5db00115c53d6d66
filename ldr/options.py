"""Query-time options: one schema, defined once (see ldr/search/options.py for the typed
dataclass every interface derives from). This module holds what the storage side needs too
(an index records its search defaults at build time) and imports nothing from ldr."""

# Chosen by bench/fusion_sweep.py on qmsum-train, synthetic passkey and needle (bench/README.md):
# min-max fusion with BM25 weighted 4:1:1 was best on all three (held-out halves agree); the
# offline passage rescorer did not beat it, so it is available (`--rerank passage`) but off.
# A second stage's score is mixed with the fused one at 0.15 (bench/rerank_sweep.py on qmsum-train:
# the packaged ms-marco cross-encoder adds +1.3 nDCG@10 there, p = 0.02, and replacing the fused
# score loses 30 points; the passage rescorer is neutral at 0.15 and loses 0.6 alone). Reranking is
# off by default: on 2 CPU cores the cross-encoder costs ~5 s a query.
# The fused list's top 50 are then rescored by the BM25 of each one's best window (its dense
# passages, BM25 among the candidates' windows), mixed at 0.4 with the fused score (both min-max
# over those candidates): every fold of a 5-fold CV on qmsum-train grouped by meeting picks depth
# 50 and weight 0.4, held out +3.13 nDCG@10 over the fused list (88.43 → 91.56, p < 1e-4;
# bench/window_sweep.py), and needles that whole-document BM25 ranked second come back
# (bench/README.md, "the window stage").
DEFAULT_SEARCH = {"fusion": "minmax", "weights": {"bm25": 1.0, "dense": 0.25, "sparse": 0.25}, "rrf_k": 60,
                  "depth": 1000, "window_weight": 0.4, "window_depth": 50, "rerank": None, "rerank_depth": 100,
                  "rerank_weight": 0.15}
