"""How a long token sequence becomes model inputs, per document strategy (pure functions)."""
from __future__ import annotations

STRATEGIES = ("truncate", "pcw", "maxp", "gp", "rp", "pi", "ntk", "selfextend")
EXTENSION_STRATEGIES = ("gp", "rp", "pi", "ntk", "selfextend")


def pcw_chunks(ids: list[int], size: int) -> list[list[int]]:
    """L_o-sized chunks without overlap; the last chunk is shifted back so that it is full."""
    return split("pcw", ids, size)


def passages(ids: list[int], size: int, stride: int) -> list[list[int]]:
    """MaxP passages: windows of `size` every `stride` tokens; the last one ends at the end."""
    return split("maxp", ids, size, stride)


def _windows(n: int, size: int, stride: int) -> list[tuple[int, int]]:
    """Windows of `size` every `stride` tokens over n tokens; the last one ends at the end."""
    if n <= size:
        return [(0, n)]
    out = [(i, i + size) for i in range(0, n - size + 1, stride)]
    return out + [(n - size, n)] if (n - size) % stride else out


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
        return _windows(n, window, window)
    if strategy == "maxp":
        return _windows(n, window, stride or window)
    if strategy in EXTENSION_STRATEGIES:
        return [(0, min(n, target))]
    raise ValueError(strategy)


def char_span(offsets, a: int, b: int) -> tuple[int, int]:
    """Characters covered by tokens [a, b) given each token's (start, end) character offsets."""
    if b <= a or not len(offsets):
        return (0, 0)
    return int(offsets[a][0]), int(offsets[b - 1][1])
