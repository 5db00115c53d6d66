"""Query-time options: one schema, defined once (see ldr/search/options.py for the typed
dataclass every interface derives from). This module holds what the storage side needs too
(an index records its search defaults at build time) and imports nothing from ldr."""

# Chosen by bench/fusion_sweep.py on qmsum-train, synthetic passkey and needle (bench/README.md):
# min-max fusion with BM25 weighted 4:1:1 was best on all three (held-out halves agree); the
# offline passage rescorer did not beat it, so it is available (`--rerank passage`) but off.
DEFAULT_SEARCH = {"fusion": "minmax", "weights": {"bm25": 1.0, "dense": 0.25, "sparse": 0.25}, "rrf_k": 60,
                  "depth": 1000, "rerank": None, "rerank_depth": 100,
                  "rerank_weight": 1.0}
