"""Position-bias probe ("Dwell in the Beginning"): where in a long document does an encoder look?

(1) Window similarity: split each document into 10 equal token windows; plot the mean cosine
    between the document representation and each window's embedding (for multi-vector maxp, the
    best passage's cosine). A flat curve means every part of the document is represented.
(2) Moved needle: personalized-passkey documents of one length with the pass-key sentence at
    evenly spaced depths; Acc@1 per depth when retrieving among the documents of that depth.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..corpus import IngestReport, iter_corpus
from ..encode.dense import DenseEncoder, DenseSettings
from .synthetic import _names, passkey_document


def window_similarity(enc: DenseEncoder, window_enc: DenseEncoder, texts: list[str], n_windows: int = 10) -> np.ndarray:
    """(n_windows,) mean over documents of cos(document representation, window embedding)."""
    sims = []
    for text in tqdm(texts, desc="window similarity", leave=False):
        ids = enc.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        if len(ids) < n_windows * 8:
            continue
        bounds = np.linspace(0, len(ids), n_windows + 1).astype(int)
        windows = [enc.tokenizer.decode(ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        wv, wo = window_enc.encode_documents(windows)            # pcw: the whole window's content
        dv, _ = enc.encode_documents([text])
        sims.append((wv @ dv.T).max(axis=1))                      # max over passages for maxp
    return np.mean(sims, axis=0) if sims else np.full(n_windows, np.nan)


def moved_needle(enc: DenseEncoder, length: int, depths: list[float], n_docs: int = 50, seed: int = 0) -> list[float]:
    """Acc@1 per depth: n_docs passkey documents per depth, each query must find its own."""
    names = _names(n_docs, seed + length)
    accs = []
    for depth in tqdm(depths, desc="moved needle", leave=False):
        rng = random.Random(f"probe-{seed}-{length}")
        keys = [rng.randint(10000, 99999) for _ in names]
        docs = [passkey_document(n, k, length, rng, depth=depth) for n, k in zip(names, keys)]
        vecs, owner = enc.encode_documents(docs)
        q = enc.encode_queries([f"what is the passkey for {n}?" for n in names])
        sims = q @ vecs.T
        best = np.full((len(names), len(docs)), -np.inf)
        for j in range(len(docs)):
            best[:, j] = sims[:, owner == j].max(axis=1)
        accs.append(float(100 * np.mean(best.argmax(axis=1) == np.arange(len(names)))))
    return accs


def run_probe(corpus: str, out: Path, model: str, strategies: list[str], target_length: int, max_docs: int,
              needle_length: int, n_depths: int = 10, n_needle_docs: int = 50, device: str | None = None,
              **settings) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    report = IngestReport()
    texts = []
    for doc in iter_corpus(corpus, report):
        texts.append(doc.text)
        if len(texts) >= max_docs:
            break
    depths = [i / (n_depths - 1) for i in range(n_depths)]
    window_enc = DenseEncoder(DenseSettings(model=model, strategy="pcw", device=device))
    result = {"corpus": str(corpus), "documents": len(texts), "model": model, "needle_length": needle_length,
              "depths": depths, "strategies": {}}
    for strat in strategies:
        enc = DenseEncoder(DenseSettings(model=model, strategy=strat, target_length=target_length, device=device,
                                         **settings))
        ws = window_similarity(enc, window_enc, texts)
        mn = moved_needle(enc, needle_length, depths, n_needle_docs)
        result["strategies"][strat] = {"window_similarity": [round(float(x), 4) for x in ws],
                                       "needle_acc_by_depth": mn, "extension": enc.ext_info}
    (out / "probe.json").write_text(json.dumps(result, indent=2))
    plot_probe(result, out / "probe.png")
    return result


def table(result: dict) -> str:
    lines = []
    n = len(next(iter(result["strategies"].values()))["window_similarity"])
    lines.append("window similarity (mean cosine, document vs each tenth of it)")
    lines.append(f"{'strategy':<14}" + "".join(f"{f'w{i + 1}':>7}" for i in range(n)))
    for s, r in result["strategies"].items():
        lines.append(f"{s:<14}" + "".join(f"{x:>7.3f}" for x in r["window_similarity"]))
    lines.append("")
    lines.append(f"moved needle: passkey Acc@1 by depth at {result['needle_length']} tokens")
    lines.append(f"{'strategy':<14}" + "".join(f"{f'{d:.0%}':>7}" for d in result["depths"]))
    for s, r in result["strategies"].items():
        lines.append(f"{s:<14}" + "".join(f"{x:>7.0f}" for x in r["needle_acc_by_depth"]))
    return "\n".join(lines)


def plot_probe(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for s, r in result["strategies"].items():
        ws = r["window_similarity"]
        a.plot(range(1, len(ws) + 1), ws, marker="o", label=s)
        b.plot([100 * d for d in result["depths"]], r["needle_acc_by_depth"], marker="o", label=s)
    a.set_xlabel("window (tenth of the document)")
    a.set_ylabel("cosine(document, window)")
    a.set_title(f"Where the embedding looks ({result['documents']} docs)")
    b.set_xlabel("needle depth (% of document)")
    b.set_ylabel("passkey Acc@1 (%)")
    b.set_ylim(-2, 102)
    b.set_title(f"Moved needle at {result['needle_length']} tokens")
    for ax in (a, b):
        ax.grid(alpha=.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Position bias of {result['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
