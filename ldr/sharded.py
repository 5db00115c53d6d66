"""A sharded index opened for search (storage: ldr/index/cluster.py): the shards of one cluster
generation, each an Index pinned to the generation the cluster names, searched in one process
(a thread per shard) so that a query answers exactly as the unsharded index of the same documents.

The query is encoded once (BM25 with the whole index's statistics: document count, average
length and every query term's document frequency, summed over the shards); each shard runs the
plan's first stages; the coordinator gathers their lists (search/gather.py) and runs the rest.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from .api import Index
from .corpus import DEFAULT_MAX_DOC_MB, Doc, IngestReport, corpus_docs
from .errors import IndexFormatError
from .index.cluster import is_cluster, read_cluster, shard_of
from .index.ray_build import ray_options
from .search.gather import Dispatch, ShardedSource, ShardMap, gather
from .search.hits import SearchResult, origin, to_hits
from .search.options import QueryOptions, search_signature
from .search.query import prepare
from .search.source import IndexSource


class ShardedIndex:
    """`ldr.open(path)` of a sharded index: search, plan, documents, add, delete, merge, as an Index."""

    def __init__(self, path: str | os.PathLike, verify: bool = False, device: str | None = None,
                 trust_remote_code: bool = False, generation: int | None = None):
        self.path = Path(path)
        self.device, self.trust_remote_code, self.verify = device, trust_remote_code, verify
        self._window_terms: dict = {}
        self._lock = threading.RLock()
        self._open(generation)

    def _open(self, generation: int | None) -> None:
        for _ in range(20):     # a writer may commit (and collect) between reading and pinning
            cluster = read_cluster(self.path, generation)
            shards = []
            try:
                for s in cluster["shards"]:
                    shards.append(Index(self.path / s["path"], verify=self.verify, device=self.device,
                                        trust_remote_code=self.trust_remote_code, generation=s["generation"]))
            except IndexFormatError:
                for sh in shards:
                    sh.close()
                if generation is None and read_cluster(self.path)["generation"] != cluster["generation"]:
                    continue
                raise
            self.cluster, self.shards = cluster, shards
            self.map = ShardMap([sh.docstore for sh in shards])
            if getattr(self, "_pool", None) is None:    # one pool for every search (a pool per query cost ~1 ms)
                self._pool = ThreadPoolExecutor(max(len(shards), 1), thread_name_prefix="ldr-shard")
            return
        raise IndexFormatError(f"{self.path} changed too quickly to be opened; try again")

    @property
    def generation(self) -> int:
        return self.cluster["generation"]

    @property
    def manifest(self) -> dict:
        """The first shard's (every shard is built with the same settings)."""
        return self.shards[0].manifest

    @property
    def components(self) -> dict:
        return self.manifest["components"]

    @property
    def docstore(self) -> ShardMap:
        """Global document numbers: `.ids`, `.titles`, `.id_order` (as an Index's docstore has them)."""
        return self.map

    def search_defaults(self) -> dict:
        return self.shards[0].search_defaults()

    def __len__(self) -> int:
        return sum(len(sh) for sh in self.shards)

    @property
    def retriever_names(self) -> list[str]:
        return self.shards[0].retriever_names

    def default_mode(self) -> str:
        return self.shards[0].default_mode()

    def refresh(self) -> bool:
        if read_cluster(self.path)["generation"] == self.generation:
            return False
        old = self.shards
        with self._lock:
            self._open(None)
        for sh in old:
            sh.close()
        return True

    def close(self) -> None:
        for sh in self.shards:
            sh.close()
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- reading ---------------------------------------------------------------------------------
    def document(self, doc_id: str) -> Doc:
        return self.shards[shard_of(str(doc_id), len(self.shards))].document(doc_id)

    def info(self) -> dict:
        """As Index.info, summed over the shards, with each shard's generation and documents."""
        parts = [sh.info() for sh in self.shards]
        ingest = {"indexed": sum(p["ingest"].get("indexed", 0) for p in parts if p["ingest"])}
        return {**parts[0], "path": str(self.path), "generation": self.generation, "documents": len(self),
                "bytes": sum(p["bytes"] for p in parts), "segments": [s for p in parts for s in p["segments"]],
                "ingest": ingest, "created": self.cluster["history"][0]["at"],
                "shards": [self._shard_info(s) for s in self.cluster["shards"]]}

    def _shard_info(self, s: dict) -> dict:
        """A shard as /info and `ldr info` show it; `ahead`: a write failed between this shard's
        commit and the cluster's (readers answer from `generation`; the next write brings it back)."""
        from .index.generations import generations

        newest = (generations(self.path / s["path"]) or [None])[-1]
        return {"path": s["path"], "generation": s["generation"], "documents": s["live"],
                "ahead": newest != s["generation"]}

    def plan(self, query: str, k: int = 10, **options):
        request = QueryOptions.of(k=k, **options)
        return self._compile(prepare(query), request, self._masks(request))

    def search(self, query: str, k: int = 10, **options) -> SearchResult:
        t0 = time.perf_counter()
        return self._search(prepare(query), QueryOptions.of(k=k, **options), t0)

    search.__signature__ = search_signature()

    def search_many(self, queries, k: int = 10, *, progress=None, **options):
        items = list(queries.items()) if isinstance(queries, dict) else list(queries)
        for qid, text in items:
            try:
                yield qid, self.search(text, k, **options)
            except Exception as e:      # a QueryError per query, as Index.search_many yields it
                from .errors import QueryError
                if not isinstance(e, QueryError):
                    raise
                yield qid, e
            if progress is not None:
                progress(1)

    def _masks(self, request):
        return [sh.filter_mask(request.filters) for sh in self.shards]

    def _compile(self, query: str, request, masks):
        from .language_defaults import of_manifest
        from .search.passages import term_kind
        from .search.plan import compile_plan

        filtered = any(m is not None for m in masks)
        n_docs = sum(int(m.sum()) if m is not None else len(sh) for m, sh in zip(masks, self.shards))
        components = self.manifest["components"]
        return compile_plan(query, request, self.manifest.get("search", {}), components, max(n_docs, 1),
                            device=self.device, filtered=filtered, reranker=self._reranker,
                            term_kind=lambda: term_kind(components), profile=of_manifest(self.manifest))

    def _dispatch(self, kind: str) -> Dispatch:
        return Dispatch([sh.retriever(kind) for sh in self.shards], self.map)

    def _reranker(self, opts, searched: list[str]):
        if opts.rerank_model:
            return self.shards[0].cross_encoder(opts.rerank_model)
        if opts.rerank in (None, "none"):
            return None
        from .rerank.late import named_reranker
        from .rerank.passage import PassageRescorer

        if opts.rerank == "passage":
            return PassageRescorer(opts.weights, {n: self._dispatch(n) for n in searched})
        return named_reranker(opts.rerank, opts.weights, self.manifest["components"], self._dispatch)

    def _reps(self, query: str, kinds: list[str]) -> dict:
        """The query encoded once for every shard; a kind that scores with collection statistics
        (BM25) gets the whole index's."""
        reps = {}
        for kind in kinds:
            first = self.shards[0].retriever(kind)
            rep = first.encode(query)
            if hasattr(first, "collection_stats"):
                rep = first.with_collection_stats(rep, [sh.retriever(kind).collection_stats(rep)
                                                        for sh in self.shards])
            reps[kind] = rep
        return reps

    def _search(self, query: str, request, t0: float) -> SearchResult:
        from .search.passages import finder_for

        masks = self._masks(request)
        plan = self._compile(query, request, masks)
        if sum(int(m.sum()) if m is not None else len(sh) for m, sh in zip(masks, self.shards)) == 0:
            (empty := SearchResult([], query, {}, None, None, plan)).generation = self.generation
            return empty
        reps = self._reps(query, plan.kinds)
        first, rest = plan.split()
        sources = [IndexSource(query, sh.retriever, sh.docstore, m, None, reps) for sh, m in zip(self.shards, masks)]
        parts, missing = self._first_stages(first, reps, sources, request)
        depth = {s.kind: s.depth for s in plan.first}
        cands = gather(parts, self.map, query, depth)
        o = plan.settings
        finder = None
        if request.passages or o.rerank_model or o.window_weight:
            finder = finder_for(self.manifest["components"], o.weights,
                                {n: self._dispatch(n) for n in plan.kinds}, self._window_terms, self._lock)
        source = ShardedSource(query, reps, self.map, sources, finder, lambda k: self._reps(query, [k])[k])
        cands = rest.run_rest(cands, source)
        hits = to_hits(cands.rows, self.map.ids, self.map.titles)
        docnos = [h.docno for h in hits]
        source.prefetch(docnos if request.with_text else [])
        for h in hits:
            h.passages = cands.passages.get(h.docno, [])
            h.text = source.text(h.docno) if request.with_text else h.text
        if request.with_meta:
            for s, pairs in self.map.group(docnos).items():
                metas = self.shards[s].docstore.doc_metas([loc for _, loc in pairs])
                for g, loc in pairs:
                    hit = next(h for h in hits if h.docno == g)
                    hit.meta, hit.origin = metas[loc].meta, origin(metas[loc])
        source.release()
        second = plan.stage("reranked")
        result = SearchResult(hits, query, {n: round(1e3 * t, 2) for n, t in cands.timings.items()},
                              second.reranker.name if second else None, cands, plan,
                              round(1e3 * (time.perf_counter() - t0), 2))
        result.finder, result.generation = finder, self.generation
        result.missing_shards = missing
        return result

    def _first_stages(self, first, reps: dict, sources: list, request) -> tuple[list, list[int]]:
        """Each shard's Candidates from the plan's first stages (here: a thread per shard), and the
        shards that could not answer (none in one process; a cluster may lose every replica of one)."""
        if len(sources) == 1:
            return [first.run_first(sources[0])], []
        return list(self._pool.map(first.run_first, sources)), []

    # -- writing ---------------------------------------------------------------------------------
    @classmethod
    def build(cls, corpus, path, *, shards: int, config=None, report: IngestReport | None = None,
              progress: bool = False, wait: bool | float = False, ray=None, **options) -> "ShardedIndex":
        """Build a sharded index of `shards` shards (BM25 native: it takes global statistics); `ray`
        (True or RayOptions): the shards build in parallel on a Ray cluster."""
        from .index.build import BuildConfig
        from .index.cluster_writer import ClusterWriter

        from .components.bm25 import for_shards

        config = config or BuildConfig(**for_shards(options))
        report = report if report is not None else IngestReport()
        with ClusterWriter(path, wait=wait, create=True, threads=config.threads) as w:
            w.build(corpus_docs(corpus, report, config.max_doc_mb, Path(path)), config, shards, report, progress,
                    ray_options(ray))
        index = cls(path)
        index.report = report
        return index

    def _writer(self, wait):
        from .index.cluster_writer import ClusterWriter
        return ClusterWriter(self.path, wait=wait)

    def add(self, docs: str | os.PathLike | Iterable, *, wait: bool | float = False, progress: bool = False,
            report: IngestReport | None = None, max_doc_mb: float = DEFAULT_MAX_DOC_MB, **_) -> dict:
        report = report if report is not None else IngestReport()
        with self._writer(wait) as w:
            result = w.add(corpus_docs(docs, report, max_doc_mb, self.path), report, progress)
        result["report"] = report
        self.refresh()
        return result

    def delete(self, ids: Iterable[str], *, wait: bool | float = False) -> dict:
        with self._writer(wait) as w:
            result = w.delete([ids] if isinstance(ids, str) else ids)
        self.refresh()
        return result

    def reshard(self, out: str | os.PathLike, shards: int, *, wait: bool | float = False) -> "ShardedIndex":
        """A new sharded index of `shards` shards at `out` with this one's documents, their
        encodings copied (nothing re-encoded); this index is left as it is."""
        with self._writer(wait) as w:
            w.reshard(Path(out).absolute(), shards)
        return ShardedIndex(out, device=self.device, trust_remote_code=self.trust_remote_code)

    def set_search_defaults(self, search: dict, record: dict | None = None, *, wait: bool | float = False) -> dict:
        """Commit new query-time defaults (as `ldr tune` chooses them) on every shard."""
        with self._writer(wait) as w:
            result = w.set_search_defaults(search, record)
        self.refresh()
        return result

    def merge(self, max_segments: int = 1, *, wait: bool | float = False) -> dict:
        with self._writer(wait) as w:
            result = w.merge(max_segments)
        self.refresh()
        return result


class Shards:
    """What `ldr eval --shards N` evaluates: `Shards(n)(path)` opens, `.build(...)` builds sharded
    indexes of n shards (the Index class's calls), cached apart from unsharded ones."""

    def __init__(self, n: int):
        self.n, self.cache_tag = n, f"-shards{n}"

    def __call__(self, path, verify: bool = False) -> ShardedIndex:
        return ShardedIndex(path, verify=verify)

    def build(self, corpus, path, config=None, progress: bool = False) -> ShardedIndex:
        return ShardedIndex.build(corpus, path, shards=self.n, config=config, progress=progress)


def open(path: str | os.PathLike, verify: bool = False, device: str | None = None,  # noqa: A001
         trust_remote_code: bool = False, generation: int | None = None) -> "Index | ShardedIndex":
    """Open an index directory at its newest generation: an Index, or a ShardedIndex where `path`
    holds a sharded one (cheap checks; `verify=True` also hashes every file)."""
    cls = ShardedIndex if is_cluster(path) else Index
    return cls(path, verify=verify, device=device, trust_remote_code=trust_remote_code, generation=generation)
