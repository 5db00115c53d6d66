"""SPLADE's vocabulary projection, a few hundred tokens at a time.

A SPLADE document weight is, per window, max over its tokens of log1p(relu(h_t·W + b)) where
h_t is the MLM head's transformed hidden state and W its (hidden × vocabulary) projection. Run as
one graph, a batch of 4,096 tokens materialises a (4,096 × 30,522) logits tensor and its masked
copy: ~1 GB, and the peak of a default build. log1p∘relu is monotone, so the max can come first,
and it can be taken chunk by chunk: the encoder returns h (tokens × hidden) and the projection
runs here over HEAD_CHUNK logits at a time, never holding more than that."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError

HEAD_CHUNK = 1 << 23          # logits per chunk: 32 MB of float32 (~270 tokens of a BERT vocabulary)
VOCAB_CHUNK = 8192            # head_max_torch's columns at a time (bench/README.md, "SPLADE's head")


def split_mlm_head(model) -> tuple[np.ndarray, np.ndarray]:
    """(W as (hidden, vocabulary), bias (vocabulary,)) of a masked-LM `model`, whose projection is
    replaced by the identity: its `logits` become the projection's input, (batch, tokens, hidden)."""
    import torch

    dec = model.get_output_embeddings()
    if not isinstance(dec, torch.nn.Linear):
        raise ModelError(f"{type(model).__name__} has no linear vocabulary projection; a SPLADE model must be "
                         "a masked-LM (e.g. BertForMaskedLM)")
    w = np.ascontiguousarray(dec.weight.detach().float().cpu().numpy().T)
    bias = (dec.bias.detach().float().cpu().numpy().copy() if dec.bias is not None
            else np.zeros(w.shape[1], np.float32))
    name = next(n for n, m in model.named_modules() if m is dec)
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, torch.nn.Identity())
    return w, bias


def _rows(mask_row) -> slice | np.ndarray:
    """A window's real tokens: a slice when they come first (right padding, as ldr pads)."""
    idx = np.flatnonzero(np.asarray(mask_row))
    return slice(0, len(idx)) if not len(idx) or idx[-1] == len(idx) - 1 else idx


def head_max(h: np.ndarray, mask: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """(windows, vocabulary) SPLADE weights from the transformed states `h` (windows, tokens,
    hidden) and the attention `mask`: padding never counts. Window by window, `step` tokens at a
    time: one GEMM and one max per chunk (measured faster than one gather and reduceat per batch)."""
    vocab = w.shape[1]
    out = np.full((h.shape[0], vocab), -np.inf, dtype=np.float32)
    step = max(1, HEAD_CHUNK // vocab)
    for i in range(h.shape[0]):
        states = h[i, _rows(mask[i])]
        for s in range(0, len(states), step):
            np.maximum(out[i], (states[s:s + step] @ w).max(axis=0), out=out[i])
    out += bias
    np.maximum(out, 0, out=out)
    return np.log1p(out, out=out)


def head_max_torch(h, mask, w, bias):
    """head_max in torch, on the states' device (a GPU keeps them there), VOCAB_CHUNK columns at a
    time: a window's logits for one chunk stay in cache while their max is taken (the bf16 engine's
    head 36 -> 25 ms a batch of 8 windows of 256 tokens, the same weights to the bit: each logit is
    the same product whichever columns share its GEMM). `w` may be pre-cast to the dtype the matrix
    product runs in (the bf16 engine's, as autocast would cast it at every call)."""
    import torch

    vocab = w.shape[1]
    out = torch.empty((h.shape[0], vocab), device=h.device, dtype=torch.float32)
    cols = min(vocab, VOCAB_CHUNK)
    step = max(1, HEAD_CHUNK // cols)
    for i in range(h.shape[0]):
        states = h[i][mask[i]].float()
        for c in range(0, vocab, cols):
            part = out[i, c:c + cols]
            part.fill_(float("-inf"))
            for s in range(0, len(states), step):
                torch.maximum(part, (states[s:s + step] @ w[:, c:c + cols]).amax(dim=0), out=part)
    return torch.log1p(torch.relu(out + bias))
