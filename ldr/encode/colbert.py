"""Late interaction (ColBERT): one vector per token of the whole document, scored by MaxSim.

A document is cut into windows of the model's length ([CLS] [D] tokens [SEP]), every window is
encoded, and the vectors of its text tokens are kept: L2-normalised, optionally cut to their
first `dims` dimensions, pooled by clustering (Clavié et al. 2024: Ward clustering of a
window's vectors into n / pool_factor clusters, each kept as its normalised mean; factor 2 keeps
about all the quality) and stored as int8 with one scale per vector (ldr/components/colbert_store.py).
A query is [CLS] [Q] tokens [SEP], [MASK]-padded to `query_length` (ColBERT's query augmentation);
every one of its vectors counts: score = Σ_q max_d q·d.

Models: the packaged answerai-colbert-small-v1 backbone (`colbert-small`, int8 ONNX, run as it
is; it has no 384→128 projection, so `dims` chooses the vectors), any pre-exported ONNX folder,
or a Hugging Face / local checkpoint run by PyTorch, with its projection when it has one
(PyLate's `1_Dense` module or Stanford ColBERT's `linear.weight`).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..schema import setting
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .batching import SerialEncoder, batch_budget, budget_batches, token_ids, with_specials
from .chunking import char_span
from .models import loading, model_revision, pick_device, resolve

DEFAULT_COLBERT = "colbert-small"


@dataclass
class ColbertSettings:
    model: str = setting(DEFAULT_COLBERT, "--colbert", enables=True, cli_default="none",
                         help="Late-interaction (ColBERT) model: colbert-small (packaged, ldr[models]), a Hugging Face "
                              "name or a folder; its token vectors are kept and scored by MaxSim. `none`: no colbert "
                              "index.")
    # the first `dims` of each vector (None: all). 128 of colbert-small's 384: as good in the fusion
    # on qmsum-train, a third of the bytes (bench/README.md)
    dims: int | None = setting(128, "--colbert-dims", zero_none=True,
                               help="Keep the first N dimensions of each token vector (0: all).")
    # token pooling: a window's n vectors → n / factor (1: none)
    pool_factor: int = setting(2, "--colbert-pool", help="Token pooling factor (1: every token vector; 2 halves "
                                                         "storage and scoring).")
    doc_length: int | None = None     # tokens per window, specials included (default: the model's, ≤ 512)
    stride: int | None = None         # tokens between window starts (default: windows do not overlap)
    query_length: int = 32            # queries are [MASK]-padded to this many tokens
    max_query_tokens: int = 256       # longer queries keep their first tokens
    query_marker: str = "[unused0]"
    doc_marker: str = "[unused1]"
    batch_tokens: int | None = None       # None: by device (batching.batch_budget)
    trust_remote_code: bool = False
    device: str | None = setting(None, "--device", shared=True, help="cpu, cuda, cuda:1.")
    backend: str = "auto"             # an ONNX folder always runs on ONNX Runtime; else torch

    def __post_init__(self):
        if self.pool_factor < 1 or (self.dims is not None and self.dims < 1) or self.query_length < 1:
            raise ConfigError("colbert: pool_factor, dims and query_length must be positive")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("device")
        return d


def pool(vectors: np.ndarray, factor: int) -> np.ndarray:
    """A window's vectors clustered (Ward) into len/factor groups, each kept as its mean."""
    n = len(vectors)
    if factor <= 1 or n <= 2:
        return vectors
    from scipy.cluster.hierarchy import fcluster, linkage

    labels = fcluster(linkage(vectors.astype(np.float64), "ward"), max(1, n // factor), "maxclust")
    order = np.argsort(labels, kind="stable")
    bounds = np.flatnonzero(np.diff(labels[order])) + 1
    groups = np.split(order, bounds)
    return np.stack([vectors[g].mean(0) for g in groups]).astype(np.float32)


def normalise(x: np.ndarray) -> np.ndarray:
    return x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6, None)


def _projection(path: Path):
    """(W, b) of a checkpoint's token projection, or None: PyLate's 1_Dense module, or the
    `linear.weight` Stanford ColBERT keeps beside the encoder."""
    dense = path / "1_Dense"
    files = [dense / "model.safetensors", dense / "pytorch_model.bin"] if dense.is_dir() else []
    files += [path / "model.safetensors", path / "pytorch_model.bin"]
    for f in files:
        if not f.is_file():
            continue
        if f.suffix == ".safetensors":
            from safetensors.numpy import load_file
            state = load_file(str(f))
        else:
            import torch
            state = {k: v.numpy() for k, v in torch.load(f, map_location="cpu", weights_only=True).items()}
        key = "linear.weight" if "linear.weight" in state else None
        if key:
            return state[key].astype(np.float32), state.get("linear.bias")
    return None


class ColbertEncoder(SerialEncoder):
    """Token vectors of documents and queries (see the module docstring)."""

    def __init__(self, settings: ColbertSettings):
        super().__init__()
        from .runtime import OrtModel, onnx_folder

        self.settings = s = settings
        self.path, self.key = resolve(s.model)
        self.ort = self.model = self.proj = None
        self.device = "cpu"
        with loading(s.model, self.path):
            if onnx_folder(self.path):
                self.ort = OrtModel(Path(self.path))
                self.tokenizer = self.ort.tokenizer
                limit, self.backend = self.ort.meta["max_position_embeddings"], "onnx"
            else:
                from transformers import AutoModel, AutoTokenizer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                self.device = pick_device(s.device)
                self.tokenizer = AutoTokenizer.from_pretrained(self.path, trust_remote_code=s.trust_remote_code)
                self.model = AutoModel.from_pretrained(self.path, trust_remote_code=s.trust_remote_code).to(
                    self.device).eval()
                limit, self.backend = int(getattr(self.model.config, "max_position_embeddings", 512)), "torch"
                if os.path.isdir(self.path):
                    self.proj = _projection(Path(self.path))
        vocab = self.tokenizer.get_vocab()
        missing = [t for t in (s.query_marker, s.doc_marker, "[MASK]", "[CLS]", "[SEP]") if t not in vocab]
        if missing:
            raise ConfigError(f"colbert model {s.model}: its vocabulary has no {', '.join(missing)} "
                              "(set query_marker/doc_marker to the model's own marker tokens)")
        self.cls, self.sep, self.mask = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
        self.q_marker, self.d_marker = vocab[s.query_marker], vocab[s.doc_marker]
        self.pad_id = getattr(self.tokenizer, "pad_token_id", None) or 0
        self.window = min(s.doc_length or min(limit, 512), limit)
        if self.window < 8:
            raise ConfigError(f"colbert: a window of {self.window} tokens is too short")
        self.dim = self._width()

    def _width(self) -> int:
        width = self._forward([[self.cls, self.d_marker, self.sep]]).shape[-1]
        return min(self.settings.dims or width, width)

    # -- the model ----------------------------------------------------------------------------
    def _forward(self, pieces: list) -> np.ndarray:
        """(rows, longest, width) token vectors, projected when the checkpoint has a projection."""
        from .runtime import pad_np

        ids, mask = pad_np(pieces, self.pad_id)
        if self.ort is not None:
            h = self.ort.run(ids, mask)
        else:
            import torch
            with torch.inference_mode():
                h = self.model(input_ids=torch.as_tensor(ids, device=self.device),
                               attention_mask=torch.as_tensor(mask, device=self.device)).last_hidden_state
                h = h.float().cpu().numpy()
        if self.proj is not None:
            w, b = self.proj
            h = h @ w.T + (b if b is not None else 0)
        return h

    # -- documents ----------------------------------------------------------------------------
    def prepare_documents(self, texts: list[str], spans: bool = False):
        """Windows of every text ([CLS] [D] tokens [SEP]) and the text each belongs to; with
        `spans`, also the characters of its text each window covers ((-1, -1) when unknown)."""
        with self._lock:
            enc = token_ids(self.tokenizer, texts, spans=spans)
        room = self.window - 3
        step = min(self.settings.stride or room, room)
        pieces, owner, where = [], [], []
        for d, item in enumerate(enc):
            a, offsets = item if spans else (item, None)
            for s in range(0, max(len(a) - (room - step), 1), step):   # the last window reaches the end
                pieces.append(with_specials([self.cls, self.d_marker], a[s:s + room], [self.sep]))
                owner.append(d)
                if spans:
                    where.append(char_span(offsets, s, min(s + room, len(a))) if offsets is not None else (-1, -1))
        where_arr = np.asarray(where, dtype=np.int64).reshape(-1, 2) if spans else None
        return len(texts), pieces, np.asarray(owner, dtype=np.int64), where_arr

    def finish_documents(self, job, progress=None):
        """Per text: its pooled, normalised token vectors (n, dim) float32, windows in order. For
        a job prepared with spans, also per text its windows (m, 3) int64: [vectors the window
        kept, first character, end character], so a hit can show the window that matched."""
        n_texts, pieces, owner, where = job
        per_window: list = [None] * len(pieces)
        for rows in budget_batches([len(p) for p in pieces], batch_budget(self.settings.batch_tokens, self.device)):
            h = self._forward([pieces[r] for r in rows])
            for i, r in enumerate(rows):
                v = normalise(h[i, 2:len(pieces[r]) - 1, :self.dim])   # the text's tokens: no [CLS], [D], [SEP]
                per_window[r] = normalise(pool(v, self.settings.pool_factor))
            if progress is not None:
                progress(sum(len(pieces[r]) for r in rows))
        out, wins = [[] for _ in range(n_texts)], [[] for _ in range(n_texts)]
        for r, d in enumerate(owner.tolist()):
            out[d].append(per_window[r])
            if where is not None:
                wins[d].append((len(per_window[r]), *where[r].tolist()))
        vecs = [np.concatenate(v) if v else np.zeros((0, self.dim), np.float32) for v in out]
        if where is None:
            return vecs
        return vecs, [np.asarray(w, dtype=np.int64).reshape(-1, 3) for w in wins]

    # -- queries ------------------------------------------------------------------------------
    def encode_query(self, text: str) -> np.ndarray:
        """(tokens, dim) float32, normalised: [CLS] [Q] query [SEP] [MASK]…"""
        with self._lock:
            ids = token_ids(self.tokenizer, [text])[0][: self.settings.max_query_tokens]
        ids = ids[: self.window - 3]
        piece = [self.cls, self.q_marker, *ids.tolist(), self.sep]
        piece += [self.mask] * max(0, self.settings.query_length - len(piece))
        return normalise(self._forward([piece])[0, :, :self.dim]).astype(np.float32)

    def describe(self) -> dict:
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "settings": self.settings.to_dict(), "dim": self.dim, "window": self.window,
                "backend": {"name": self.backend, "int8": None}, "projection": self.proj is not None}


def load_colbert(settings: ColbertSettings) -> ColbertEncoder:
    return ColbertEncoder(settings)

