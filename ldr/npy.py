"""`load`: numpy's `np.load` for ldr's own `.npy` files (never a pickle), safe to call from many
threads at once on Python 3.11.

np.load parses each file's header with `ast.literal_eval`. CPython 3.11 keeps the AST constructor's
recursion counter in per-interpreter state (the SystemError of CPython gh-106905): when a garbage
collection inside one thread's parse runs a Python finalizer, the GIL can pass to another thread
that parses too, and the first parse then fails with `SystemError: AST constructor recursion depth
mismatch` although its file is sound. A sharded search loads its shards' parts in parallel, and a
server refreshes beside its searches: `ldr serve` beside a writer answered 500 ("the bm25 component
... cannot be loaded: SystemError ...") once in a whole test-suite run, and within 150 s when its
threads switch every 20 us. The counter is reset at every parse, so parsing again is exact.
"""
from __future__ import annotations

import numpy as np

_MISMATCH = "AST constructor recursion depth mismatch"
_TRIES = 16


def load(path, mmap_mode: str | None = None) -> np.ndarray:
    """`np.load(path, mmap_mode=mmap_mode, allow_pickle=False)`, its header parsed again where
    CPython's AST counter raced with another thread's (see the module's docstring)."""
    return _again(lambda: np.load(path, mmap_mode=mmap_mode, allow_pickle=False))


def header(fh) -> tuple[tuple, bool, np.dtype]:
    """(shape, fortran order, dtype) of the `.npy` file open as `fh` (binary, at its start),
    left at the first byte of the data; parsed as `load` parses."""
    def read():
        fh.seek(0)
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(fh)
        return np.lib.format.read_array_header_2_0(fh)
    return _again(read)


def _again(read):
    for attempt in range(_TRIES):
        try:
            return read()
        except SystemError as e:
            if _MISMATCH not in str(e) or attempt == _TRIES - 1:
                raise
    raise AssertionError("unreachable")
