"""Attention for the bf16 engine: one window at a time, its two products in oneDNN's bf16 kernels.

PyTorch's CPU flash attention multiplies its bf16 blocks through MKL's GEMM_BF16BF16F32, which runs
MKL's fp32 kernels on CPUs MKL does not tune for (AMD: ~130 GFLOP/s, a third of a bf16 MiniLM's time),
while a batched bf16 `matmul` goes to oneDNN (~0.5 ms for 8 windows x 12 heads x 256² scores). One
window's scores (heads x n x n, 1.5 MB at 256 tokens) stay in cache between the products and the
softmax; a whole batch's would not (2x slower). bench/README.md, "Encoding".
"""
from __future__ import annotations

NAME = "ldr_bf16"


def windowed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                       is_causal=None, **kwargs):
    """transformers' attention interface: query/key/value (b, heads, n, d) -> ((b, n, heads, d), None).

    Bidirectional bf16 attention without dropout, position bias or grouped heads runs here; anything
    else goes to transformers' own sdpa path, unchanged."""
    import torch

    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    if (causal and query.shape[2] > 1) or dropout or kwargs.get("position_bias") is not None \
            or query.dtype != torch.bfloat16 or key.dtype != torch.bfloat16 or key.shape[1] != query.shape[1]:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    b, heads, n, d = query.shape
    # contiguous once for the batch: each window's products would otherwise copy their strided slices
    q, k_t, v = (query * scaling).contiguous(), key.transpose(-1, -2).contiguous(), value.contiguous()
    low = torch.finfo(query.dtype).min
    keys = key_lengths(attention_mask, b, k_t.shape[-1])
    out = q.new_empty(b, heads, n, v.shape[-1])
    for i in range(b):
        scores = torch.matmul(q[i], k_t[i])                     # (heads, n, n_k), bf16
        if keys is not None:
            # right padding: fill the padded keys' columns, the values masked_fill would give
            # them, without reading a mask over all the scores (that was 7% of a MiniLM's time)
            if keys[i] < scores.shape[-1]:
                scores[..., keys[i]:] = low
        elif attention_mask is not None:
            m = attention_mask[i if attention_mask.shape[0] > 1 else 0]
            if m.dtype == torch.bool:
                scores.masked_fill_(~m, low)
            else:
                scores.add_(m.to(scores.dtype))
        torch.matmul(torch.softmax(scores, dim=-1), v[i], out=out[i])
    out = out.transpose(1, 2).contiguous()
    return out, None


def key_lengths(mask, b: int, n_k: int) -> list[int] | None:
    """Each window's count of real keys when `mask` hides nothing but trailing keys, the same for
    every query (right padding; all-true: n_k each), else None."""
    import torch

    if mask is None:
        return [n_k] * b
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[-1] != n_k:
        return None
    first = mask[:, :, :1, :]
    if not bool((mask == first).all()):
        return None
    real = first[:, 0, 0, :]                                    # (b or 1, n_k)
    counts = real.sum(-1)
    if not bool((real == (torch.arange(n_k) < counts[:, None])).all()):
        return None
    return [int(c) for c in (counts.expand(b) if counts.shape[0] == 1 else counts)]


def use_windowed_attention(model) -> bool:
    """Run `model`'s attention through windowed_attention where it would run PyTorch's sdpa (an
    extension's own attention is left alone). Returns whether it did."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, windowed_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)     # the boolean masks sdpa gets
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(NAME)
    else:
        model.config._attn_implementation = NAME
    return True
