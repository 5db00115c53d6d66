"""Export a model to ONNX once, into a per-user cache keyed by the model's weights and the export
settings; later runs (and every query) load the cached graph without torch.

The exporter is torch's own (`torch.onnx.export`; optimum-onnx does not support the transformers
installed here), ONNX Runtime's optimizer fuses attention/LayerNorm/GELU for BERT-family models,
`quantize_dynamic` makes the int8 variant. What each graph returns:
- dense: the model's own sentence-transformers pooling of the token states (not normalised: ldr
  truncates Matryoshka dims and normalises after); BERT-family graphs take the token embedding
  table's rows, the table a .npy beside them (dense._onnx_module);
- splade: the MLM head's transformed states (batch, tokens, hidden); the vocabulary projection
  and the max over tokens run outside, a chunk at a time (mlm_head.py), so no (tokens ×
  vocabulary) logits tensor is ever whole;
- cross: the classification logits.
"""
from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ..errors import ModelError
from . import export_zygote
from .cache import build_once, cache_root, digest
from .runtime import ONNX_EXTRA, onnxruntime_available, quantization_config

log = logging.getLogger(__name__)

EXPORT_VERSION = 2          # bump when what an export writes changes (2: dense tables outside): old entries are ignored
KINDS = ("dense", "splade", "cross")
_FUSABLE = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert", "camembert": "bert"}


def weights_hash(model_dir: Path) -> str:
    """sha256 over the model's weight, config and tokenizer files, memoised per (file, size, mtime)
    so that a query does not re-read 100 MB of weights."""
    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file() and (
        p.suffix in (".safetensors", ".bin", ".pt") or p.name in ("config.json", "tokenizer.json", "vocab.txt",
                                                                   "modules.json", "sentence_bert_config.json")))
    # the sentence-transformers modules after the transformer (1_Pooling, 2_Dense, ...): their settings and weights
    files += sorted(p for p in Path(model_dir).glob("[0-9]*_*/*")
                    if p.is_file() and p.suffix in (".json", ".safetensors", ".bin"))
    if not files:
        raise ModelError(f"{model_dir} holds no model weights to export")
    return digest(files)


def export_key(kind: str, model_dir: Path, int8: bool) -> tuple[str, dict]:
    quant = quantization_config() if int8 else None
    settings = {"kind": kind, "weights": weights_hash(model_dir), "int8": quant, "export_version": EXPORT_VERSION}
    if kind == "splade":
        settings["head"] = "chunked"       # the vocabulary projection left out of the graph (mlm_head.py)
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24], settings


def exported(kind: str, model_dir: str, int8: bool = False, trust_remote_code: bool = False,
             temporary: bool = True) -> Path:
    """The cached export of `model_dir` (a local model folder) as `kind`, exported on a miss. When
    the cache cannot be written: `temporary` exports into a folder for this process only (an
    explicit --backend onnx), else CacheUnwritable (auto then runs on PyTorch: an export per
    process costs more than it saves: 19 s for MiniLM)."""
    model_dir = Path(model_dir)
    key, settings = export_key(kind, model_dir, int8)
    folder = cache_root() / "onnx" / f"{kind}-{key}"
    if (folder / "meta.json").is_file() and (folder / "model.onnx").is_file():
        return folder
    # int8 quantises the cached fp32 export's graph: no torch, no tracing (MiniLM: 2 s, not 11 s)
    base = exported(kind, model_dir, False, trust_remote_code, temporary) if int8 else None

    def make(work: Path) -> None:
        # shown by the CLI (a warning): the first run waits here for a minute or two with nothing
        # moving; said by the process that exports (another one waiting for it says so itself)
        log.warning("exporting %s (%s%s) to ONNX Runtime once; later runs reuse %s", label(model_dir), kind,
                    ", int8" if int8 else "", folder)
        isolated(kind, model_dir, work, settings, trust_remote_code, base)

    def elsewhere(e: OSError) -> Path:
        if not temporary:
            if str(folder.parent) not in _SAID:         # said once per process
                _SAID.add(str(folder.parent))
                log.warning("the ONNX cache %s is not writable (%s); the models run on PyTorch. Set "
                            "LDR_CACHE_DIR to a writable folder for ONNX Runtime's speed.",
                            folder.parent, e.strerror or e)
            raise CacheUnwritable(str(folder.parent))
        # a read-only or unwritable cache: export for this process only, and say how to fix it
        log.warning("the ONNX cache %s is not writable (%s); exporting into a temporary folder for this run "
                    "only. Set LDR_CACHE_DIR to a writable folder to keep exports.", folder.parent, e.strerror or e)
        import atexit
        import shutil

        work = Path(tempfile.mkdtemp(prefix=f"ldr-onnx-{kind}-"))
        atexit.register(shutil.rmtree, work, True)      # this process's only: gone when it ends
        make(work)
        return work

    return build_once(folder, "meta.json", make, elsewhere)


def query_engine_ready(kind: str, path: str, trust_remote_code: bool = False, wrapper=None) -> None:
    """A build exports the ONNX graph its queries will run on (runtime.for_queries), once per
    model, so that the first search does not pay the export; a failed export is only noted
    (queries then run on PyTorch). `wrapper`: the kind's export module (onnx_export.WRAPPERS)."""
    from .runtime import INT8_QUERY_KINDS, vnni

    if not onnxruntime_available() or not os.path.isdir(path):
        return
    if wrapper is not None:
        WRAPPERS.setdefault(kind, wrapper)
    try:
        exported(kind, path, kind in INT8_QUERY_KINDS and vnni(), trust_remote_code, temporary=False)
    except CacheUnwritable:
        pass                # said once already; queries run on PyTorch
    except Exception as e:  # noqa: BLE001 - the build itself does not need the graph
        log.warning("exporting the query engine of %s failed (%s); queries will run on PyTorch", path, e)


def label(model_dir: Path) -> str:
    """A model folder as a user knows it: a packaged model's folder is `<package>/model`."""
    return f"{model_dir.parent.name}/{model_dir.name}" if model_dir.name in ("model", "models") else model_dir.name


FAILED = "ldr-export-error: "     # marks the line of the child's stderr the user reads
_SAID: set[str] = set()           # unwritable caches already reported by this process


class ExportFailed(RuntimeError):
    """The exporter itself failed (a model whose code it cannot trace): `auto` falls back to
    PyTorch on it (runtime.with_fallback), an explicit ONNX backend reports it."""


class CacheUnwritable(ExportFailed):
    """No export was tried: the cache cannot be written (already said once, as a warning)."""


def isolated(kind: str, model_dir: Path, out: Path, settings: dict, trust_remote_code: bool,
             base: Path | None = None) -> None:
    """`_export` in a child Python (ldr.encode.export_child, forked from this process's warm
    export_zygote); with `base` (the fp32 export of the same model), `quantised` instead.
    Exporting MiniLM imports torch and transformers and keeps the optimizer's copies of the graph:
    1.3 GB that stayed in the build's process beside the encoders (a first `ldr index` of six
    transcripts peaked at 1.8 GB, later ones at 0.8 GB); the child takes them with it when it exits."""
    if base is None:
        unreadable_weights(kind, model_dir)
    wrapper = WRAPPERS.get(kind)
    spec = f"{wrapper.__module__}:{wrapper.__qualname__}" if wrapper is not None else ""
    env = dict(os.environ)
    # the child imports this same ldr whatever folder it starts in (one holding another clone)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    argv = [kind, str(model_dir), str(out), json.dumps(settings), "1" if trust_remote_code else "0", spec,
            str(base or "")]
    returncode, stderr = export_zygote.run(argv, env, torch=base is None,
                                           warm=wrapper.__module__ if wrapper is not None and base is None else None)
    if returncode == 0:
        return
    lines = stderr.strip().splitlines()
    reasons = [line[len(FAILED):] for line in lines if line.startswith(FAILED)]
    if reasons:
        raise ModelError(reasons[-1])
    last = lines[-1] if lines else f"exit status {returncode}"     # the exception's own line
    raise ExportFailed(f"exporting {label(model_dir)} ({kind}) to ONNX failed: {last[-600:]}")


def unreadable_weights(kind: str, model_dir: Path) -> None:
    """Raise ExportFailed when a .safetensors file of `model_dir` has no readable header: checked
    here in milliseconds (safetensors reads only the header), where the child would learn it after
    importing torch and transformers (7 s)."""
    try:
        from safetensors import safe_open
    except ImportError:     # no PyTorch stack here: the child says what is missing
        return
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with safe_open(str(f), framework="numpy"):
                pass
        except Exception as e:  # noqa: BLE001 - SafetensorError, OSError: either way not weights to export
            raise ExportFailed(f"exporting {label(model_dir)} ({kind}) to ONNX failed: {f.name} has no readable "
                               f"safetensors header ({str(e)[:200]})") from None


def load(kind: str, settings, backend: str, trust_remote_code: bool = False):
    """(model folder, OrtModel) for an encoder's `settings` on an ONNX `backend`, exported on a
    cache miss; records the absolute model path and the backend in `settings`."""
    from .models import resolve
    from .runtime import AUTOMATIC, OrtModel

    path, _ = resolve(settings.model)
    explicit = getattr(settings, "backend", None) not in AUTOMATIC and not getattr(settings, "from_index", False)
    if os.path.isdir(settings.model):   # an absolute path: search may run from another directory
        settings.model = path
    if not os.path.isdir(path):
        raise ModelError(f"--backend {backend} needs the model as a local folder (got {settings.model!r}); "
                         "download it first or use --backend torch")
    settings.backend = backend
    return path, OrtModel(exported(kind, path, int8=backend == "onnx-int8", trust_remote_code=trust_remote_code,
                                   temporary=explicit))


def _export(kind: str, model_dir: Path, out: Path, settings: dict, trust_remote_code: bool) -> None:
    try:
        import onnx  # noqa: F401  (the quantizer and the optimizer need it)
        import torch
    except ImportError as e:
        raise ModelError(f"exporting a model to ONNX needs torch and onnx ({e.name} is missing): {ONNX_EXTRA}") from None
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    log.info("exporting %s (%s) to ONNX in %s", model_dir, kind, out)
    module, meta, config, tokenizer = _wrapped(kind, model_dir, trust_remote_code)
    vocab = int(getattr(config, "vocab_size", 1000) or 1000)
    ids = torch.randint(min(5, vocab - 1), vocab, (2, 16))     # example ids: any in the vocabulary
    # a cross-encoder tells query from passage by token types; the other graphs fill zeros inside
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if kind == "cross" and
                                               "token_type_ids" in tokenizer.model_input_names else [])
    example = (ids, torch.ones_like(ids)) + ((torch.zeros_like(ids),) if len(names) == 3 else ())
    if meta.get("embeds"):      # the graph takes the embedding table's rows (OrtModel.run gathers them)
        names[0], example = "inputs_embeds", (torch.randn(2, 16, config.hidden_size),) + example[1:]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"output": meta.pop("output_axes", {0: "batch"})}
    raw = out / "raw.onnx"
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        # the TorchScript exporter: one self-contained file, dynamic batch and length
        torch.onnx.export(module, example, str(raw), input_names=names,
                          output_names=["output"], dynamic_axes=axes, opset_version=17, dynamo=False)
    graph = raw
    del module, example     # the traced model's tensors are not needed by the optimizer: peak -0.2 GB
    gc.collect()
    fused = _FUSABLE.get(config.model_type)
    if fused:
        graph = out / "fused.onnx"
        meta["fused"] = fuse(raw, graph, fused, config.num_attention_heads, config.hidden_size)
    if settings["int8"]:
        q = settings["int8"]
        quantise(graph, out / "model.onnx", q, layer_matmuls(graph, q.get("fp32_layers", ())))
    else:
        os.replace(graph, out / "model.onnx")
    for leftover in (raw, out / "fused.onnx"):
        leftover.unlink(missing_ok=True)
    for name, array in meta.pop("arrays", {}).items():     # weights run outside the graph (.npy: data)
        np.save(out / f"{name}.npy", array, allow_pickle=False)
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    meta.update(export=settings, inputs=names, source=str(model_dir), pad_token_id=tokenizer.pad_token_id or 0,
                special_ids=sorted(set(tokenizer.all_special_ids)), model_input_names=list(tokenizer.model_input_names),
                torch=torch.__version__)
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def quantised(base: Path, out: Path, settings: dict) -> None:
    """The int8 export `settings` from `base`, the fp32 export of the same model: its graph quantised,
    its tokenizer, arrays and description (naming the int8 settings) kept. `_export`'s, no torch."""
    import shutil

    meta = json.loads((base / "meta.json").read_text())
    if meta.get("export", {}).get("weights") != settings["weights"] or meta["export"].get("int8") is not None:
        raise ModelError(f"{base} is not the fp32 export of the model to quantise")
    q = settings["int8"]
    quantise(base / "model.onnx", out / "model.onnx", q, layer_matmuls(base / "model.onnx", q.get("fp32_layers", ())))
    for f in base.iterdir():
        if f.suffix == ".npy" or f.name == "tokenizer.json":
            try:        # a link: cache entries never change (e5's table is 384 MB)
                os.link(f, out / f.name)
            except OSError:
                shutil.copyfile(f, out / f.name)
    meta["export"] = settings
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def fuse(raw: Path, dest: Path, model_type: str, num_heads: int, hidden_size: int) -> dict:
    """ONNX Runtime's transformer fusions of `raw` into `dest`; returns the fused operators' counts.

    The optimizer's shape inference copies the whole model at each of its passes and keeps the
    copies: on multilingual-e5 (a 470 MB graph, most of it the 250k-token embedding) it peaked at
    3.8 GB and took 6-9 s. So the weights go to a side file first and the optimizer sees a graph
    that only names them; the few it combines (attention's Q/K/V) it reads from that file, through
    a path relative to the working directory: this runs in the export's own child process
    (`isolated`), which may change it. Same fused graph, 0.6 GB, 1.5 s."""
    import contextlib

    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    raw, dest = Path(raw).resolve(), Path(dest).resolve()      # the working directory changes below
    with tempfile.TemporaryDirectory(prefix="fuse-", dir=dest.parent) as tmp:
        work = Path(tmp)
        onnx.save(onnx.load(str(raw)), str(work / "raw.onnx"), save_as_external_data=True,
                  all_tensors_to_one_file=True, location="weights.bin", size_threshold=1024)
        with contextlib.chdir(work):
            # opt_level 0: the fusions only; ONNX Runtime's own graph optimizations run at each load
            opt = optimize_model(onnx.load("raw.onnx", load_external_data=False), model_type=model_type,
                                 num_heads=num_heads, hidden_size=hidden_size, opt_level=0)
            if not any(o.domain == "com.microsoft" for o in opt.model.opset_import):   # the fused ops' domain
                opt.model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
            onnx.save(opt.model, "fused.onnx")
            stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
            del opt
        onnx.save(onnx.load(str(work / "fused.onnx")), str(dest))     # one self-contained file again
    return stats


def layer_matmuls(graph: Path, layers) -> list[str]:
    """Names of the MatMul nodes of the given transformer layers (the exporter names them
    `.../layer.N/...`)."""
    import onnx

    wanted = set(layers)
    return [n.name for n in onnx.load(str(graph)).graph.node if n.op_type == "MatMul" and
            (m := re.search(r"(?:^|/)layer\.(\d+)/", n.name)) and int(m.group(1)) in wanted]


def quantise(graph: Path, out: Path, q: dict, keep_fp32: list[str]) -> None:
    """Dynamic int8 (runtime.quantization_config's settings `q`) of every MatMul but `keep_fp32`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)   # the quantizer logs advice on the root logger ("consider pre-processing")
    try:
        quantize_dynamic(str(graph), str(out), weight_type=QuantType.QInt8, per_channel=q["per_channel"],
                         reduce_range=q["reduce_range"], op_types_to_quantize=["MatMul"],
                         nodes_to_exclude=keep_fp32, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)


# kind → fn(model_dir, trust_remote_code) → (torch module, meta, config, tokenizer); e.g. ldr.encode.dense
WRAPPERS: dict = {}


def _wrapped(kind: str, model_dir: Path, trust_remote_code: bool):
    """(torch module taking (input_ids, attention_mask), facts about the model, config, tokenizer)."""
    import torch

    def fast(tokenizer):
        # checked on the tokenizer the model is loaded with: loading multilingual-e5's 250k-token
        # tokenizer a second time only to check it took 1.5 s of the export
        if not getattr(tokenizer, "is_fast", False):
            raise ModelError(f"{model_dir} has no fast tokenizer (tokenizer.json); use --backend torch")
        return tokenizer

    if kind in WRAPPERS:     # registered by the encoder module that owns the kind (no import back)
        module, meta, config, tokenizer = WRAPPERS[kind](model_dir, trust_remote_code)
        return module, meta, config, fast(tokenizer)
    if kind not in ("splade", "cross"):     # a dense export without its wrapper would be a cross-encoder's graph
        raise ModelError(f"no ONNX export of the {kind} kind is registered (its encoder module registers it)")
    from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

    cls = AutoModelForMaskedLM if kind == "splade" else AutoModelForSequenceClassification
    try:
        model = cls.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code).eval()
    except OSError as e:
        raise ModelError(f"cannot load {model_dir} for export: {str(e)[:200]}") from None
    _eager(model)
    tokenizer = fast(_tokenizer(model_dir, trust_remote_code))
    meta = {"kind": kind, "architecture": type(model).__name__, "vocab_size": model.config.vocab_size,
            "max_position_embeddings": int(getattr(model.config, "max_position_embeddings", 512)),
            "model_type": model.config.model_type}

    if kind == "splade":    # the graph stops before the vocabulary projection (mlm_head.py)
        from .mlm_head import split_mlm_head
        head_w, head_b = split_mlm_head(model)
        meta.update(arrays={"head_weight": head_w, "head_bias": head_b}, output_axes={0: "batch", 1: "tokens"})

    class Splade(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits.float()

    class Cross(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kw).logits.float()

    return (Splade() if kind == "splade" else Cross()).eval(), meta, model.config, tokenizer


def _tokenizer(model_dir: Path, trust_remote_code: bool):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)


def _eager(model) -> None:
    """Plain attention ops, which ONNX Runtime's optimizer fuses (SDPA's export does not fuse)."""
    try:
        model.set_attn_implementation("eager")
    except Exception:       # older transformers, or a model without the switch
        model.config._attn_implementation = "eager"
