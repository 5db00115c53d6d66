"""Dense encoder: whole long documents → L2-normalised float32 vectors.

Tokenises once, splits per document strategy, sorts pieces by length and batches them by a
token budget (no wasted padding), runs the model and pools with the model's own
sentence-transformers pooling module. Two engines run the model: PyTorch (`DenseEncoder`: GPU,
and the context-extension strategies, which patch the PyTorch model) and ONNX Runtime
(`OnnxDenseEncoder`: the CPU default for truncate/pcw/maxp; no torch import on the query path).
`load_dense` picks one.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ConfigError, ModelError
from . import chunking
from .batching import SerialEncoder, budget_batches, pad, special_tokens, token_ids, with_specials
from .chunking import EXTENSION_STRATEGIES, STRATEGIES
from .models import DEFAULT_DENSE, model_revision, offline_hint, pick_device, resolve
from .runtime import choose, with_fallback

# the strategies ONNX Runtime runs: plain positions (the extension strategies patch torch modules)
ONNX_STRATEGIES = ("truncate", "pcw", "maxp")

log = logging.getLogger(__name__)


@dataclass
class DenseSettings:
    model: str = DEFAULT_DENSE
    strategy: str = "maxp"
    max_length: int | None = None         # tokens per pass (truncate/pcw/maxp); default: the model's
    stride: int | None = None             # maxp passage stride (default: max_length, no overlap)
    target_length: int | None = None      # extension methods: tokens in one pass (default 4x the model's window)
    ntk_lambda: float | None = None
    group: int | None = None
    window: int | None = None
    attn_scaling: bool = False
    dim: int | None = None                # Matryoshka truncation
    query_prefix: str | None = None       # default: the model's configured prompts
    doc_prefix: str | None = None
    batch_tokens: int = 16384
    trust_remote_code: bool = False
    device: str | None = None             # default: cuda when available
    backend: str = "auto"                 # auto | torch | onnx | onnx-int8 (an index records the one it used)

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown document strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("device")
        return d


def load_dense(settings: DenseSettings | None = None):
    """The dense encoder for `settings` on the backend they ask for (auto: see runtime.choose)."""
    s = settings or DenseSettings()
    local = os.path.isdir(resolve(s.model)[0])
    backend = choose(s.backend, s.device, s.strategy in ONNX_STRATEGIES and local,
                     f"the {s.strategy} strategy (it patches a PyTorch model)" if local else
                     f"{s.model!r}, which is not a local folder (download it first)")
    return with_fallback(s, backend, OnnxDenseEncoder, DenseEncoder)


class _DenseCore(SerialEncoder):
    """What both engines share: windows, prefixes, pieces, batching and document pooling.
    Subclasses set the model facts and implement _forward (a batch of pieces → normalised rows)."""

    def _setup(self, st_max: int | None, prompts: dict, dim: int) -> None:
        s = self.settings
        st_max = st_max or self.trained
        self.window = min(s.max_length or st_max, self.trained) if self.kind == "ape" else (s.max_length or st_max)
        if s.max_length and self.kind == "ape" and s.max_length > self.trained:
            raise ConfigError(f"--max-length {s.max_length} exceeds the model's {self.trained} positions; "
                              f"use an extension strategy (gp, rp, pi) with --target-length instead")
        self.query_prefix = s.query_prefix if s.query_prefix is not None else prompts.get("query", "")
        self.doc_prefix = s.doc_prefix if s.doc_prefix is not None else (
            prompts.get("document") or prompts.get("passage") or "")
        self.target = s.target_length or 4 * self.trained
        self._head, self._tail = special_tokens(self.tokenizer)
        self.specials = len(self._head) + len(self._tail)
        self.dim = s.dim or dim

    def _inference(self):
        return contextlib.nullcontext()

    def _forward(self, batch) -> np.ndarray:
        raise NotImplementedError

    # -- tokenisation ------------------------------------------------------------------------
    def _pieces(self, texts, prefix, strategy, spans: bool = False):
        """All model inputs (with special tokens and prefix), the document each belongs to and,
        with `spans`, the characters of its document each covers ((m, 2), -1 when unknown)."""
        enc = token_ids(self.tokenizer, list(texts), spans=spans)
        pre = self.tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
        room = self.window - self.specials - len(pre)
        target = (self.target - self.specials - len(pre)) if strategy in EXTENSION_STRATEGIES else None
        if room < 1:
            raise ConfigError(f"window {self.window} leaves no room for text after the prefix and special tokens")
        pieces, owner, where = [], [], []
        for d, item in enumerate(enc):
            doc_ids, offsets = item if spans else (item, None)
            for a, b in chunking.split_ranges(strategy, len(doc_ids), room, self._stride(room), target):
                pieces.append(with_specials(self._head + pre, doc_ids[a:b], self._tail))
                owner.append(d)
                if spans:
                    where.append(chunking.char_span(offsets, a, b) if offsets is not None else (-1, -1))
        owner = np.asarray(owner, dtype=np.int64)
        if spans:
            return pieces, owner, np.asarray(where, dtype=np.int64).reshape(-1, 2)
        return pieces, owner

    def _stride(self, room: int) -> int:
        st = self.settings.stride
        return min(st, room) if st else room

    def _encode_pieces(self, pieces: list[list[int]], progress=None) -> np.ndarray:
        out = np.zeros((len(pieces), self.dim), dtype=np.float32)
        with self._inference():
            for rows in budget_batches([len(p) for p in pieces], self.settings.batch_tokens):
                out[rows] = self._forward([pieces[r] for r in rows])
                if progress is not None:
                    progress(sum(len(pieces[r]) for r in rows))
        return out

    # -- public protocol ---------------------------------------------------------------------
    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        """(n, d) float32, L2-normalised. Queries are short: always the plain model, truncated."""
        # a query never needs more characters than its window of tokens could hold
        pieces, _ = self._pieces([t[:self.window * 64] for t in texts], self.query_prefix, "truncate")
        return self._encode_pieces(pieces)

    def _encode_documents(self, texts: list[str], progress=None, spans: bool = False):
        """(vectors (m, d), owner (m,)): one vector per document, or per passage for maxp; with
        `spans`, also the (m, 2) character span of each vector in its document (hits show them)."""
        return self._finish_documents(self._prepare_documents(texts, spans=spans), progress)

    def _prepare_documents(self, texts: list[str], spans: bool = False):
        pieces, owner, *where = self._pieces(texts, self.doc_prefix, self.settings.strategy, spans=spans)
        return len(texts), pieces, owner, (where[0] if spans else None), spans

    def _finish_documents(self, job, progress=None):
        n_texts, pieces, owner, where, spans = job
        vecs = self._encode_pieces(pieces, progress)
        if self.settings.strategy == "pcw":
            sums = np.zeros((n_texts, vecs.shape[1]), dtype=np.float64)
            np.add.at(sums, owner, vecs)
            vecs = (sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)
            if spans and len(where):   # the averaged vector covers its whole document
                first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
                where = np.stack([np.minimum.reduceat(where[:, 0], first), np.maximum.reduceat(where[:, 1], first)], 1)
            owner = np.arange(n_texts, dtype=np.int64)
        return (vecs, owner, where) if spans else (vecs, owner)

class DenseEncoder(_DenseCore):
    """PyTorch: any device, every strategy (the extension strategies patch this model)."""

    def __init__(self, settings: DenseSettings | None = None):
        from .extend import Extension, apply_extension, position_kind, trained_length  # imports torch

        self.settings = s = settings or DenseSettings()
        SerialEncoder.__init__(self)
        self.device = pick_device(s.device)
        path, _ = resolve(s.model)
        if os.path.isdir(s.model):  # record an absolute path: search may run from another directory
            s.model = path
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars would clutter ldr's own output

        try:
            st = SentenceTransformer(path, device=self.device, trust_remote_code=s.trust_remote_code,
                                     local_files_only=os.environ.get("HF_HUB_OFFLINE") == "1" or None)
        except OSError as e:
            raise ModelError(offline_hint(s.model) + f" [{e.__class__.__name__}: {str(e)[:200]}]") from None
        except ValueError as e:
            if "trust_remote_code" in str(e):
                raise ModelError(f"{s.model} ships its own model code: pass --trust-remote-code to allow it") from None
            raise
        self.st = st
        self.hf = st[0].auto_model
        self.tokenizer = st.tokenizer
        self.pool = [m for i, m in enumerate(st) if i > 0 and type(m).__name__ == "Pooling"]
        if self.device == "cuda":
            self.hf.half()
        self.hf.eval()
        self.path = path
        self.kind = position_kind(self.hf)
        self.trained = trained_length(self.hf)
        s.backend = "torch"
        self._accepts_tti = "token_type_ids" in self.tokenizer.model_input_names
        self._setup(st.max_seq_length, getattr(st, "prompts", {}) or {},
                    st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension")
                    else st.get_sentence_embedding_dimension())
        self.ext_info = None
        if s.strategy in EXTENSION_STRATEGIES:
            self.ext_info = apply_extension(self.hf, Extension(s.strategy, self.target, s.ntk_lambda, s.group,
                                                               s.window, s.attn_scaling))

    # -- info recorded in the manifest --------------------------------------------------------
    def describe(self) -> dict:
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "architecture": type(self.hf).__name__, "positions": self.kind, "trained_length": self.trained,
                "window": self.window, "dim": self.dim, "query_prefix": self.query_prefix,
                "doc_prefix": self.doc_prefix, "pooling": [p.get_config_dict() for p in self.pool],
                "extension": self.ext_info, "settings": self.settings.to_dict(), "backend": {"name": "torch"}}

    # -- forward -----------------------------------------------------------------------------
    def _position_ids(self, lengths: list[int], n: int):
        """(rows, n) position ids for APE models, each row from its own length; None for others."""
        from .extend import ape_offset, ape_position_ids_batch, scale_factor

        s = self.settings
        if self.kind != "ape":
            return None
        import torch
        if s.strategy in ("gp", "rp", "pi") and self.ext_info and self.ext_info.get("applied", True):
            pid = ape_position_ids_batch(s.strategy, lengths, n, self.trained, scale_factor(self.target, self.trained))
        else:
            pid = torch.arange(n).unsqueeze(0).expand(len(lengths), -1)
        return pid + ape_offset(self.hf)

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        import torch

        ids, mask = pad(batch, self.tokenizer.pad_token_id or 0, self.device)
        n = ids.shape[1]
        kwargs = {"input_ids": ids, "attention_mask": mask}
        if self._accepts_tti:
            kwargs["token_type_ids"] = torch.zeros_like(kwargs["input_ids"])
        pid = self._position_ids([len(b) for b in batch], n)
        if pid is not None:
            kwargs["position_ids"] = pid.to(self.device)
        out = self.hf(**kwargs)
        features = {"token_embeddings": out.last_hidden_state, "attention_mask": kwargs["attention_mask"]}
        for p in self.pool:
            features = p(features)
        emb = features["sentence_embedding"].float()
        if self.settings.dim:
            emb = emb[:, : self.settings.dim]
        return torch.nn.functional.normalize(emb, dim=-1).cpu().numpy()

    def _inference(self):
        import torch
        return torch.inference_mode()


class OnnxDenseEncoder(_DenseCore):
    """ONNX Runtime on the CPU (fp32, or dynamic int8 with `backend="onnx-int8"`): the graph runs
    the model and its pooling; tokenisation uses `tokenizers` alone (no torch, no transformers)."""

    def __init__(self, settings: DenseSettings, backend: str = "onnx"):
        from . import onnx_export

        self.settings = settings
        SerialEncoder.__init__(self)
        self.device = "cpu"
        onnx_export.WRAPPERS.setdefault("dense", _onnx_module)
        self.path, self.model = onnx_export.load("dense", settings, backend, settings.trust_remote_code)
        m = self.model.meta
        self.tokenizer = self.model.tokenizer
        self.kind, self.trained = m["positions"], m["trained_length"]
        self.ext_info = None
        self._setup(m["st_max_length"], m["prompts"], m["dim"])

    def describe(self) -> dict:
        m = self.model.meta
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "architecture": m["architecture"], "positions": self.kind, "trained_length": self.trained,
                "window": self.window, "dim": self.dim, "query_prefix": self.query_prefix,
                "doc_prefix": self.doc_prefix, "pooling": m["pooling"], "extension": None,
                "settings": self.settings.to_dict(),
                "backend": self.model.about(self.settings.backend)}

    def _forward(self, batch) -> np.ndarray:
        from .runtime import pad_np

        ids, mask = pad_np(batch, self.tokenizer.pad_token_id or 0)
        emb = self.model.run(ids, mask)
        if self.settings.dim:
            emb = emb[:, : self.settings.dim]
        return (emb / np.linalg.norm(emb, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)


def _onnx_module(model_dir, trust_remote_code: bool):
    """The dense model and its pooling as one torch module, for the ONNX export (onnx_export.WRAPPERS)."""
    import torch

    from .onnx_export import _eager

    enc = DenseEncoder(DenseSettings(model=str(model_dir), strategy="truncate", backend="torch", device="cpu",
                                     trust_remote_code=trust_remote_code))
    hf = enc.hf
    _eager(hf)
    tti = enc._accepts_tti

    class Dense(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf, self.pool = hf, torch.nn.ModuleList(enc.pool)

        def forward(self, input_ids, attention_mask):
            kw = {"token_type_ids": torch.zeros_like(input_ids)} if tti else {}
            out = self.hf(input_ids=input_ids, attention_mask=attention_mask, **kw)
            f = {"token_embeddings": out.last_hidden_state, "attention_mask": attention_mask}
            for p in self.pool:
                f = p(f)
            return f["sentence_embedding"].float()

    st = enc.st
    meta = {"kind": "dense", "architecture": type(hf).__name__, "positions": enc.kind,
            "trained_length": enc.trained, "st_max_length": st.max_seq_length,
            "prompts": dict(getattr(st, "prompts", {}) or {}), "dim": enc.dim,
            "pooling": [p.get_config_dict() for p in enc.pool]}
    return Dense().eval(), meta, hf.config, enc.tokenizer
