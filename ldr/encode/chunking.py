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
    return [ids[a:b] for a, b in split_ranges(strategy, len(ids), window, stride, target)]


def split_ranges(strategy: str, n: int, window: int, stride: int | None = None,
                 target: int | None = None) -> list[tuple[int, int]]:
    """The [start, end) token ranges `split` cuts a document of n tokens into."""
    if strategy == "truncate":
        return [(0, min(n, window))]
    if strategy == "pcw":
        if n <= window:
            return [(0, n)]
        out = [(i, i + window) for i in range(0, n - window + 1, window)]
        return out + [(n - window, n)] if n % window else out
    if strategy == "maxp":
        stride = stride or window
        if n <= window:
            return [(0, n)]
        out = [(i, i + window) for i in range(0, n - window + 1, stride)]
        return out + [(n - window, n)] if (n - window) % stride else out
    if strategy in EXTENSION_STRATEGIES:
        return [(0, min(n, target))]
    raise ValueError(strategy)


def char_span(offsets, a: int, b: int) -> tuple[int, int]:
    """Characters covered by tokens [a, b) given each token's (start, end) character offsets."""
    if b <= a or not len(offsets):
        return (0, 0)
    return int(offsets[a][0]), int(offsets[b - 1][1])
