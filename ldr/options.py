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
DEFAULT_SEARCH = {"fusion": "minmax", "weights": {"bm25": 1.0, "dense": 0.25, "sparse": 0.25}, "rrf_k": 60,
                  "depth": 1000, "rerank": None, "rerank_depth": 100,
                  "rerank_weight": 0.15}
