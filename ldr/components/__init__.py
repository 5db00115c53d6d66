"""Retriever kinds as codecs: one module per kind, one registry.

    bm25     lexical (tantivy | Lucene: an index store; native: a part per segment)   bm25.py
    dense    passage vectors in FAISS, MaxP to documents                              dense.py
    sparse   learned term weights, inverted postings                                  sparse.py
    colbert  token vectors (late interaction), exact MaxSim                           colbert.py

Everything outside this package loops over `kinds(...)`; adding a kind is one module with a
Component subclass and `register(MyKind())` (see base.py for the protocol).
"""
from __future__ import annotations

import json
import threading
from dataclasses import asdict

from ..errors import ConfigError
from .base import Component
from .query_side import QuerySide, QuerySides  # noqa: F401  (a handle's query models, per kind)

_REGISTRY: dict[str, Component] = {}


def register(component: Component) -> Component:
    """Add a kind (kept in registration order: the order of fusion, runs and `ldr info`)."""
    from ..stages import RESERVED

    if not component.name or not component.name.isidentifier() or component.name in RESERVED:
        raise ConfigError(f"a component needs a plain name, not {component.name!r}")
    _REGISTRY[component.name] = component
    return component


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered kind, in order."""
    return tuple(_REGISTRY)


def get(name: str) -> Component:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown component {name!r}; known: {', '.join(_REGISTRY)}") from None


def known(name: str) -> bool:
    return name in _REGISTRY


def kinds(components: dict) -> list[tuple[str, Component]]:
    """(name, Component) of the kinds an index has (its manifest's `components`), in registry order."""
    return [(n, c) for n, c in _REGISTRY.items() if n in components]


def in_order(components) -> list[str]:
    """The names among `components` (any container of names), in registry order."""
    return [n for n in _REGISTRY if n in components]


class EncoderCache:
    """Loaded encoders keyed by (kind, settings): a writer and the readers of one process share a
    model instead of loading it twice. Loading happens once, under a per-key lock. At most
    `max_models` distinct models are kept (the least recently asked for dropped first: a reader
    that holds one keeps using it), so a long-running process that meets many settings does not
    keep every model it ever loaded."""

    def __init__(self, max_models: int = 8):
        from collections import OrderedDict

        self._items: OrderedDict = OrderedDict()
        self._locks: dict = {}
        self._lock = threading.Lock()
        self.max_models = max_models

    @staticmethod
    def key(kind: str, settings) -> tuple[str, str]:
        d = asdict(settings) if hasattr(settings, "__dataclass_fields__") else settings
        return kind, json.dumps(d, sort_keys=True, default=str)

    def get(self, kind: str, settings):
        k = self.key(kind, settings)
        with self._lock:
            if k in self._items:
                self._items.move_to_end(k)
                return self._items[k]
            lock = self._locks.setdefault(k, threading.Lock())
        with lock:
            with self._lock:
                if k in self._items:
                    return self._items[k]
            enc = get(kind).load_encoder(settings)
            with self._lock:
                self._items[k] = enc
                # loading resolves settings (backend "auto" → the engine chosen, a package name →
                # its folder) as the manifest records them: readers of that index ask by those
                resolved = getattr(enc, "settings", None)
                if resolved is not None and hasattr(resolved, "__dataclass_fields__"):
                    self._items.setdefault(self.key(kind, resolved), enc)
                self._evict()
        return enc

    def _evict(self) -> None:
        while len({id(e) for e in self._items.values()}) > self.max_models:
            old_key, old = self._items.popitem(last=False)
            for k in [k for k, e in self._items.items() if e is old]:   # its other keys go with it
                del self._items[k]
            self._locks.pop(old_key, None)

    def loaded(self) -> list:
        """The distinct encoders loaded."""
        return list({id(e): e for e in self._items.values()}.values())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


ENCODERS = EncoderCache()


def lazy_encoder(kind: str, settings, cache: EncoderCache | None = None):
    """A callable that loads the encoder on first call (None when the kind has no model): a
    writer that never sees a document loads nothing."""
    if settings is None:
        return None
    cache = cache or ENCODERS
    return lambda: cache.get(kind, settings)


def _register_builtins() -> None:
    from .bm25 import BM25
    from .colbert import Colbert
    from .dense import Dense
    from .sparse import Sparse

    for c in (BM25(), Dense(), Sparse(), Colbert()):
        register(c)


_register_builtins()


def retyped(comps: dict, index_type: str) -> dict:
    """The components with the dense index type changed (`ldr merge --faiss`)."""
    if "dense" not in comps:
        raise ConfigError("--faiss: the index has no dense vectors")
    return {**comps, "dense": get("dense").retyped(comps["dense"], index_type)}
