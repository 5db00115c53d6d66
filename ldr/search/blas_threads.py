"""A search's numpy products run on the thread that calls them: BLAS's own threads stay asleep.

numpy's OpenBLAS hands any product past a small size to its worker threads, and after each call
those threads busy-wait for the next one for a while (OpenBLAS's thread timeout). A search makes
such products every few milliseconds (window vectors against the query, passages, the relevance),
so the workers never slept: on 35 meetings, 100 warm default searches one at a time, a search cost
42-48 ms of the process's CPU against 25-27 ms with one BLAS thread, the spinning worker taking the
core that ONNX Runtime's second thread needed (bench/README.md). A search's products are small: on
one thread they take no longer.

OpenBLAS's thread count is one setting for the whole process, and a change made from a thread other
than the main one may not hold (threadpoolctl supports the main thread's; OpenBLAS 0.3.31 ignored a
worker thread's after the main thread's). So a search on the main thread holds the limit while it
runs and gives the process's own setting back after (an application's numpy between searches is
left as it was), and a process that only answers searches (`ldr serve`, a Ray Serve replica) sets
it once, from its main thread, at its start."""
from __future__ import annotations

import importlib
import threading
from contextlib import contextmanager

_depth = 0              # one_blas_thread() blocks open on the main thread
_whole_process = False  # for_this_process() was called
_blas = None            # the BLAS libraries threadpoolctl finds (loaded by the first search), once


def _limit():
    """threadpoolctl's limiter holding BLAS to one thread (None: no BLAS library it knows)."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController
        _blas = ThreadpoolController().select(user_api="blas")
    return _blas.limit(limits=1) if _blas else None


@contextmanager
def one_blas_thread():
    """BLAS on one thread for the block, on the main thread (elsewhere the block runs as it is)."""
    global _depth
    if _whole_process or threading.current_thread() is not threading.main_thread():
        yield
        return
    limiter = _limit() if _depth == 0 else None
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if limiter is not None:
            limiter.restore_original_limits()


def for_this_process() -> None:
    """BLAS on one thread for the rest of the process (call it from the main thread, at start)."""
    global _whole_process
    if not _whole_process:
        importlib.import_module("numpy")     # its BLAS loaded, for threadpoolctl to find
        _limit()
        _whole_process = True
