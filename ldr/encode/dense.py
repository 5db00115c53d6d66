"""Dense encoder: whole long documents → L2-normalised float32 vectors.

Tokenises once, splits per document strategy, sorts pieces by length and batches them by a
token budget (no wasted padding), runs the model and pools with the model's own
sentence-transformers modules (pooling, and a Dense projection where the model has one). Two
engines run the model: PyTorch (`DenseEncoder`: GPU, the context-extension strategies, which patch
the PyTorch model, and bf16 on CPUs with bf16 in hardware: AMX or AVX-512 BF16) and
ONNX Runtime (`OnnxDenseEncoder`: the CPU default for truncate/pcw/maxp elsewhere, and every
query: no torch import on the query path). `load_dense` picks one.
"""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .batching import SerialEncoder, fixed_shapes, pad, shape_groups
from .chunking import EXTENSION_STRATEGIES, STRATEGIES
from .models import DEFAULT_DENSE, loading, model_revision, pick_device, resolve, trained_from
from .dense_core import _DenseCore
from ..schema import setting
from .bf16_attention import use_windowed_attention
from .runtime import BACKENDS, TABLE, bf16_context, choose, with_fallback

# the strategies ONNX Runtime runs: plain positions (the extension strategies patch torch modules)
ONNX_STRATEGIES = ("truncate", "pcw", "maxp")

log = logging.getLogger(__name__)


@dataclass
class DenseSettings:
    model: str = setting(DEFAULT_DENSE, "--dense", enables=True, cli_default="auto",
                         help="Dense model: a packaged name, a Hugging Face name or a local folder; `none` for no dense "
                              "index; auto: all-MiniLM-L6-v2 for English, e5-small-multilingual (ldr[multilingual]) "
                              "otherwise.")
    strategy: str = setting("maxp", "--doc-strategy", choices=STRATEGIES, help="How long documents are encoded.")
    max_length: int | None = setting(None, "--max-length", help="Tokens per pass (default: the model's).")
    stride: int | None = setting(None, "--stride", help="maxp: tokens between passage starts (default: max length).")
    target_length: int | None = setting(None, "--target-length", help="Extension strategies: tokens encoded in one "
                                                                       "pass (default: 4x the model's trained window).")
    ntk_lambda: float | None = setting(None, "--ntk-lambda", help="ntk: rotary base scale λ (default by scale factor).")
    group: int | None = setting(None, "--group", help="selfextend: group size g.")
    window: int | None = setting(None, "--window", help="selfextend: neighbour window w.")
    attn_scaling: bool = setting(False, "--attn-scaling",
                                 help="Scale attention logits by log(n)/log(L_o) beyond the trained length.")
    dim: int | None = setting(None, "--dim", help="Matryoshka: keep the first DIM dimensions.")
    context: float | None = setting(None, "--doc-context", help="Mix each passage vector with its document's mean "
                                    "vector at this weight (0: off; default: the model card's, which `ldr train "
                                    "whitening` writes, else 0).")
    query_prefix: str | None = setting(None, "--query-prefix", help="Text put before queries (default: the model's "
                                                                    "prompt).")
    doc_prefix: str | None = setting(None, "--doc-prefix", help="Text put before documents (default: the model's "
                                                                "prompt).")
    batch_tokens: int | None = setting(None, "--batch-tokens", help="Token budget per forward pass (default: 4096 on "
                                                                    "a CPU, 16384 on a GPU).")
    trust_remote_code: bool = setting(False, "--trust-remote-code", shared=True,
                                      help="Allow models that ship their own code.")
    device: str | None = setting(None, "--device", shared=True, help="cpu, cuda, cuda:1 (default: cuda when "
                                                                      "available).")
    # auto | torch | onnx | onnx-int8 (an index records the one it used)
    backend: str = setting("auto", "--backend", shared=True, choices=BACKENDS,
                           help="Engine for the dense and sparse models: auto is ONNX Runtime fp32 on a CPU (same "
                                "vectors as PyTorch), bf16 on CPUs with AMX or AVX-512 BF16 (vectors at cosine "
                                "0.9999 to fp32), PyTorch on a GPU; onnx-int8 is faster with slightly different "
                                "vectors (first layer in fp32). Recorded in the index; its dense queries run in ONNX "
                                "int8 on CPUs with VNNI (quality measured), else ONNX fp32.")

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown document strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.context is not None and not 0 <= self.context <= 16:
            raise ConfigError(f"--doc-context {self.context} is out of range: a weight from 0 to 16")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("device")
        return d


def load_dense(settings: DenseSettings | None = None):
    """The dense encoder for `settings` on the backend they ask for (auto: see runtime.choose)."""
    from .runtime import onnx_folder

    s = settings or DenseSettings()
    path, key = resolve(s.model)
    if onnx_folder(path):              # a packaged int8 graph or a user's export: run as it is
        if s.strategy not in ONNX_STRATEGIES or s.backend == "torch":
            raise ConfigError(f"{s.model} is an ONNX model folder (no PyTorch weights): it runs the "
                              f"{', '.join(ONNX_STRATEGIES)} strategies on --backend onnx")
        from .dense_prebuilt import PrebuiltDenseEncoder
        return PrebuiltDenseEncoder(s, path, key)
    return with_fallback(s, dense_engine(s), OnnxDenseEncoder, DenseEncoder)


def dense_engine(s: DenseSettings) -> str:
    """The engine `s` runs on here (its `auto` resolved for this machine), nothing loaded."""
    from .runtime import onnx_folder

    path, _ = resolve(s.model)
    if onnx_folder(path):
        return "onnx"
    local = os.path.isdir(path)
    return choose(s.backend, s.device, s.strategy in ONNX_STRATEGIES and local,
                  f"the {s.strategy} strategy (it patches a PyTorch model)" if local else
                  f"{s.model!r}, which is not a local folder (download it first)", bf16=True, auto_bf16=True)


class DenseEncoder(_DenseCore):
    """PyTorch: any device, every strategy (the extension strategies patch this model)."""

    def __init__(self, settings: DenseSettings | None = None, bf16: bool = False):
        self.settings = s = settings or DenseSettings()
        path, _ = resolve(s.model)
        self.bf16 = bf16
        if bf16 and s.strategy in ONNX_STRATEGIES:
            from .onnx_export import query_engine_ready
            query_engine_ready("dense", path, s.trust_remote_code, _onnx_module)
        from .extend import Extension, apply_extension, position_kind, trained_length  # imports torch

        SerialEncoder.__init__(self)
        self.device = pick_device(s.device)
        if os.path.isdir(s.model):  # record an absolute path: search may run from another directory
            s.model = path
        self.path = path
        if bf16 and s.strategy not in EXTENSION_STRATEGIES and self.device == "cpu" and self._load_plain(path):
            return
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars would clutter ldr's own output

        with loading(s.model, path):
            st = SentenceTransformer(path, device=self.device, trust_remote_code=s.trust_remote_code,
                                     local_files_only=os.environ.get("HF_HUB_OFFLINE") == "1" or None)
        self.st = st
        self.hf = st[0].auto_model
        self.architecture = type(self.hf).__name__
        self.tokenizer = st.tokenizer
        # every module after the transformer (Pooling, Dense projections, LayerNorm, ...) but the last
        # Normalize, which ldr applies itself after a Matryoshka cut: a Dense projection left out gave
        # vectors of the transformer's width where the model's are its projection's (LaBSE, GTR); a
        # Normalize before a projection stays (a whitened model: train/whitening.py)
        self.after = [m for m in list(st)[1:]]
        if self.after and type(self.after[-1]).__name__ == "Normalize":
            self.after.pop()
        if self.device == "cuda":
            self.hf.half()
        self.hf.eval()
        self.path = path
        self.kind = position_kind(self.hf)
        self.trained = trained_length(self.hf)
        s.backend = "bf16" if bf16 else "torch"
        self._accepts_tti = "token_type_ids" in self.tokenizer.model_input_names
        self._setup(st.max_seq_length, getattr(st, "prompts", {}) or {},
                    st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension")
                    else st.get_sentence_embedding_dimension())
        self.ext_info = None
        if s.strategy in EXTENSION_STRATEGIES:
            self.ext_info = apply_extension(self.hf, Extension(s.strategy, self.target, s.ntk_lambda, s.group,
                                                               s.window, s.attn_scaling))
        if bf16:
            use_windowed_attention(self.hf)

    def _load_plain(self, path: str) -> bool:
        """The model run by plain_bert (no transformers import), where the folder is one it runs
        to the bit as transformers would; False: load it through sentence-transformers."""
        from . import plain_bert
        from .extend import position_kind, trained_length
        from .fast_tokenizer import FastTokenizer
        from .runtime import folder_meta

        facts = plain_bert.plain_folder(path)
        if facts is None:
            return False
        with loading(self.settings.model, path):
            self.hf = plain_bert.load(path, facts)
            self.tokenizer = FastTokenizer(path, folder_meta(Path(path)))
        self.st, self.after = None, [plain_bert.Pooling(facts["pooling"], facts["width"])]
        if facts["head"]:
            self.after.append(plain_bert.LinearHead(facts["head"]))
        self.architecture = "BertModel"     # what transformers would have loaded
        self.kind, self.trained = position_kind(self.hf), trained_length(self.hf)
        self.settings.backend = "bf16"
        self._accepts_tti = False       # token type 0 everywhere, as the zeros transformers is given
        self._setup(facts["max_seq_length"], facts["prompts"], facts["dim"])
        self.ext_info = None
        return True

    # -- info recorded in the manifest --------------------------------------------------------
    def describe(self) -> dict:
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "trained_from": trained_from(self.settings.model),
                "architecture": self.architecture, "positions": self.kind, "trained_length": self.trained,
                "window": self.window, "dim": self.dim, "query_prefix": self.query_prefix,
                "doc_prefix": self.doc_prefix, "pooling": [p.get_config_dict() for p in self.after],
                "extension": self.ext_info, "settings": self.settings.to_dict(), "backend": {"name": self.settings.backend}}

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

    def _batches(self, lengths: list[int]):
        return shape_groups(lengths, self.window) if self.bf16 else super()._batches(lengths)

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        if self.bf16:
            return fixed_shapes(batch, self._forward_padded, self.window)
        return self._forward_padded(batch)

    def _forward_padded(self, batch: list[list[int]], width: int | None = None) -> np.ndarray:
        import torch

        ids, mask = pad(batch, self.tokenizer.pad_token_id or 0, self.device, width)
        n = ids.shape[1]
        kwargs = {"input_ids": ids, "attention_mask": mask}
        if self._accepts_tti:
            kwargs["token_type_ids"] = torch.zeros_like(kwargs["input_ids"])
        pid = self._position_ids([len(b) for b in batch], n)
        if pid is not None:
            kwargs["position_ids"] = pid.to(self.device)
        out = self.hf(**kwargs)
        features = {"token_embeddings": out.last_hidden_state, "attention_mask": kwargs["attention_mask"]}
        for p in self.after:
            features = p(features)
        emb = features["sentence_embedding"].float()
        if self.settings.dim:
            emb = emb[:, : self.settings.dim]
        return torch.nn.functional.normalize(emb, dim=-1).cpu().numpy()

    def _inference(self):
        return bf16_context(self.bf16)


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
        if backend == "onnx":       # its queries may run another graph (runtime.for_queries)
            onnx_export.query_engine_ready("dense", self.path, settings.trust_remote_code)
        m = self.model.meta
        self.tokenizer = self.model.tokenizer
        self.kind, self.trained = m["positions"], m["trained_length"]
        self.ext_info = None
        self._setup(m["st_max_length"], m["prompts"], m["dim"])

    def describe(self) -> dict:
        m = self.model.meta
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "trained_from": trained_from(self.settings.model),
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


# what `_onnx_module` imports, for the export zygote to import once (export_zygote.serve)
EXPORT_IMPORTS = ("sentence_transformers",)


def _onnx_module(model_dir, trust_remote_code: bool):
    """The dense model and the modules after it (pooling, projections) as one torch module, for the
    ONNX export (onnx_export.WRAPPERS)."""
    import torch

    from .onnx_export import _FUSABLE, _eager

    enc = DenseEncoder(DenseSettings(model=str(model_dir), strategy="truncate", backend="torch", device="cpu",
                                     trust_remote_code=trust_remote_code))
    hf = enc.hf
    _eager(hf)
    tti = enc._accepts_tti
    table = hf.get_input_embeddings()
    # the token embedding table stays out of the graph, a .npy the runtime gathers rows from (memory-
    # mapped): multilingual-e5's is 96M of its 118M weights. A plain lookup for the model types ORT
    # fuses (their embeddings module adds positions, from the length, and token types to the rows)
    outside = hf.config.model_type in _FUSABLE and type(table) is torch.nn.Embedding

    class Dense(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf, self.pool = hf, torch.nn.ModuleList(enc.after)   # "pool": the graph's node names as before

        def forward(self, tokens, attention_mask):
            kw = {"token_type_ids": torch.zeros_like(attention_mask)} if tti else {}
            kw["inputs_embeds" if outside else "input_ids"] = tokens
            out = self.hf(attention_mask=attention_mask, **kw)
            f = {"token_embeddings": out.last_hidden_state, "attention_mask": attention_mask}
            for p in self.pool:
                f = p(f)
            return f["sentence_embedding"].float()

    st = enc.st
    meta = {"kind": "dense", "architecture": type(hf).__name__, "positions": enc.kind,
            "trained_length": enc.trained, "st_max_length": st.max_seq_length,
            "prompts": dict(getattr(st, "prompts", {}) or {}), "dim": enc.dim,
            "pooling": [p.get_config_dict() for p in enc.after]}
    if outside:
        meta.update(embeds=TABLE, arrays={TABLE: table.weight.detach().float().numpy()})
    return Dense().eval(), meta, hf.config, enc.tokenizer
