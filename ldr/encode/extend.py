"""Context-window extension by patching a loaded model (LongEmbed).

Absolute positions (BERT-style learned table): GP (pid → floor(pid/s)), RP (pid → pid mod L_o)
and PI (an interpolated table E_t with E_t[i·s] = E_o[i]; inputs within L_o keep their exact
original rows). These act through `position_ids` and, for PI, a new position table.

Rotary positions: PI (positions / s, i.e. inv_freq / s), NTK (base θ → θ·λ) and SelfExtend
(neighbour window w at normal relative positions, grouped positions floor(·/g) beyond it). PI and
NTK rewrite every `*inv_freq` buffer; SelfExtend and the optional log-length attention scaling go
through a registered attention function, so no model code is forked.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import torch

from ..errors import ConfigError

log = logging.getLogger(__name__)

APE_METHODS = ("gp", "rp", "pi")
ROPE_METHODS = ("pi", "ntk", "selfextend")
_ATTN_NAME = "ldr_extended"
# NTK λ used by LongEmbed for s = 2, 4, 8; beyond that λ = 1.25·s ("slightly above s").
_NTK_LAMBDA = {2: 3.0, 4: 5.0, 8: 10.0}


@dataclass
class Extension:
    method: str                     # gp | rp | pi | ntk | selfextend
    target_length: int = 4096
    ntk_lambda: float | None = None
    group: int | None = None        # SelfExtend g
    window: int | None = None       # SelfExtend w
    attn_scaling: bool = False      # scale logits by log(n)/log(L_o) beyond L_o

    def to_dict(self) -> dict:
        return asdict(self)


def position_kind(model: torch.nn.Module) -> str:
    """'ape', 'rope' or 'other' (e.g. ALiBi, which needs no position patching)."""
    if any(name.endswith("inv_freq") for name, _ in model.named_buffers()):
        return "rope"
    if _position_table(model) is not None:
        return "ape"
    return "other"


def _position_table(model):
    emb = getattr(model, "embeddings", None)
    table = getattr(emb, "position_embeddings", None)
    return table if isinstance(table, torch.nn.Embedding) else None


def ape_offset(model) -> int:
    """RoBERTa-family tables start after the padding index (positions pad+1, pad+2, ...)."""
    table = _position_table(model)
    return (table.padding_idx + 1) if table is not None and table.padding_idx is not None else 0


def trained_length(model) -> int:
    table = _position_table(model)
    if table is not None:
        return table.num_embeddings - ape_offset(model)
    return int(getattr(model.config, "max_position_embeddings", 512))


def scale_factor(target: int, trained: int) -> int:
    return max(1, math.ceil(target / trained))


def ape_position_ids_batch(method: str, lengths: list[int], n: int, trained: int, s: int) -> torch.Tensor:
    """(rows, n) position ids for a right-padded batch: each row's from its own length, so a
    document's vector does not depend on what else is in its batch."""
    return torch.stack([ape_position_ids(method, n, trained, s, length=L) for L in lengths])


def ape_position_ids(method: str, n: int, trained: int, s: int, length: int | None = None) -> torch.Tensor:
    """Position ids (0-based, before any table offset) for n slots of an input of `length`
    tokens (default n). Padding slots past the length (masked out) take position 0, so that they
    never index past the table."""
    length = n if length is None else length
    pid = torch.arange(n)
    if method == "gp":
        # LongEmbed's grouping factor comes from the input's own length: ceil(length / L_o), so
        # an input within the window (a query) keeps its plain positions
        out = pid // max(1, math.ceil(length / trained))
    elif method == "rp":
        out = pid % trained
    elif method == "pi":
        # an input within the window keeps its exact original rows of the interpolated table
        out = pid if length > trained else pid * s
    else:
        raise ConfigError(f"{method!r} is not an absolute-position extension method ({', '.join(APE_METHODS)})")
    return torch.where(pid < length, out, torch.zeros_like(out))


def interpolate_table(weight: torch.Tensor, s: int) -> torch.Tensor:
    """E_t with E_t[i·s] = E_o[i], linear in between; rows past the last point repeat E_o[-1]."""
    lo = weight.shape[0]
    pos = torch.arange(lo * s, dtype=torch.float64) / s
    left = pos.floor().long().clamp(max=lo - 1)
    right = (left + 1).clamp(max=lo - 1)
    frac = (pos - left).to(weight.dtype).unsqueeze(1)
    return weight[left] * (1 - frac) + weight[right] * frac


def apply_ape_pi(model, s: int) -> None:
    table = _position_table(model)
    off = ape_offset(model)
    w = table.weight.data
    new = torch.cat([w[:off], interpolate_table(w[off:], s)]) if off else interpolate_table(w, s)
    emb = torch.nn.Embedding(new.shape[0], new.shape[1], padding_idx=table.padding_idx,
                             dtype=w.dtype, device=w.device)
    emb.weight.data.copy_(new)
    model.embeddings.position_embeddings = emb


def ntk_lambda(ext: Extension, s: int) -> float:
    return float(ext.ntk_lambda) if ext.ntk_lambda else _NTK_LAMBDA.get(s, 1.25 * s)


def _inv_freq_buffers(model):
    for mod_name, module in model.named_modules():
        for name, buf in list(module.named_buffers(recurse=False)):
            if name.endswith("inv_freq"):
                yield module, name, buf


def rope_base(inv_freq: torch.Tensor) -> float:
    """θ from inv_freq = θ^(-2i/d): inv_freq[1] = θ^(-2/d)."""
    d = 2 * inv_freq.numel()
    return float(inv_freq[1].double() ** (-d / 2))


def apply_rope_pi(model, s: float) -> None:
    for module, name, buf in _inv_freq_buffers(model):
        setattr(module, name, buf / s)


def apply_rope_ntk(model, lam: float) -> None:
    """θ → θ·λ for every rotary table; inv_freq' = inv_freq^(log(θλ)/log θ)."""
    for module, name, buf in _inv_freq_buffers(model):
        theta = rope_base(buf)
        exponent = math.log(theta * lam) / math.log(theta)
        setattr(module, name, (buf.double() ** exponent).to(buf.dtype))


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate(x, pos, inv_freq, sign=1.0):
    """Rotate x (b, h, n, d) by RoPE angles pos·inv_freq (sign -1 undoes a rotation)."""
    freqs = pos.to(torch.float32)[:, None] * inv_freq.to(x.device, torch.float32)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    rot_dim = cos.shape[-1]
    xr, rest = x[..., :rot_dim], x[..., rot_dim:]
    out = xr * cos + sign * _rotate_half(xr) * sin
    return torch.cat((out, rest), dim=-1) if rest.numel() else out


_BLOCK = 256   # query rows per block: memory grows with block x n, not n x n


def _extended_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention with SelfExtend position grouping and/or log-length scaling (eager math),
    computed a block of query rows at a time so that 16k-token inputs fit in a few GB.

    Returns the attention weights only when the input fits one block (they would be n x n)."""
    cfg = getattr(module, "_ldr_ext", None) or {}
    n_q, n_k = query.shape[-2], key.shape[-2]
    if key.shape[1] != query.shape[1]:  # grouped-query attention: repeat key/value heads
        rep = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    factor = None
    if cfg.get("attn_scaling") and n_k > cfg["trained"]:
        # log(n)/log(L_o) from each row's own length (its unmasked keys), not the padded width
        lengths = _row_lengths(attention_mask, query.shape[0], n_k, query.device)
        factor = torch.where(lengths > cfg["trained"], lengths.clamp(min=2).log() / math.log(cfg["trained"]),
                             torch.ones_like(lengths)).to(query.dtype)[:, None, None, None]
    g, w = cfg.get("group"), cfg.get("window")
    grouped = bool(g and w and n_k > w)
    pos_k = torch.arange(n_k, device=query.device)
    if grouped:
        inv_freq = cfg["inv_freq"]()
        # Grouped positions; the shift w - floor(w/g) keeps relative distances continuous at |i-j| = w.
        shift = w - w // g
        kg = _rotate(_rotate(key, pos_k, inv_freq, sign=-1.0), pos_k // g, inv_freq).transpose(2, 3)
    causal = attention_mask is None and getattr(module, "is_causal", False) and n_q > 1
    outs, all_weights = [], []
    for start in range(0, n_q, _BLOCK):
        rows = slice(start, min(n_q, start + _BLOCK))
        q = query[:, :, rows]
        pos_q = torch.arange(rows.start, rows.stop, device=query.device)
        scores = torch.matmul(q, key.transpose(2, 3)) * scaling
        if grouped:
            q_raw = _rotate(q, pos_q, inv_freq, sign=-1.0)
            below = torch.matmul(_rotate(q_raw, pos_q // g + shift, inv_freq), kg) * scaling  # keys j < i
            above = torch.matmul(_rotate(q_raw, pos_q // g - shift, inv_freq), kg) * scaling  # keys j > i
            rel = pos_q[:, None] - pos_k[None, :]
            scores = torch.where(rel.abs() < w, scores, torch.where(rel > 0, below, above))
            del below, above, q_raw
        if factor is not None:
            scores = scores * factor
        if causal:
            # as in transformers' sdpa path: no mask + a causal layer means "causal, no padding"
            allowed = pos_k[None, :] <= pos_q[:, None] + (n_k - n_q)
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        elif attention_mask is not None:
            m = attention_mask[..., rows, :n_k] if attention_mask.shape[-2] > 1 else attention_mask[..., :n_k]
            if m.dtype == torch.bool:
                scores = scores.masked_fill(~m, torch.finfo(scores.dtype).min)
            else:
                scores = scores + m
        weights = torch.softmax(scores.float(), dim=-1).to(query.dtype)
        del scores
        outs.append(torch.matmul(weights, value))
        if n_q <= _BLOCK:
            all_weights.append(weights)
    out = torch.cat(outs, dim=2).transpose(1, 2).contiguous()
    return out, (all_weights[0] if all_weights else None)


def _row_lengths(attention_mask, rows: int, n_k: int, device) -> torch.Tensor:
    """Tokens per row of a padded batch: the most keys any query of the row may attend to
    (the last query for causal models, any real one for bidirectional ones)."""
    if attention_mask is None:
        return torch.full((rows,), float(n_k), device=device)
    m = attention_mask[..., :n_k]
    if m.dim() == 2:
        m = m[:, None, None, :]
    allowed = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    lengths = allowed.sum(-1).amax(dim=(1, 2)).to(torch.float32)
    return lengths.expand(rows) if lengths.shape[0] == 1 else lengths


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(_ATTN_NAME, _extended_attention)
    # Without a registered mask builder, transformers passes no padding mask to a custom attention.
    AttentionMaskInterface.register(_ATTN_NAME, eager_mask)


def _attention_modules(model):
    for module in model.modules():
        if hasattr(module, "layer_idx") and "attention" in type(module).__name__.lower() \
                and any(isinstance(c, torch.nn.Linear) for c in module.children()):
            yield module


def _inv_freq_for(model, module):
    """The rotary table a given attention layer uses (per layer type for ModernBERT-style models)."""
    buffers = {name.rsplit(".", 1)[-1]: buf for name, buf in model.named_buffers() if name.endswith("inv_freq")}
    layer_types = getattr(model.config, "layer_types", None)
    if "inv_freq" in buffers:
        return lambda: dict(model.named_buffers())[_full_name(model, "inv_freq")]
    if layer_types is not None:
        key = f"{layer_types[module.layer_idx]}_inv_freq"
        return lambda: dict(model.named_buffers())[_full_name(model, key)]
    raise ConfigError("cannot tell which rotary table each attention layer uses; SelfExtend needs it")


def _full_name(model, short: str) -> str:
    return next(n for n, _ in model.named_buffers() if n.rsplit(".", 1)[-1] == short)


def use_extended_attention(model, trained: int, group=None, window=None, attn_scaling=False) -> None:
    _register_attention()
    mods = list(_attention_modules(model))
    if not mods:
        raise ConfigError(f"{type(model).__name__}: no attention layers found to patch")
    for m in mods:
        m._ldr_ext = {"trained": trained, "group": group, "window": window, "attn_scaling": attn_scaling,
                      "inv_freq": _inv_freq_for(model, m) if group else None}
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(_ATTN_NAME)
    else:
        model.config._attn_implementation = _ATTN_NAME


def apply_extension(model, ext: Extension) -> dict:
    """Patch `model` in place; returns the resolved parameters to record in the manifest."""
    kind = position_kind(model)
    trained = trained_length(model)
    s = scale_factor(ext.target_length, trained)
    info = {"method": ext.method, "target_length": ext.target_length, "trained_length": trained, "scale": s,
            "positions": kind, "attn_scaling": ext.attn_scaling, "applied": True}
    if ext.target_length <= trained:
        # nothing to extend: PI would divide by a ratio <= 1 and NTK would still move the base
        log.warning("target length %d is within the model's trained window of %d tokens: the model is left "
                    "unpatched (%s not applied); give a larger --target-length to extend it",
                    ext.target_length, trained, ext.method)
        return dict(info, applied=False, scale=1)
    if kind == "ape":
        if ext.method not in APE_METHODS:
            raise ConfigError(f"{ext.method!r} applies to rotary (RoPE) models; this model has absolute position "
                              f"embeddings: use one of {', '.join(APE_METHODS)}")
        if ext.method == "pi":
            apply_ape_pi(model, s)
    elif kind == "rope":
        if ext.method not in ROPE_METHODS:
            raise ConfigError(f"{ext.method!r} applies to absolute-position models; this model uses rotary "
                              f"positions: use one of {', '.join(ROPE_METHODS)}")
        if ext.method == "pi":
            apply_rope_pi(model, ext.target_length / trained)
            info["scale"] = ext.target_length / trained
        elif ext.method == "ntk":
            info["ntk_lambda"] = lam = ntk_lambda(ext, s)
            apply_rope_ntk(model, lam)
    else:
        raise ConfigError(f"{type(model).__name__} has neither a position table nor rotary embeddings "
                          "(e.g. ALiBi, which extrapolates by itself): use --doc-strategy truncate with a larger "
                          "--max-length instead")
    if ext.method == "selfextend":
        g = ext.group or max(2, math.ceil(ext.target_length / trained) + 1)
        w = ext.window or max(1, trained // 8)
        info.update(group=g, window=w)
        use_extended_attention(model, trained, g, w, ext.attn_scaling)
    elif ext.attn_scaling:
        use_extended_attention(model, trained, attn_scaling=True)
    return info
