"""Shared by the encoders: special tokens, token-budget batches, padding."""
from __future__ import annotations

from typing import Iterator

import numpy as np


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text ([CLS] … [SEP], <s> … </s>, or a final EOS)."""
    bare = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i], full[i + len(bare):]
    return [], []


def budget_batches(lengths: list[int], budget: int) -> Iterator[np.ndarray]:
    """Row indices in batches, longest first, each batch's padded size (rows × longest) ≤ budget.

    Sorting by length means rows of a batch have nearly equal length, so almost no padding is
    computed; a budget in tokens (not a fixed batch size) keeps memory flat across lengths.
    """
    order = np.argsort([-n for n in lengths], kind="stable")
    i = 0
    while i < len(order):
        longest = lengths[order[i]]
        size = max(1, budget // max(longest, 1))
        yield order[i:i + size]
        i += size


def pad(pieces: list[list[int]], pad_id: int, device: str):
    """(input_ids, attention_mask) tensors, right-padded."""
    import torch

    n = max(len(x) for x in pieces)
    ids = torch.full((len(pieces), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(pieces), n), dtype=torch.long)
    for i, x in enumerate(pieces):
        ids[i, :len(x)] = torch.as_tensor(x, dtype=torch.long)
        mask[i, :len(x)] = 1
    return ids.to(device), mask.to(device)
