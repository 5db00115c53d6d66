"""`ldr train whitening`: a label-free adaptation of the dense leg in seconds. The index's own
passage vectors are whitened (their mean taken out, their covariance made the identity, each
eigenvalue regularised by `eps` times their mean) and the transform is written into a copy of
the dense model as two more sentence-transformers modules, Dense then Normalize, after the
model's own Normalize. An index built with the copy (`ldr index CORPUS --dense MODEL`), its
`ldr add`s and its queries all run it, as they run any model with a Dense projection. The card
also asks those indexes for a document context (DenseSettings.context): each passage vector
mixed with its document's mean direction, which in whitened space is what the document is about.

Why: one corpus's MiniLM vectors crowd along the few directions all its passages share (a
meeting's small talk, a judgment's formulae), and cosine then weighs what passages share over
what tells them apart; whitening spreads them. Measured on the passages of each set's default
index, queries never seen (bench/README.md, "Second stages and adapted models")."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ..encode.models import TRAIN_CARD as CARD
from ..errors import ConfigError

EPS = 0.01              # eigenvalues + EPS x their mean: the smallest directions are mostly noise
# the document context the card asks its indexes for (DenseSettings.context): chosen on qmsum-train
# (0.6 of 0-2; 5-fold CV picks 0.6-0.8), legal and klexikon held out (bench/README.md)
CONTEXT = 0.6
MAX_VECTORS = 100_000   # passages fitted at most (a seeded sample beyond): 384² sums, not a memory bound


def index_vectors(index_path: Path, limit: int = MAX_VECTORS, seed: int = 0) -> tuple[np.ndarray, dict]:
    """(the passage vectors of the index's newest generation, a seeded sample of `limit` at most,
    read a segment at a time; its dense component's record), every shard's for a sharded index."""
    from ..components.faiss_store import load_vectors
    from ..index.cluster import is_cluster, read_cluster
    from ..index.manifest import read_manifest

    index_path = Path(index_path)
    roots = [index_path / s["path"] for s in read_cluster(index_path)["shards"]] if is_cluster(index_path) \
        else [index_path]
    segments, comp = [], None
    for root in roots:
        m = read_manifest(root)
        comp = m["components"].get("dense")
        if comp is None:
            raise ConfigError(f"{index_path} has no dense component to adapt (it has: "
                              f"{', '.join(m['components']) or 'none'})")
        segments += [(root / seg["path"] / seg["dense"]["path"], seg["dense"]) for seg in m["segments"]
                     if (seg.get("dense") or {}).get("vectors")]
    sizes = np.array([int(entry["vectors"]) for _, entry in segments], dtype=np.int64)
    total = int(sizes.sum())
    keep = np.sort(np.random.default_rng(seed).choice(total, limit, replace=False)) if total > limit else None
    parts, start = [], 0
    for (folder, entry), n in zip(segments, sizes):
        rows = None if keep is None else keep[(keep >= start) & (keep < start + n)] - start
        start += n
        if rows is not None and not len(rows):
            continue
        vectors = load_vectors(folder, entry, comp["dim"])
        parts.append(np.asarray(vectors if rows is None else vectors[rows], dtype=np.float32))
    return (np.concatenate(parts) if parts else np.zeros((0, comp["dim"]), np.float32)), comp


def fit(vectors: np.ndarray, eps: float = EPS, chunk: int = 16_384) -> tuple[np.ndarray, np.ndarray]:
    """(mean, matrix) with (v - mean) @ matrix whitened: the covariance summed in float64 a chunk
    at a time, its eigenvalues regularised by eps x their mean."""
    n, dim = vectors.shape
    if n < 2 * dim:
        raise ConfigError(f"whitening {dim}-dimensional vectors needs at least {2 * dim} passages; the index "
                          f"holds {n} (index more text, or keep the model as it is)")
    mean = vectors.mean(axis=0, dtype=np.float64)
    cov = np.zeros((dim, dim))
    for s in range(0, n, chunk):
        centred = vectors[s:s + chunk].astype(np.float64) - mean
        cov += centred.T @ centred
    values, vecs = np.linalg.eigh(cov / n)
    values = np.clip(values, 0, None)
    return mean.astype(np.float32), (vecs / np.sqrt(values + eps * values.mean())).astype(np.float32)


def write_model(base: Path, out: Path, mean: np.ndarray, matrix: np.ndarray, about: dict) -> None:
    """A copy of the sentence-transformers folder `base` with Dense (x - mean) @ matrix and
    Normalize after its modules; `about` (what was fitted on) in CARD, whose `base_name` keeps the
    language's measured search defaults on it as on a model `ldr train` fine-tuned."""
    from safetensors.numpy import save_file

    try:
        modules = json.loads((base / "modules.json").read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{base} is not a sentence-transformers model folder ({e})") from None
    if not isinstance(modules, list) or not modules or not all(isinstance(m, dict) for m in modules):
        raise ConfigError(f"{base}/modules.json lists no module")
    # links stay links: nothing outside the folder is read to copy it
    shutil.copytree(base, out, symlinks=True, ignore=shutil.ignore_patterns(".git*", "onnx", "*.onnx"))
    n = len(modules)
    if str(modules[-1].get("type", "")).rsplit(".", 1)[-1] != "Normalize":
        # the index holds unit vectors whatever the folder ends in (ldr normalises): so does the fit
        (out / f"{n}_Normalize").mkdir()
        modules.append({"idx": n, "name": str(n), "path": f"{n}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        n += 1
    dim = matrix.shape[0]
    dense = out / f"{n}_Dense"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps({"in_features": dim, "out_features": matrix.shape[1],
                                                   "bias": True,
                                                   "activation_function": "torch.nn.modules.linear.Identity"}))
    save_file({"linear.weight": np.ascontiguousarray(matrix.T), "linear.bias": -(mean @ matrix)},
              str(dense / "model.safetensors"))
    (out / f"{n + 1}_Normalize").mkdir()
    modules += [{"idx": n, "name": str(n), "path": dense.name, "type": "sentence_transformers.models.Dense"},
                {"idx": n + 1, "name": str(n + 1), "path": f"{n + 1}_Normalize",
                 "type": "sentence_transformers.models.Normalize"}]
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / CARD).write_text(json.dumps(about, indent=2))


class PassageMap:
    """A stored passage vector as the adapted model gives it: the model's vector (what the index
    holds) through (v - mean) @ matrix, normalised, then mixed with its document's mean direction
    at `context`. (The plain bf16 engine's head computes the same in float32: plain_bert.LinearHead.)"""

    def __init__(self, mean: np.ndarray, matrix: np.ndarray, context: float):
        self.mean, self.matrix, self.context = mean.astype(np.float64), matrix.astype(np.float64), context

    def __call__(self, vectors: np.ndarray, owner: np.ndarray) -> np.ndarray:
        from ..encode.dense_core import with_context

        out = np.empty((len(vectors), self.matrix.shape[1]), np.float32)
        for s in range(0, len(vectors), 65_536):       # float64 a block at a time, not a copy of all
            block = (np.asarray(vectors[s:s + 65_536], np.float64) - self.mean) @ self.matrix
            out[s:s + 65_536] = block / np.linalg.norm(block, axis=1, keepdims=True).clip(1e-12)
        if not self.context:
            return out
        first, docs = np.unique(owner, return_inverse=True)
        return with_context(out, docs.reshape(-1), len(first), self.context)


def apply(index_path: Path, model: Path, mean: np.ndarray, matrix: np.ndarray, context: float, comp: dict) -> dict:
    """Commit the index's passages as `model` (the adapted copy) gives them, nothing re-encoded: one
    merge that maps every stored vector (PassageMap) and records the model, so that its queries
    and `ldr add`s run the adapted model too. Returns the merge's result."""
    from ..encode.dense import DenseSettings, load_dense
    from ..encode.models import model_settings
    from ..index.cluster import is_cluster

    settings = model_settings(comp, DenseSettings, False, None, where=str(index_path))
    settings.model, settings.context = str(model.resolve()), context
    # the record a build with the model would write (its engine: the one the index's passages had)
    entry = {**{k: v for k, v in comp.items() if k != "codebook"}, "model": load_dense(settings).describe()}
    if is_cluster(index_path):
        from ..index.cluster_writer import ClusterWriter as Writer
    else:
        from ..index.writer import IndexWriter as Writer
    with Writer(index_path) as w:
        return w.merge(1, rewrite={"dense": (entry, PassageMap(mean, matrix, context))})


def whiten(index_path: str | Path, out: str | Path, eps: float = EPS, limit: int = MAX_VECTORS,
           seed: int = 0, context: float = CONTEXT, in_place: bool = False) -> dict:
    """Fit the whitening of the index's passage vectors and write the adapted model to `out`;
    returns what was fitted (also in the model's CARD). `in_place`: then commit the index's
    passages as the model gives them (`apply`), its result under "applied"."""
    from ..encode.models import resolve

    index_path, out = Path(index_path), Path(out)
    if not 0 <= context <= 16:
        raise ConfigError(f"a document context of {context} is out of range: a weight from 0 to 16")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and is not empty: choose a new folder for the model")
    vectors, comp = index_vectors(index_path, limit, seed)
    settings = comp["model"].get("settings", {})
    if settings.get("strategy", "maxp") != "maxp":
        raise ConfigError("whitening is fitted on MaxP passage vectors: the index's dense strategy is "
                          f"{settings.get('strategy')}")
    if settings.get("dim"):
        raise ConfigError(f"the index's passage vectors are cut to {settings['dim']} dimensions (--dim): whitening is "
                          "fitted on the model's whole vectors; fit on an index built without --dim")
    if settings.get("context"):     # queries are never mixed: a fit on mixed passages would not fit them
        raise ConfigError(f"the index's passage vectors are mixed with their documents' means (document context "
                          f"{settings['context']}): fit on an index built with --doc-context 0")
    mean, matrix = fit(vectors, eps)
    # the model as the index's searches load it (its recorded settings), not a path copied blindly
    base, _ = resolve(settings.get("model") or comp["model"]["name"])
    name = comp["model"].get("trained_from") or comp["model"]["name"]
    about = {"adaptation": "whitening", "index": str(index_path.resolve()), "base_name": name,
             "base_model": str(base), "passages": int(len(vectors)), "eps": eps, "seed": seed,
             "doc_context": context}
    # written beside, then renamed: a failed write leaves no half a model where `out` is asked
    work = out.parent / f".{out.name}.writing-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        write_model(Path(base), work, mean, matrix, about)
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if in_place:
        return {**about, "applied": apply(index_path, out, mean, matrix, context, comp)}
    return about
