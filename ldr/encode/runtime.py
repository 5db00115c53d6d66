"""Which engine runs an encoder's model: PyTorch, or ONNX Runtime (fp32 or dynamic int8) on a CPU.

This module imports neither torch nor transformers: the query path of an ONNX index loads an
exported graph and a `tokenizers` tokenizer, which is what keeps a cold `ldr search` fast.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path

import numpy as np

from .. import npy
from ..errors import ConfigError, ModelError
from ..pools import ProcessPool
from .fast_tokenizer import FastTokenizer

log = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "onnx", "onnx-int8", "bf16")
ONNX_EXTRA = "pip install 'ldr[onnx]'"
TABLE = "word_embeddings"     # the token embedding table beside a graph that takes its rows (.npy)
# what `auto` runs on a CPU: fp32. The int8 graph (first layer in fp32, rows run alone) keeps
# qmsum-train (fused 88.41 vs 88.42, dense 56.6 vs 55.8) and every passkey/needle Acc@1 of the fused and
# reranked stages, but MiniLM's dense stage alone loses 1-2 passkeys of 50 at four lengths
# (Acc@1 79.7 vs 81.3 averaged over 256..8192), short of "unchanged at every length" (bench/README.md)
CPU_DEFAULT = "onnx"
# int8 with every MatMul quantised lost passkeys (MiniLM dense Acc@1 at 256/512/1024: 78/68/78 vs
# fp32's 86/76/82); keeping layer 0's or layer 1's three MatMuls in fp32 recovered most of it
# (84/72/80, 84/78/80), layers 2-5 did not; layer 0 is the one measured at every length
# (bench/sweeps/int8_layers.py)
FP32_LAYERS = (0,)
# bf16 (PyTorch under CPU autocast) where the CPU multiplies bf16 in hardware: AMX tiles (MiniLM
# 2.9x ONNX fp32) or AVX-512 BF16 dot products without AMX (1.5x ONNX fp32, SPLADE 1.14x); vectors
# at cosine >= 0.9999 to fp32, qmsum-train and passkeys unchanged on both (bench/README.md, "bf16"
# and "Encoding per CPU family"). AVX-512 VNNI or AVX2 alone: ONNX fp32 (int8 loses passkeys).
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# below this much text a build keeps `auto` on fp32: bf16 starts PyTorch (~1.3 s on 2 cores since
# the bf16 engines run BERT folders without transformers, encode/plain_bert.py) and loads the model,
# which costs more than a small corpus's encoding saves (index/build.py, BuildConfig.small_corpus).
# Measured per packaged dense model, default builds, AVX-512 BF16, bf16 against ONNX (farm-bench,
# paired; bench/README.md "Encoding"): all-MiniLM-L6-v2 (with SPLADE-tiny) 1.07-1.09x the time at
# 50k characters, 0.93-0.97x at 100k, 0.62-0.69x at 200k; e5-small-multilingual (German, no SPLADE:
# a 250k-token vocabulary to load) 1.04x at 178k, 0.84x at 426k. Any other model: 400k, as measured
# before the bf16 engines lost transformers' import.
BF16_MIN_CHARS = {"all-minilm-l6-v2": 100_000}
BF16_MIN_CHARS_ELSE = 400_000


def bf16_min_chars(model_key: str | None) -> int:
    """The text a build needs before `auto` pays for bf16, for the dense model it encodes with
    (`model_key`: its packaged name, models.ALIASES' values; None: any other model)."""
    return BF16_MIN_CHARS.get(model_key, BF16_MIN_CHARS_ELSE)


# an engine ldr chose in fp32 (a small corpus held to fp32; an index written before backends were
# recorded, encoded by PyTorch, whose queries must answer as they did): ONNX fp32 or PyTorch, never
# int8 or bf16
EXACT = "auto-fp32"
# a dense query of an index encoded on the CPU in fp32 or bf16: ONNX int8 on a CPU with VNNI (else
# as EXACT), the documents' vectors as built: default and dense-leg nDCG@10 and passkeys kept, an
# 80-token MiniLM query 6.5 -> 4.4 ms on 2 cores (bench/README.md, "int8 queries")
QUERY_INT8 = "auto-int8"
AUTOMATIC = (None, "auto", EXACT, QUERY_INT8)     # engines ldr chooses (an export failing falls back)
INT8_QUERY_KINDS = ("dense",)


def cuda_present() -> bool:
    """Whether a CUDA device is there, without importing torch on machines with no NVIDIA driver."""
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")):
        return False
    if importlib.util.find_spec("torch") is None:
        return False
    import torch
    return bool(torch.cuda.is_available())


def onnxruntime_available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


def bf16_fast(flags: set[str] | None = None) -> bool:
    """Whether this CPU runs bf16 matrix products in hardware measured faster than fp32."""
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in BF16_FLAGS)


def choose(requested: str | None, device: str | None, supported: bool, what: str, bf16: bool = False,
           auto_bf16: bool = False) -> str:
    """The backend to run: `requested` (auto | torch | onnx | onnx-int8 | bf16) resolved for this machine.

    `bf16`: the encoder has a bf16 path (--backend bf16). auto on a CPU: bf16 where `auto_bf16`
    (measured faster for this encoder), the model/strategy would run on ONNX and the CPU has AMX;
    else CPU_DEFAULT (ONNX Runtime fp32: PyTorch's vectors, cosine ≥ 0.9999) when ONNX Runtime is
    installed and the model/strategy runs on it;
    PyTorch on a GPU or otherwise. EXACT: ONNX fp32 or PyTorch fp32, never int8 or bf16. An ONNX
    or bf16 backend recorded in an index is kept on a CPU and becomes PyTorch on a GPU (fp16)."""
    requested = requested or "auto"
    if requested not in BACKENDS + (EXACT, QUERY_INT8):
        raise ConfigError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    gpu = (device or "").startswith("cuda") or (device is None and requested != "torch" and cuda_present())
    if requested == "torch" or gpu:
        return "torch"
    if requested == "bf16":
        if not bf16:
            raise ConfigError(f"--backend bf16 cannot run {what}: use --backend torch (or auto)")
        return "bf16"
    if requested in ("auto", EXACT, QUERY_INT8):
        if requested == "auto" and auto_bf16 and supported and bf16_fast():
            return "bf16"
        if not supported or not onnxruntime_available():
            return "torch"
        if requested == QUERY_INT8:
            return "onnx-int8" if vnni() else "onnx"
        return "onnx" if requested == EXACT else CPU_DEFAULT
    if not supported:
        raise ConfigError(f"--backend {requested} cannot run {what}: use --backend torch (or auto)")
    if not onnxruntime_available():
        raise ModelError(f"--backend {requested} needs ONNX Runtime, which is not installed: {ONNX_EXTRA} "
                         "(or use --backend torch)")
    return requested


def with_fallback(settings, backend: str, onnx_cls, torch_cls):
    """The encoder on `backend`. When auto chose ONNX and the export fails (a model whose code
    the exporter cannot trace), say so and run on PyTorch: auto promises the fastest engine that
    works, an explicit --backend onnx promises ONNX and fails instead."""
    if backend == "torch":
        return torch_cls(settings)
    asked = settings.backend
    if backend == "bf16":
        # oneDNN keeps a compiled kernel per matrix shape (1,024 by default): a build's ragged last
        # windows grow RSS with each new shape (bench/README.md).
        # Read when oneDNN first runs, so before torch's first bf16 product; a user's value wins.
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
        return torch_cls(settings, bf16=True)
    try:
        return onnx_cls(settings, backend)
    except (ConfigError, ModelError):
        raise
    except Exception as e:
        if type(e).__name__ == "CacheUnwritable":      # said once already; the recorded engine's vectors
            return torch_cls(settings)                 # and PyTorch's agree at cosine >= 0.9999
        if asked not in AUTOMATIC:
            raise ModelError(f"exporting {settings.model} to ONNX failed ({type(e).__name__}: {str(e)[:300]}); "
                             "use --backend torch") from None
        log.warning("exporting %s to ONNX failed (%s: %s); using PyTorch", settings.model, type(e).__name__,
                    str(e)[:200])
        settings.backend = "auto"
        return torch_cls(settings)


def for_queries(settings, kind: str):
    """Query-time settings of a `kind`: bf16 documents are searched with ONNX queries (no torch
    import: cold search stays fast; fp32's vectors and bf16's agree at cosine >= 0.9999), and a
    dense query of documents encoded on the CPU (ONNX, bf16) runs in int8 where the CPU has VNNI
    (QUERY_INT8); an index built on PyTorch (--backend torch) is queried on it, one written before
    backends were recorded (EXACT) in fp32."""
    backend = getattr(settings, "backend", None)
    # LDR_QUERY_INT8=0: fp32 queries on every CPU (the same query vectors with or without VNNI)
    int8 = os.environ.get("LDR_QUERY_INT8", "1").strip().lower() not in ("0", "false", "no", "off")
    if int8 and kind in INT8_QUERY_KINDS and backend in (None, "auto", QUERY_INT8, "bf16", "onnx"):
        settings.backend = QUERY_INT8
    elif backend == "bf16":
        settings.backend = EXACT
    return settings


def vnni() -> bool:
    """Whether this CPU multiplies int8 in VNNI dot products (where dynamic int8 pays for a query)."""
    return quantization_config()["isa"] in ("avx512_vnni", "avx_vnni")


def bf16_context(enabled: bool):
    """inference mode, under bf16 autocast when `enabled` (matrix products in bf16, sums and
    norms in fp32)."""
    import contextlib

    import torch

    if not enabled:
        return torch.inference_mode()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode())
    stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    return stack


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def quantization_config() -> dict:
    """Dynamic int8 settings for the CPU this runs on (chosen here, never on the build machine).

    Weights are int8 per output channel (per-tensor loses too much: minimum cosine 0.91 against
    0.99 on MiniLM). Without VNNI, u8×s8 products can saturate the 16-bit accumulators of
    AVX2/AVX-512 (vpmaddubsw), so weights keep 7 bits there (reduce_range), as ONNX Runtime advises."""
    flags = cpu_flags()
    isa = "avx512_vnni" if "avx512_vnni" in flags else "avx_vnni" if "avx_vnni" in flags else \
        "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return {"isa": isa, "weights": "int8", "activations": "uint8", "per_channel": True,
            "reduce_range": isa not in ("avx512_vnni", "avx_vnni"), "fp32_layers": list(FP32_LAYERS)}


# -- an ONNX Runtime session --------------------------------------------------------------------

def threads() -> int:
    env = os.environ.get("LDR_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def onnx_folder(path) -> bool:
    """A pre-exported model folder (model.onnx + tokenizer.json, no PyTorch weights): ldr's ONNX
    engine runs it as it is, without torch (packaged int8 models, a user's own export)."""
    p = Path(path)
    return ((p / "model.onnx").is_file() and (p / "tokenizer.json").is_file()
            and not any(p.glob("*.safetensors")) and not (p / "pytorch_model.bin").exists())


def folder_meta(folder: Path) -> dict:
    """What ldr's own exports record in meta.json, read from a pre-exported folder's configs."""
    cfg: dict = {}
    for name in ("tokenizer_config.json", "config.json", "vectrix_config.json"):
        f = folder / name
        if f.is_file():
            try:
                cfg.update(json.loads(f.read_text()))
            except (OSError, ValueError) as e:
                raise ModelError(f"{f} is not readable JSON ({e})") from None
    limit = cfg.get("max_position_embeddings") or cfg.get("max_length") or cfg.get("model_max_length") or 512
    try:
        added = json.loads((folder / "tokenizer.json").read_text()).get("added_tokens") or []
    except (OSError, ValueError) as e:
        raise ModelError(f"{folder / 'tokenizer.json'} is not readable JSON ({e})") from None
    embeds = {"embeds": TABLE} if (folder / f"{TABLE}.npy").is_file() else {}   # ldr's export
    return {**embeds, "export": {"int8": None, "prebuilt": True}, "model_type": cfg.get("model_type", "bert"),
            "max_position_embeddings": int(min(limit, 8192)), "pad_token_id": cfg.get("pad_token_id", 0),
            "special_ids": sorted(t["id"] for t in added if isinstance(t, dict) and t.get("special"))}


_LOADER = ProcessPool(2, "ldr-ort-load")     # sessions load beside a cold search's other work


class OrtModel:
    """An exported model folder (model.onnx, tokenizer.json, meta.json) ready to run.

    The session (reading and initialising ~100 MB of graph) is created on a background thread:
    a cold search loads its dense and sparse models side by side and opens the index meanwhile;
    the first run waits for it."""

    def __init__(self, folder: Path):
        try:
            import onnxruntime as ort
        except ImportError:
            raise ModelError(f"ONNX Runtime is not installed: {ONNX_EXTRA} (or use --backend torch)") from None
        self.folder = Path(folder)
        meta = self.folder / "meta.json"
        self.meta = json.loads(meta.read_text()) if meta.is_file() else folder_meta(self.folder)
        self._inputs = self.meta.get("inputs")
        self._per_row = self._embeddings = None
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads()
        so.inter_op_num_threads = 1
        # no spinning after a run: ORT's idle threads spun on the cores the next stage needed (a
        # query's SPLADE encoding, numpy, tantivy; figures in bench/README.md)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        self._session = _LOADER.get().submit(
            ort.InferenceSession, str(self.folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
        self.tokenizer = FastTokenizer(self.folder, self.meta)

    def about(self, backend: str) -> dict:
        """What an encoder's describe() records about its engine."""
        return {"name": backend, "int8": self.meta["export"]["int8"], "fused": self.meta.get("fused")}

    @property
    def inputs(self) -> list[str]:
        """The graph's inputs (a pre-exported folder's are read from the graph itself)."""
        if self._inputs is None:
            self._inputs = [i.name for i in self.session.get_inputs()]
        return self._inputs

    @property
    def session(self):
        try:
            return self._session.result()
        except Exception as e:
            from .cache import cache_root

            why = f"({type(e).__name__}: {str(e)[:200]})"
            if Path(self.folder).resolve().is_relative_to(cache_root().resolve()):   # ldr's own export
                raise ModelError(f"the exported model {self.folder / 'model.onnx'} cannot be loaded {why}; delete "
                                 "that folder to export it again") from None
            raise ModelError(f"the ONNX model folder {self.folder} cannot be loaded {why}: its model.onnx is "
                             "damaged or not an ONNX graph; export it again, or give the model's PyTorch folder") \
                from None

    @property
    def per_row(self) -> bool:
        """Whether the graph quantises activations on the fly (dynamic int8: ldr's onnx-int8
        exports and the packaged int8 models). DynamicQuantizeLinear takes one scale per input
        tensor, so a row's output would depend on the rows batched with it and on their padding
        (MiniLM: up to 0.007 per coordinate): such a graph runs one unpadded row at a time, and
        the same text gets the same vector in any batch, an add or a fresh build."""
        if self._per_row is None:
            import mmap
            with open(self.folder / "model.onnx", "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                self._per_row = mm.find(b"DynamicQuantizeLinear") >= 0
        return self._per_row

    def release_memory(self) -> None:
        """Shrink ONNX Runtime's CPU arena to what a one-token run needs. The arena keeps its
        largest batch's activations for the session's life (MiniLM after a 32 x 512 batch: +1.1 GB
        RSS, kept by every cached encoder of a server or a library user's process). Shrinking after
        every batch cost 10-14% of the encoding time, so a writer asks once it has written its part."""
        if not self._session.done():
            return                          # still loading: nothing run yet
        import onnxruntime as ort

        options = ort.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        one = np.full((1, 1), int(self.meta.get("pad_token_id") or 0), dtype=np.int64)
        given = {"input_ids": one, "attention_mask": np.ones_like(one), "token_type_ids": np.zeros_like(one)}
        if "inputs_embeds" in self.inputs:
            given["inputs_embeds"] = self.embeddings[one]
        try:
            self.session.run(None, {n: given[n] for n in self.inputs}, options)
        except Exception:       # a graph with other inputs, or none for one token: it keeps its arena
            pass

    @property
    def embeddings(self) -> np.ndarray:
        """The token embedding table of a graph that takes its rows (`meta["embeds"]`, ldr's dense
        exports), memory-mapped: a process touches only the rows of the tokens it meets."""
        if self._embeddings is None:
            table = self.folder / f"{self.meta.get('embeds', TABLE)}.npy"
            try:
                self._embeddings = npy.load(table, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise ModelError(f"the ONNX model in {self.folder} takes token embeddings, and its table {table.name} "
                                 f"cannot be read ({str(e)[:200]}): copy it with model.onnx") from None
        return self._embeddings

    def run(self, ids: np.ndarray, mask: np.ndarray, token_type_ids: np.ndarray | None = None) -> np.ndarray:
        feed = {"input_ids": ids.astype(np.int64, copy=False), "attention_mask": mask.astype(np.int64, copy=False)}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = (np.zeros_like(feed["input_ids"]) if token_type_ids is None
                                      else token_type_ids.astype(np.int64, copy=False))
        if "inputs_embeds" in self.inputs:
            feed["inputs_embeds"] = self.embeddings[feed.pop("input_ids")]
        if len(ids) == 1 or not self.per_row:
            return self.session.run(None, feed)[0]
        lengths = feed["attention_mask"].sum(axis=1)     # right-padded rows (pad_np, the tokenizers)
        outs = [self.session.run(None, {k: v[i:i + 1, :max(int(lengths[i]), 1)] for k, v in feed.items()})[0]
                for i in range(len(ids))]
        if outs[0].ndim == 2:                            # one vector (or logits) per row
            return np.concatenate(outs)
        out = np.zeros((len(ids), ids.shape[1]) + outs[0].shape[2:], dtype=outs[0].dtype)
        for i, o in enumerate(outs):                     # per-token outputs: padded back to the batch
            out[i, :o.shape[1]] = o[0]
        return out


def pad_np(pieces, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) int64 arrays, right-padded."""
    n = max(len(x) for x in pieces)
    ids = np.full((len(pieces), n), pad_id, dtype=np.int64)
    mask = np.zeros((len(pieces), n), dtype=np.int64)
    for i, x in enumerate(pieces):
        ids[i, :len(x)] = x
        mask[i, :len(x)] = 1
    return ids, mask
