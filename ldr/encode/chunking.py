"""How a long token sequence becomes model inputs, per document strategy (pure functions)."""
from __future__ import annotations

STRATEGIES = ("truncate", "pcw", "maxp", "gp", "rp", "pi", "ntk", "selfextend")
EXTENSION_STRATEGIES = ("gp", "rp", "pi", "ntk", "selfextend")


def pcw_chunks(ids: list[int], size: int) -> list[list[int]]:
    """L_o-sized chunks without overlap; the last chunk is shifted back so that it is full."""
    if len(ids) <= size:
        return [ids]
    chunks = [ids[i:i + size] for i in range(0, len(ids) - size + 1, size)]
    if len(ids) % size:
        chunks.append(ids[-size:])
    return chunks


def passages(ids: list[int], size: int, stride: int) -> list[list[int]]:
    """MaxP passages: windows of `size` every `stride` tokens; the last one ends at the end."""
    if len(ids) <= size:
        return [ids]
    out = [ids[i:i + size] for i in range(0, len(ids) - size + 1, stride)]
    if (len(ids) - size) % stride:
        out.append(ids[-size:])
    return out


def split(strategy: str, ids: list[int], window: int, stride: int | None = None,
          target: int | None = None) -> list[list[int]]:
    """Token-id pieces to encode for one document (special tokens not included)."""
    if strategy == "truncate":
        return [ids[:window]]
    if strategy == "pcw":
        return pcw_chunks(ids, window)
    if strategy == "maxp":
        return passages(ids, window, stride or window)
    if strategy in EXTENSION_STRATEGIES:
        return [ids[:target]]
    raise ValueError(strategy)
