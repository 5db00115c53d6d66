"""A query's numpy products run on the thread that asks for them: BLAS's own threads stay asleep.

The sparse query's projection (SPLADE's head over the index's terms, in numpy: mlm_head.head_max)
is the one BLAS product of a search. OpenBLAS hands it to its worker threads, and after each call
those threads busy-wait for the next one for a while (OpenBLAS's thread timeout), so at a search
every few milliseconds they never slept: on 35 meetings, 100 warm default searches one at a time,
a search cost 42-48 ms of the process's CPU against 25-27 ms on one BLAS thread, the spinning worker
taking the core ONNX Runtime's second thread needed (bench/README.md). On one thread the product
takes no longer.

The limit is the calling thread's own (OpenBLAS's and MKL's `*_set_num_threads_local`), so every
query is encoded the same way on every thread (the product's rounding depends on how many threads
share it), an application's numpy elsewhere keeps the process's setting, and a build's document
projections are as before. A BLAS without such a call (Accelerate, an older OpenBLAS) is left as it
is. The libraries are found once, among those loaded by the first query: on Linux in the
process's own map (0.5 ms), elsewhere by threadpoolctl (whose import alone costs a cold search 10 ms)."""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

_LOCAL = ("openblas_set_num_threads_local", "scipy_openblas_set_num_threads_local64_", "MKL_Set_Num_Threads_Local")
_setters: list | None = None      # each BLAS library's thread-local setter (it returns the previous value)


def _loaded() -> list:
    """The BLAS libraries loaded in this process (their files)."""
    if os.path.exists("/proc/self/maps"):
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            files = {line.split(None, 5)[-1].strip() for line in fh if line.count(" ") >= 5}
        return sorted(f for f in files if "openblas" in os.path.basename(f) or "mkl_rt" in os.path.basename(f))
    from threadpoolctl import ThreadpoolController
    return [lib.filepath for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]


def _find() -> list:
    out = []
    for path in _loaded():
        try:
            lib = ctypes.CDLL(path)     # loaded already: this only finds it
        except OSError:
            continue
        fn = next((getattr(lib, n) for n in _LOCAL if hasattr(lib, n)), None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
            out.append(fn)
    return out


@contextmanager
def one_blas_thread():
    """This thread's BLAS calls on one thread for the block; its own setting comes back after."""
    global _setters
    if _setters is None:
        _setters = _find()
    before = [set_local(1) for set_local in _setters]
    try:
        yield
    finally:
        for set_local, n in zip(_setters, before):
            set_local(n)
