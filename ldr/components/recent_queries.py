"""Recent query encodings, kept on the query encoder that made them (one per model setting in a
process, so shared by every index and handle that uses the model): a server is asked the same
query again when a user pages, changes a filter or reloads, and the query encoders are most of a
warm search (MiniLM 7-12 ms, SPLADE-tiny 5 ms a query on 2 cores). A batch encodes only the
queries it has not seen; each caller gets its own copy (nothing it does reaches the cache)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

SIZE = 1024         # queries per encoder (a MiniLM vector is 1.5 KB; a SPLADE query ~100 terms)


class _Recent:
    def __init__(self):
        self.lock = threading.Lock()
        self.items: OrderedDict = OrderedDict()


def encode_many(encoder, queries: list[str], compute: Callable[[list[str]], list], key=None) -> list:
    """The encodings of `queries`: those seen recently from the cache, the rest by
    `compute(missing queries)` (one call, in order). `key`: what else the encoding depends on
    (a learned-sparse query's TermSet), kept apart in the cache."""
    cache = getattr(encoder, "_ldr_recent", None)
    if cache is None:
        cache = _Recent()
        try:
            encoder._ldr_recent = cache
        except AttributeError:          # an encoder that takes no attribute: no cache
            return list(compute(list(queries)))
    got = {}
    with cache.lock:
        for q in queries:
            if (key, q) in cache.items:
                got[q] = cache.items[key, q]
                cache.items.move_to_end((key, q))
    missing = [q for q in dict.fromkeys(queries) if q not in got]
    if missing:
        fresh = list(compute(missing))
        got.update(zip(missing, fresh))
        with cache.lock:
            cache.items.update(((key, q), _copy(v)) for q, v in zip(missing, fresh))
            while len(cache.items) > SIZE:
                cache.items.popitem(last=False)
    return [_copy(got[q]) for q in queries]


def _copy(value):
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value
