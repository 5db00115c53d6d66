"""BERT folders run by PyTorch alone, for the bf16 engines (dense and SPLADE).

The bf16 engines ran transformers' models, the dense one loaded through sentence-transformers:
importing the two took ~4.5 s of a 27 s dense-only `ldr index` of 2,000 passages (torch alone:
~1.1 s). This module runs the same operations in the same order on the same weights (embeddings,
post-norm layers, exact GELU, ldr's bf16 attention; the masked-LM's prediction transform) and a
sentence-transformers folder's mean or CLS pooling as sentence-transformers computes it, so a text
gets the same vector and the same SPLADE weights to the bit (the tests compare them). It covers
folders of exactly that shape: BertModel (Transformer + Pooling (+ Normalize) modules) or
BertForMaskedLM, absolute positions, float32 safetensors, tokenizer.json. Any other folder, or an
extension strategy (they patch transformers' modules), loads through transformers as before.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from .bf16_attention import windowed_attention

def plain_folder(path) -> dict | None:
    """What this module needs of the folder at `path` (config, pooling, length, prompts), or None
    when the folder is not one it runs exactly as transformers would."""
    p = Path(path)
    try:
        modules = json.loads((p / "modules.json").read_text())
        config = json.loads((p / "config.json").read_text())
        st = json.loads((p / "sentence_bert_config.json").read_text())
        pool = json.loads((p / "1_Pooling" / "config.json").read_text())
        about = p / "config_sentence_transformers.json"
        prompts = (json.loads(about.read_text()).get("prompts") or {}) if about.is_file() else {}
    except (OSError, ValueError, AttributeError):
        return None
    if not (isinstance(modules, list) and isinstance(st, dict) and isinstance(pool, dict)
            and isinstance(prompts, dict) and _plain_bert(config, p, "BertModel")):
        return None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] if isinstance(m, dict) else "" for m in modules]
    modes = [m for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens",
                         "lasttoken") if pool.get(f"pooling_mode_{m}")]
    width = int(pool.get("word_embedding_dimension") or config.get("hidden_size") or 0)
    head = None
    if kinds[2:] in (["Normalize", "Dense"], ["Normalize", "Dense", "Normalize"]):   # `ldr train whitening`'s
        head = _linear_head(p, modules[3].get("path"), width)
        if head is None:
            return None
        kinds = kinds[:2]
    plain = (kinds[:2] == ["Transformer", "Pooling"] and set(kinds[2:]) <= {"Normalize"} and len(kinds) <= 3
             and modules[0].get("path") in ("", None) and modules[1].get("path") == "1_Pooling"
             and modes in (["cls_token"], ["mean_tokens"]) and pool.get("include_prompt", True)
             and isinstance(st.get("max_seq_length"), int) and not st.get("do_lower_case")
             # anything else sentence-transformers would pass to the model or its tokenizer
             and not any(v for k, v in st.items() if k not in ("max_seq_length", "do_lower_case")))
    if not plain:
        return None
    return {"config": config, "pooling": "cls" if modes == ["cls_token"] else "mean",
            "max_seq_length": st["max_seq_length"], "prompts": dict(prompts), "width": width, "head": head,
            "dim": head["out"] if head else width}


def _linear_head(folder: Path, sub, width: int) -> dict | None:
    """A Dense module after a Normalize that this module runs (identity activation, float32
    safetensors inside the model folder, `width` inputs): {"path", "out", "bias"}, or None."""
    if not isinstance(sub, str) or not sub or Path(sub).is_absolute() or ".." in Path(sub).parts:
        return None
    where = folder / sub
    try:
        if not where.resolve().is_relative_to(folder.resolve()):
            return None          # a link out of the model folder: not read
        cfg = json.loads((where / "config.json").read_text())
        weights = where / "model.safetensors"
        if not (isinstance(cfg, dict) and cfg.get("activation_function") == "torch.nn.modules.linear.Identity"
                and cfg.get("in_features") == width and isinstance(cfg.get("out_features"), int)
                and cfg["out_features"] > 0 and _float32(weights)):
            return None
        from safetensors import safe_open

        with safe_open(str(weights), "pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (OSError, ValueError):
        return None
    bias = bool(cfg.get("bias", True))
    want = {"linear.weight": (cfg["out_features"], width), **({"linear.bias": (cfg["out_features"],)} if bias else {})}
    return {"path": str(weights), "out": cfg["out_features"], "bias": bias} if shapes == want else None


def plain_mlm(path) -> dict | None:
    """The config of a BertForMaskedLM folder (a SPLADE model) this module runs exactly, or None."""
    p = Path(path)
    try:
        config = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if _plain_bert(config, p, "BertForMaskedLM") else None


def _plain_bert(config, p: Path, architecture: str) -> bool:
    """A BERT of transformers' `architecture` with absolute positions, exact GELU, no decoder
    parts, its weights in safetensors and its tokenizer in tokenizer.json."""
    try:
        return bool(isinstance(config, dict) and config.get("model_type") == "bert"
                    and config.get("architectures", [architecture]) == [architecture]
                    and config.get("position_embedding_type", "absolute") == "absolute"
                    and config.get("hidden_act") == "gelu" and not config.get("is_decoder")
                    and not config.get("add_cross_attention") and config.get("num_attention_heads")
                    and config["hidden_size"] % config["num_attention_heads"] == 0
                    and (p / "tokenizer.json").is_file() and _float32(p / "model.safetensors"))
    except (KeyError, TypeError):
        return False


def _float32(weights: Path) -> bool:
    """Every floating tensor of the file float32 (its header alone read): transformers keeps
    another dtype and computes in it, which this module does not copy. (Integer tensors, such as
    a saved position_ids buffer, are not weights.)"""
    from safetensors import safe_open

    try:
        with safe_open(str(weights), "pt") as f:
            return all(f.get_slice(k).get_dtype() in ("F32", "I64", "I32") for k in f.keys())
    except Exception:      # not a file, or not safetensors: transformers says what is wrong with it
        return False


class _Linear(nn.Linear):
    def reset_parameters(self):
        """Nothing: the checkpoint's weights replace these (a random init on the meta device runs
        through torch._refs, whose first call imports torch._dynamo: ~0.8 s of every load)."""


class _Embedding(nn.Embedding):
    def reset_parameters(self):
        """Nothing, as _Linear's."""


class _Embeddings(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.word_embeddings = _Embedding(c["vocab_size"], c["hidden_size"], padding_idx=c.get("pad_token_id"))
        self.position_embeddings = _Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = _Embedding(c.get("type_vocab_size", 2), c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c.get("layer_norm_eps", 1e-12))

    def forward(self, input_ids, token_type_ids, position_ids):
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x + self.position_embeddings(position_ids))


class _Layer(nn.Module):
    """transformers' BertLayer at inference, its modules named as in the checkpoint."""

    def __init__(self, c: dict):
        super().__init__()
        h, eps = c["hidden_size"], c.get("layer_norm_eps", 1e-12)
        self.heads = c["num_attention_heads"]
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        for name in ("query", "key", "value"):
            setattr(self.attention.self, name, _Linear(h, h))
        self.attention.output = nn.Module()
        self.attention.output.dense, self.attention.output.LayerNorm = _Linear(h, h), nn.LayerNorm(h, eps=eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = _Linear(h, c["intermediate_size"])
        self.output = nn.Module()
        self.output.dense = _Linear(c["intermediate_size"], h)
        self.output.LayerNorm = nn.LayerNorm(h, eps=eps)

    def forward(self, x, mask):
        att, shape = self.attention, (*x.shape[:-1], -1, x.shape[-1] // self.heads)
        q, k, v = (getattr(att.self, n)(x).view(*shape).transpose(1, 2) for n in ("query", "key", "value"))
        a, _ = windowed_attention(att.self, q, k, v, mask, scaling=shape[-1] ** -0.5)
        a = att.output.LayerNorm(att.output.dense(a.reshape(*x.shape[:-1], -1).contiguous()) + x)
        return self.output.LayerNorm(self.output.dense(nn.functional.gelu(self.intermediate.dense(a))) + a)


class PlainBert(nn.Module):
    """BertModel's last hidden state (no pooler: pooling is the folder's own)."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = SimpleNamespace(**config)
        self.embeddings = _Embeddings(config)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(_Layer(config) for _ in range(config["num_hidden_layers"]))

    def forward(self, input_ids, attention_mask, token_type_ids=None, position_ids=None):
        b, n = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(n).unsqueeze(0)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        # the keys each row may attend to, as transformers' sdpa mask gives them (None: all)
        mask = None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return SimpleNamespace(last_hidden_state=x)


class Pooling:
    """sentence-transformers' Pooling (mean or CLS, prompt included) as its forward computes it."""

    def __init__(self, mode: str, dim: int):
        self.mode, self.dim = mode, dim

    def __call__(self, features: dict) -> dict:
        x, mask = features["token_embeddings"], features["attention_mask"]
        if self.mode == "cls":
            first = mask.to(torch.int).argmax(dim=1)
            out = torch.gather(x, 1, first.unsqueeze(-1).unsqueeze(1).expand(-1, 1, x.shape[-1])).squeeze(1)
        else:
            acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
            m = mask.unsqueeze(-1).to(x.dtype)
            out = ((x * m).sum(dim=1, dtype=acc) / torch.clamp(m.sum(dim=1, dtype=acc), min=1e-9)).to(x.dtype)
        features["sentence_embedding"] = torch.cat([out], dim=-1)
        return features

    def get_config_dict(self) -> dict:
        return {"embedding_dimension": self.dim, "pooling_mode": self.mode, "include_prompt": True}


class LinearHead:
    """sentence-transformers' Normalize then Dense (identity activation) after the pooling, in
    float32 even under bf16 autocast: a whitening's matrix raises the faint directions, where
    bf16's rounding would be raised with them."""

    def __init__(self, head: dict):
        from safetensors.torch import load_file

        w = load_file(head["path"])
        self.weight, self.bias = w["linear.weight"], w.get("linear.bias")
        self.out = head["out"]

    def __call__(self, features: dict) -> dict:
        with torch.autocast("cpu", enabled=False):
            x = nn.functional.normalize(features["sentence_embedding"].float(), dim=-1)
            features["sentence_embedding"] = nn.functional.linear(x, self.weight, self.bias)
        return features

    def get_config_dict(self) -> dict:
        return {"normalize": True, "dense": {"in_features": self.weight.shape[1], "out_features": self.out,
                                             "bias": self.bias is not None, "dtype": "float32"}}


class PlainMlm(nn.Module):
    """BertForMaskedLM with its vocabulary projection taken out (mlm_head.split_mlm_head's
    shape): `logits` are the prediction head's transformed states, (batch, tokens, hidden)."""

    def __init__(self, config: dict):
        super().__init__()
        h = config["hidden_size"]
        self.config = SimpleNamespace(**config)
        self.bert = PlainBert(config)
        self.cls = nn.Module()
        self.cls.predictions = nn.Module()
        self.cls.predictions.transform = nn.Module()
        self.cls.predictions.transform.dense = _Linear(h, h)
        self.cls.predictions.transform.LayerNorm = nn.LayerNorm(h, eps=config.get("layer_norm_eps", 1e-12))

    def forward(self, input_ids, attention_mask):
        t = self.cls.predictions.transform
        x = self.bert(input_ids, attention_mask).last_hidden_state
        return SimpleNamespace(logits=t.LayerNorm(nn.functional.gelu(t.dense(x))))


def _weights(path, model: nn.Module, prefix: str = "", also: tuple = ()) -> dict:
    """The tensors of model.safetensors that `model` (built on the meta device: nothing allocated
    yet) and `also` need, each checked against the shape the config gave before any is read: a
    config whose sizes the file does not hold is an error, not gigabytes allocated. float32 only
    (transformers would keep another dtype, and compute in it). Nothing in the folder runs;
    LayerNorm's old names (gamma, beta) read as transformers renames them."""
    from safetensors import safe_open

    renamed = {".gamma": ".weight", ".beta": ".bias"}
    want = {prefix + k: tuple(v.shape) for k, v in model.state_dict().items()}
    out = {}
    with safe_open(str(Path(path) / "model.safetensors"), "pt") as f:
        names = {next((k[:-len(o)] + n for o, n in renamed.items() if k.endswith(o)), k): k for k in f.keys()}
        missing = sorted(set(want) - set(names))
        if missing:
            raise KeyError(f"model.safetensors lacks {missing[:3]}")
        for name in [*want, *(a for a in also if a in names)]:
            part = f.get_slice(names[name])
            if part.get_dtype() != "F32" or (name in want and tuple(part.get_shape()) != want[name]):
                raise ValueError(f"model.safetensors holds {names[name]} as {part.get_dtype()} "
                                 f"{part.get_shape()}, where config.json implies F32 {list(want.get(name, []))}")
            out[name] = f.get_tensor(names[name])
    return out


def _layers(path, config: dict) -> str:
    """The checkpoint's prefix ("bert." or ""), after checking it holds the layers config.json
    counts (a config of a million layers would build a million modules, even on the meta device)."""
    import re

    from safetensors import safe_open

    with safe_open(str(Path(path) / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    prefix = "bert." if any(k.startswith("bert.") for k in keys) else ""
    held = {m.group(1) for k in keys if (m := re.match(re.escape(prefix) + r"encoder\.layer\.(\d+)\.", k))}
    n = int(config["num_hidden_layers"])
    if len(held) != n or held != {str(i) for i in range(n)}:
        raise ValueError(f"config.json counts {config['num_hidden_layers']} layers, model.safetensors holds "
                         f"{len(held)}")
    return prefix


def _fill(model: nn.Module, weights: dict, prefix: str = "") -> nn.Module:
    model.load_state_dict({k: weights[prefix + k] for k in model.state_dict()}, assign=True)
    return model.eval()


def load(path, facts: dict) -> PlainBert:
    """The model of a folder plain_folder accepted (its checkpoint's names with or without "bert.")."""
    prefix = _layers(path, facts["config"])
    with torch.device("meta"):
        model = PlainBert(facts["config"])
    return _fill(model, _weights(path, model, prefix), prefix)


def load_mlm(path, config: dict):
    """(the model of a folder plain_mlm accepted, its vocabulary projection W (hidden, vocabulary)
    and bias as float32 arrays), as split_mlm_head gives them of transformers' model."""
    import numpy as np

    if _layers(path, config) != "bert.":
        raise KeyError("model.safetensors lacks the bert. weights of a masked-LM")
    with torch.device("meta"):
        model = PlainMlm(config)
    weights = _weights(path, model, also=("cls.predictions.decoder.weight", "cls.predictions.bias",
                                          "cls.predictions.decoder.bias"))
    model = _fill(model, weights)
    tied = config.get("tie_word_embeddings", True)      # transformers ties the projection to the inputs'
    w = weights["bert.embeddings.word_embeddings.weight" if tied else "cls.predictions.decoder.weight"]
    bias = weights.get("cls.predictions.bias", weights.get("cls.predictions.decoder.bias"))
    if tuple(w.shape) != (config["vocab_size"], config["hidden_size"]) or \
            (bias is not None and tuple(bias.shape) != (config["vocab_size"],)):
        raise ValueError(f"model.safetensors' vocabulary projection is {list(w.shape)}, config.json implies "
                         f"{[config['vocab_size'], config['hidden_size']]}")
    w = np.ascontiguousarray(w.float().numpy().T)
    return model, w, (bias.float().numpy().copy() if bias is not None else np.zeros(w.shape[1], np.float32))
