"""Learned sparse term weights over the model vocabulary → scipy CSR.

Two families:
- `splade`: an MLM head; w_t = max over tokens of log1p(relu(logit_t)) (SPLADE max pooling).
- `head` (mGTE / BGE-M3 style): a linear head on token states, w = relu(W·h) per token, the
  maximum kept when a token id repeats; the score of a pair is Σ over shared terms w_q·w_d.
Long documents are encoded in windows of the model's length; a term keeps its maximum weight
over all windows.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..schema import setting
from pathlib import Path

import numpy as np

from .. import npy
from ..errors import ConfigError, ModelError
from .batching import (SerialEncoder, budget_batches, fixed_shapes, pad, shape_groups, special_tokens, token_ids,
                       with_specials)
from .mlm_head import head_max, head_max_torch, split_mlm_head
from .models import DEFAULT_SPARSE, loading, model_revision, pick_device, resolve
from .blas_threads import one_blas_thread
from .bf16_attention import use_windowed_attention
from .runtime import bf16_context, choose, with_fallback

KINDS = ("splade", "head")
# a query is weighed over the index's terms (query_terms' `within`) by a projection of those columns
# alone when they are fewer than this share of the vocabulary (else: all, then kept within)
NARROW_SHARE = 0.8


@dataclass
class SparseSettings:
    model: str = setting(DEFAULT_SPARSE, "--sparse", enables=True, cli_default="auto",
                         help="Learned-sparse model (packaged name, HF name or folder); `none` for no sparse index; "
                              "auto: splade-tiny for English, none otherwise (an English vocabulary).")
    kind: str = setting("splade", "--sparse-kind", choices=("splade", "head"),
                        help="splade: MLM head; head: linear term-weight head (mGTE/BGE-M3 style).")
    head: str | None = setting(None, "--sparse-head",
                               help="kind=head: the head weights (default MODEL/sparse_linear.pt).")
    max_length: int | None = None    # window; default the model's position count
    # keep the k heaviest terms of a document (None: all) per "document", or per "window" (the cap
    # grows with length). On qmsum-train per window lifts the sparse stage but lowers the default
    # fusion (it becomes more like BM25), so per document stays the default (bench/README.md)
    top_k: int | None = setting(256, "--sparse-top-k", zero_none=True,
                                help="Keep the k heaviest terms of a document (0: all), see --sparse-top-k-per.")
    top_k_per: str = setting("document", "--sparse-top-k-per", choices=("document", "window"),
                             help="Apply --sparse-top-k per document, or per window of it (the cap grows with length).")
    threshold: float = setting(0.0, "--sparse-threshold", help="Drop term weights at or below this.")
    batch_tokens: int = 4096
    device: str | None = setting(None, "--device", shared=True, help="cpu, cuda, cuda:1.")
    # auto | torch | onnx | onnx-int8 (an index records the one it used)
    backend: str = setting("auto", "--backend", shared=True, help="The models' engine.")

    def __post_init__(self):
        if self.top_k_per not in ("document", "window"):
            raise ConfigError(f"--sparse-top-k-per must be document or window (got {self.top_k_per!r})")
        if self.kind not in KINDS:
            raise ConfigError(f"unknown sparse model kind {self.kind!r}; choose one of {', '.join(KINDS)}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("device")
        return d


def _load_head(path: Path, hidden: int):
    import torch

    if not path.is_file():
        raise ModelError(f"sparse head {path} not found; give --sparse-head pointing at the model's sparse_linear.pt")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    layer = torch.nn.Linear(hidden, 1)
    state = {k.rsplit(".", 1)[-1]: v for k, v in state.items()}
    try:
        layer.load_state_dict(state)
    except RuntimeError as e:
        raise ModelError(f"{path} is not a linear head for hidden size {hidden}: {e}") from None
    return layer


def load_sparse(settings: SparseSettings | None = None):
    """The sparse encoder for `settings` on the backend they ask for (auto: see runtime.choose)."""
    s = settings or SparseSettings()
    return with_fallback(s, sparse_engine(s), OnnxSparseEncoder, SparseEncoder)


def sparse_engine(s: SparseSettings) -> str:
    """The engine `s` runs on here (its `auto` resolved for this machine), nothing loaded."""
    local = os.path.isdir(resolve(s.model)[0])
    # auto: bf16 on CPUs with AMX or AVX-512 BF16, as the dense model: faster, with quality held on qmsum-train and
    # passkey/needle (bench/README.md, "SPLADE in bf16")
    return choose(s.backend, s.device, s.kind == "splade" and local,
                  "a sparse model with a separate head (kind=head)" if local else
                  f"{s.model!r}, which is not a local folder (download it first)", bf16=True, auto_bf16=True)


class _SparseCore(SerialEncoder):
    """Windows, max over windows and pruning; subclasses implement _weights (a batch of windows →
    (b, V) float32 term weights) and set tokenizer, window, vocab_size, path."""

    def _inference(self):
        import contextlib
        return contextlib.nullcontext()

    def vocabulary(self) -> list[str]:
        inv = {i: t for t, i in self.tokenizer.get_vocab().items()}
        return [inv.get(i, f"[{i}]") for i in range(self.vocab_size)]

    def _encode(self, texts: list[str], prune: bool, first_window_only: bool = False):
        return self._finish_documents(self._prepare_documents(texts, prune, first_window_only))

    def _prepare_documents(self, texts: list[str], prune: bool = True, first_window_only: bool = False):
        room = self.window - len(self._head_ids) - len(self._tail_ids)
        if first_window_only:  # a query: never tokenise more than the window could hold
            texts = [t[:room * 64] for t in texts]
        all_ids = token_ids(self.tokenizer, list(texts))
        pieces, owner = [], []
        for d, ids in enumerate(all_ids):
            if first_window_only:
                ids = ids[:room]
            for i in range(0, max(len(ids), 1), room):
                pieces.append(with_specials(self._head_ids, ids[i:i + room], self._tail_ids))
                owner.append(d)
        return len(texts), pieces, np.asarray(owner), prune

    def _finish_documents(self, job, progress=None):
        import scipy.sparse as sp
        return sp.csr_matrix(self._matrix(job, progress), dtype=np.float32)

    def query_terms(self, texts: list[str], within: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (term ids ascending, weights), the first window only. `within` (term ids,
        ascending): only those are weighed, the terms an index's documents hold (a query's other
        terms score nothing there); the SPLADE projection then runs over those columns alone, the
        same weights at a fifth of the cost on a corpus of 160 meetings. No scipy: importing it
        costs a cold search a quarter of a second."""
        with self._lock:
            job = self._prepare_documents(texts, prune=False, first_window_only=True)
        narrow = within is not None and self._projects and len(within) < NARROW_SHARE * self.vocab_size
        if narrow and not len(within):          # an index holding no term: no query term scores
            return [(np.zeros(0, np.int32), np.zeros(0, np.float32)) for _ in texts]
        with one_blas_thread():     # the projection's product: BLAS's threads would spin after it
            rows = self._matrix(job, columns=within if narrow else None)
        out = []
        for row in rows:
            terms = np.flatnonzero(row != 0)
            ids = within[terms] if narrow else terms
            if within is not None and not narrow:        # weighed over the vocabulary, kept within
                keep = np.isin(ids, within, assume_unique=True)
                ids, terms = ids[keep], terms[keep]
            out.append((ids.astype(np.int32), row[terms]))
        return out

    _projects = False       # _weights takes `columns` (the projection runs over those alone)

    def _batches(self, lengths: list[int]):
        """The row indices of each forward pass (the bf16 engine plans fixed shapes instead)."""
        return budget_batches(lengths, self.settings.batch_tokens)

    def _matrix(self, job, progress=None, columns=None) -> np.ndarray:
        """(documents, vocabulary) float32 weights of a prepared batch, pruned for documents
        (`columns`: (documents, len(columns)), those terms' weights alone)."""
        s = self.settings
        n_texts, pieces, owner, prune = job
        mat = np.zeros((n_texts, self.vocab_size if columns is None else len(columns)), dtype=np.float32)
        with self._inference():
            for rows in self._batches([len(p) for p in pieces]):
                batch = [pieces[r] for r in rows]
                w = self._weights(batch) if columns is None else self._weights(batch, columns)
                np.maximum.at(mat, owner[rows], w)   # a term keeps its largest weight over windows
                if progress is not None:
                    progress(sum(len(pieces[r]) for r in rows))
        if prune:
            if s.threshold > 0:
                mat[mat <= s.threshold] = 0
            if s.top_k:
                # per window: the cap grows with the document, so a 13k-token transcript keeps
                # its vocabulary instead of the 256 terms a one-page note keeps
                windows = np.bincount(owner, minlength=n_texts) if s.top_k_per == "window" else None
                for d in range(n_texts):
                    k = int(s.top_k * (max(windows[d], 1) if windows is not None else 1))
                    if k < mat.shape[1]:
                        cut = np.partition(mat[d], -k)[-k]
                        mat[d, mat[d] < cut] = 0
        return mat

    def _encode_documents(self, texts: list[str]):
        return self._encode(texts, prune=True)

    def _encode_queries(self, texts: list[str]):
        """Queries: the first window only (as the dense encoder truncates), so a pasted book
        costs one forward pass, not hundreds."""
        return self._encode(texts, prune=False, first_window_only=True)


class SparseEncoder(_SparseCore):
    """PyTorch: any device, both kinds."""

    def __init__(self, settings: SparseSettings | None = None, bf16: bool = False):
        self.settings = s = settings or SparseSettings()
        path, _ = resolve(s.model)
        self.bf16 = bf16
        if bf16 and s.kind == "splade":
            from .onnx_export import query_engine_ready
            query_engine_ready("splade", path)
        SerialEncoder.__init__(self)
        self.device = pick_device(s.device)
        if os.path.isdir(s.model):
            s.model = path
        self.path, self.head = path, None
        if bf16 and s.kind == "splade" and self.device == "cpu" and self._load_plain(path):
            return
        from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        with loading(s.model, path):
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            cls = AutoModelForMaskedLM if s.kind == "splade" else AutoModel
            self.model = cls.from_pretrained(path).to(self.device).eval()
        self.architecture = type(self.model).__name__
        if s.kind == "splade":
            import torch
            self._head = [torch.from_numpy(a).to(self.device) for a in split_mlm_head(self.model)]
            if bf16:        # cast once, not by autocast at every window (the same bf16 values)
                self._head[0] = self._head[0].to(torch.bfloat16)
        if bf16:
            use_windowed_attention(self.model)
        s.backend = "bf16" if bf16 else "torch"
        if s.kind == "head":
            head = Path(s.head) if s.head else Path(path) / "sparse_linear.pt"
            self.head = _load_head(head, self.model.config.hidden_size).to(self.device).eval()
            s.head = str(head.resolve())
        self._tokens_and_window()

    def _tokens_and_window(self) -> None:
        """What either engine reads of its model's config and tokenizer: vocabulary, special
        tokens, window."""
        self.vocab_size = int(self.model.config.vocab_size)
        self._head_ids, self._tail_ids = special_tokens(self.tokenizer)
        self._special = set(self.tokenizer.all_special_ids)
        trained = int(getattr(self.model.config, "max_position_embeddings", 512))
        self.window = min(self.settings.max_length or trained, trained)

    def _load_plain(self, path: str) -> bool:
        """The model run by plain_bert (no transformers import: the same weights to the bit), where
        the folder is a BERT masked-LM it runs exactly; False: load it through transformers."""
        import torch

        from . import plain_bert
        from .fast_tokenizer import FastTokenizer
        from .runtime import folder_meta

        config = plain_bert.plain_mlm(path)
        if config is None:
            return False
        with loading(self.settings.model, path):
            self.model, w, bias = plain_bert.load_mlm(path, config)
            self.tokenizer = FastTokenizer(path, folder_meta(Path(path)))
        # cast once, not by autocast at every window (the same bf16 values)
        self._head = [torch.from_numpy(w).to(torch.bfloat16), torch.from_numpy(bias)]
        self.settings.backend, self.architecture = "bf16", "BertForMaskedLM"
        self._tokens_and_window()
        return True

    def describe(self) -> dict:
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "architecture": self.architecture,
                "vocab_size": self.vocab_size, "window": self.window,
                "settings": self.settings.to_dict(), "backend": {"name": self.settings.backend}}

    def _batches(self, lengths: list[int]):
        return shape_groups(lengths, self.window) if self.bf16 else super()._batches(lengths)

    def _weights(self, batch: list[list[int]]):
        """(b, V) max-pooled term weights of each window."""
        if self.bf16:
            return fixed_shapes(batch, self._weights_padded, self.window)
        return self._weights_padded(batch)

    def _weights_padded(self, batch: list[list[int]], width: int | None = None):
        import torch

        ids, mask = pad(batch, self.tokenizer.pad_token_id or 0, self.device, width)
        if self.settings.kind == "splade":     # the projection a chunk at a time (mlm_head.py)
            states = self.model(input_ids=ids, attention_mask=mask).logits
            return head_max_torch(states, mask.bool(), *self._head).cpu().numpy()
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        tok_w = torch.relu(self.head(hidden)).squeeze(-1).float() * mask
        for sid in self._special:
            tok_w = tok_w.masked_fill(ids == sid, 0)
        out = torch.zeros(len(batch), self.vocab_size, device=tok_w.device)
        return out.scatter_reduce(1, ids, tok_w, reduce="amax", include_self=True).cpu().numpy()

    def _inference(self):
        return bf16_context(self.bf16)


class OnnxSparseEncoder(_SparseCore):
    """ONNX Runtime on the CPU, SPLADE models: the graph returns the MLM head's transformed states,
    and the vocabulary projection with the max over each window's tokens runs in chunks
    (mlm_head.head_max), so no (tokens × vocabulary) logits tensor is ever whole."""

    def __init__(self, settings: SparseSettings, backend: str = "onnx"):
        from . import onnx_export

        self.settings = s = settings
        SerialEncoder.__init__(self)
        self.device = "cpu"
        self.head = None
        self.path, self.model = onnx_export.load("splade", s, backend)
        m = self.model.meta
        # the vocabulary projection, run outside the graph (mlm_head.py); .npy read without pickle
        self._head = [npy.load(self.model.folder / f"{n}.npy") for n in ("head_weight", "head_bias")]
        self._narrowed = None       # (term ids, their projection columns): _columns
        self.tokenizer = self.model.tokenizer
        self.vocab_size = m["vocab_size"]
        self._head_ids, self._tail_ids = special_tokens(self.tokenizer)
        self._special = set(self.tokenizer.all_special_ids)
        self.window = min(s.max_length or m["max_position_embeddings"], m["max_position_embeddings"])

    def describe(self) -> dict:
        m = self.model.meta
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "architecture": m["architecture"], "vocab_size": self.vocab_size, "window": self.window,
                "settings": self.settings.to_dict(),
                "backend": self.model.about(self.settings.backend)}

    _projects = True

    def _weights(self, batch, columns: np.ndarray | None = None) -> np.ndarray:
        from .runtime import pad_np

        ids, mask = pad_np(batch, self.tokenizer.pad_token_id or 0)
        return head_max(self.model.run(ids, mask), mask, *(self._head if columns is None else self._columns(columns)))

    def _columns(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The projection's `columns` (weights, bias), copied once per term set (a point in time's:
        the same array for every query of it)."""
        held = self._narrowed
        if held is None or held[0] is not columns and not np.array_equal(held[0], columns):
            w, b = self._head
            held = self._narrowed = (columns, np.ascontiguousarray(w[:, columns]), b[columns])
        return held[1], held[2]
