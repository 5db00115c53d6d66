"""A kind's query side: what turns a query into the representation the kind's shards score (a
model's encoding, BM25's terms with the whole index's statistics). It holds the kind's model and
no file of an index; a shard's reader holds the files and no model (tantivy's Searcher and its
Bm25StatisticsProvider apart, Elasticsearch's coordinating node). A handle keeps one per kind
for every shard it searches: an unsharded index, N local shards, N Ray Serve replicas."""
from __future__ import annotations

import functools
import json
import threading
from dataclasses import asdict
from typing import Any, Callable, Protocol

from . import recent_queries


class QuerySide(Protocol):
    kind: str
    runs_a_model: bool      # its encode runs a model (a search runs such sides side by side)

    # `terms`: the TermSet the index's documents hold (values.py; None: every term); a side that
    # weighs terms (learned-sparse) weighs those alone, any other ignores it
    def encode(self, query: str, terms=None) -> Any: ...
    def encode_many(self, queries: list[str], terms=None) -> list: ...
    # the representation scored with every shard's statistics summed (a kind that has none: as it is)
    def with_collection_stats(self, rep, parts: list) -> Any: ...


class Encoded:
    """A model's query encoding (dense, sparse, ColBERT): the model loads on the first query, and
    a query asked again recently is not encoded again (recent_queries.py)."""

    runs_a_model = True

    def __init__(self, kind: str, load: Callable[[], Any], method: str, batched: bool = True,
                 single_vector: bool = False, narrows: bool = False):
        """`load()`: the kind's query encoder (shared per settings in a process, components.ENCODERS);
        `method`: its call that encodes a list of queries (`batched`) or one query; `single_vector`:
        a text becomes one vector (what LangChain's maximal marginal relevance compares); `narrows`:
        the call takes `within=` term ids, the only terms it weighs."""
        self.kind, self._load, self._method, self._batched = kind, load, method, batched
        self.single_vector, self.narrows = single_vector, narrows
        self._encoder = None

    @property
    def encoder(self):
        """The query model, loaded on first use and then held (as a reader held it before)."""
        if self._encoder is None:
            self._encoder = self._load()
        return self._encoder

    @property
    def dim(self) -> int | None:
        return getattr(self.encoder, "dim", None)

    def encode(self, query: str, terms=None):
        return self.encode_many([query], terms)[0]

    def encode_many(self, queries: list[str], terms=None) -> list:
        if not queries:
            return []
        enc = self.encoder
        call = getattr(enc, self._method)
        if self.narrows and terms is not None:
            call = functools.partial(call, within=terms.ids)
        compute = (lambda qs: list(call(qs))) if self._batched else (lambda qs: [call(q) for q in qs])
        # an encoding over one TermSet is not another's (an index that grew holds more terms)
        return recent_queries.encode_many(enc, queries, compute, terms.key if self.narrows and terms else None)

    def with_collection_stats(self, rep, parts: list):
        return rep


class Terms:
    """BM25's query side, and any kind's that declares none: the query's text is its representation
    (a reader with an `encode` of its own turns it into its terms where it runs, with no model).
    One shard scores it with its own statistics; over several, `with_collection_stats` carries the
    whole index's (native BM25: GlobalQuery), so every shard scores a document as the unsharded
    index would."""

    single_vector = False
    runs_a_model = False

    def __init__(self, kind: str, sums: bool = False):
        self.kind, self.sums = kind, sums

    def encode(self, query: str, terms=None) -> str:
        return query

    def encode_many(self, queries: list[str], terms=None) -> list:
        return list(queries)

    def with_collection_stats(self, rep, parts: list):
        if not self.sums:           # tantivy and Lucene score with their own index's statistics
            return rep
        from .bm25_store.native_backend import NativeSearcher
        return NativeSearcher.with_collection_stats(rep, parts)

    def whole(self, query: str, parts: list):
        """What shards are first sent (native BM25): the whole index's totals, from each shard's
        (live documents, summed length); each shard ranks with its own frequencies scaled up."""
        from .bm25_store.native_evidence import totals
        return totals(query, parts)

    def settle(self, query: str, evidence: dict, depth: int, totals, distribution: bool = False):
        """The shards' lists for `totals` scored exactly from their evidence (a Verdict)."""
        from .bm25_store.native_evidence import settle
        return settle(query, evidence, depth, totals, distribution)


class QuerySides:
    """Each kind's query side for the manifests a handle reads, built on first use and kept while
    the kind's encoder settings stay the same (a new generation reuses them: its model is loaded
    once per handle, and once per process per settings)."""

    def __init__(self, device: str | None = None, trust_remote_code: bool = False, where: str = "the index"):
        self.device, self.trust_remote_code, self.where = device, trust_remote_code, where
        self._sides: dict = {}          # kind → (the manifest it was last asked for, settings key, side)
        self._lock = threading.Lock()

    def __call__(self, manifest: dict) -> Callable[[str], QuerySide]:
        """`side(kind)` for this manifest's components."""
        return lambda kind: self.get(manifest, kind)

    def get(self, manifest: dict, kind: str) -> QuerySide:
        with self._lock:
            held = self._sides.get(kind)
            if held is not None and held[0] is manifest:
                return held[2]
        from . import get, lazy_encoder
        from ..encode.runtime import for_queries
        from ..errors import ConfigError

        comp = manifest["components"].get(kind)
        if comp is None:
            have = ", ".join(manifest["components"]) or "none"
            raise ConfigError(f"this index has no {kind!r} component (it has: {have})")
        impl = get(kind)
        settings = impl.encoder_settings(comp, self.trust_remote_code, self.device, self.where)
        settings = for_queries(settings, kind) if settings is not None else None
        key = json.dumps(asdict(settings) if settings is not None else comp, sort_keys=True, default=str)
        with self._lock:
            held = self._sides.get(kind)
            side = held[2] if held is not None and held[1] == key else \
                impl.query_side(comp, lazy_encoder(kind, settings))
            self._sides[kind] = (manifest, key, side)
        return side

