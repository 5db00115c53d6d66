"""Published numbers to print beside ldr's (the seed papers; nDCG@10 unless noted, Acc@1 for passkey/needle)."""

PUBLISHED = {
    "longembed": {
        "average": {"E5-Mistral+NTK 32k (7B), best": 75.3, "BGE-M3": 58.9, "Jina-v2": 58.2, "E5-Base-4k": 56.6,
                    "E5-RoPE+SelfExtend": 60.8},
        "passkey": {"E5-Mistral+NTK": 93.8, "E5-Base": 38.0},
        "needle": {"E5-Mistral+NTK": 66.8, "E5-Base": 28.5},
        "qmsum": {"E5-Mistral+NTK": 49.2, "mGTE": 43.0},
    },
    "loco": {
        "average": {"M2-BERT-32k (80M), best": 95.2, "BM25": 81.5, "E5-Mistral": 73.0},
        "qmsum": {"M2-BERT-32k": 93.7, "BM25": 78.7},
    },
    "mldr": {
        "average": {"mGTE dense+sparse → mGTE reranker, best": 73.8, "mGTE dense+sparse": 71.3, "BGE-M3 all": 65.0,
                    "Lucene BM25": 64.1},
    },
    "beir": {
        # shared/data/qmsum-train, measured with each peer used as its users use it
        "qmsum-train": {"Lucene BM25 (pyserini defaults)": 81.7, "bm25s defaults": 87.0,
                        "MiniLM truncate 256": 18.5, "MiniLM PCW": 38.6, "MiniLM MaxP": 55.6},
    },
}
