"""What an opened index and an opened sharded index share, written once: search, plan and batch
search over a point in time (search/searcher.py: an unsharded index is the 1-shard case), the
second stage bound where the plan runs, and the write calls (each class names its writer, so every
write option reaches a sharded index's shards too)."""
from __future__ import annotations

import dataclasses

import os
import threading
import time
from typing import Iterable

from .corpus import DEFAULT_MAX_DOC_MB, IngestReport, corpus_docs
from .corpus.worker import DEFAULT_DOC_TIMEOUT
from .errors import QueryError
from .index.ray_build import RayOptions, ray_options
from .search import searcher
from .search.options import QueryOptions
from .search.query import prepare
from .search.stages.rerank import RerankerSpec


class Handle:
    """api.Index's search half: `_snap` (the point in time a search reads, swapped whole by
    `refresh()`), `_set` (the shard set: its writer), `path`, `device`, `trust_remote_code`."""

    def _init_shared(self) -> None:
        self._rerankers: dict = {}
        # the coordinator's analysis of the query against windows (each shard keeps its own windows)
        self._window_terms: dict = {}
        from .components import QuerySides
        # each kind's query side: the query models, held by the handle for every shard it searches
        self._sides = QuerySides(self.device, self.trust_remote_code, str(getattr(self, "path", "the index")))
        self._load_lock = threading.RLock()   # models load once, whichever thread asks first

    def _snapshot(self):
        return self._snap

    def _writer(self, wait):
        return self._set.writer(wait, self)

    # -- what every handle reads of its point in time (`manifest`: the subclass's) ------------
    @property
    def components(self) -> dict:
        return self.manifest["components"]

    @property
    def retriever_names(self) -> list[str]:
        from . import components as registry
        return registry.in_order(self.components)

    def search_defaults(self) -> dict:
        """The settings a search starts from: ldr's defaults (search/options.py), under what the
        manifest records (build time, `ldr tune`)."""
        from dataclasses import asdict

        from .language_defaults import of_manifest
        from .search.options import index_defaults

        m = self.manifest
        return asdict(index_defaults(m.get("search", {}), m["components"], of_manifest(m))[0])

    def query_side(self, kind: str):
        """The kind's query side (components/query_side.py): `encode(query)`, `encode_many(queries)`;
        a dense one's `dim` (the query model loads on first use)."""
        return self._sides.get(self.manifest, kind)

    def default_mode(self) -> str:
        return self.search_defaults()["mode"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the second stage: a value in the plan, a model where it runs -------------------------
    def cross_encoder(self, model: str):
        """The cross-encoder `model` (any HF classifier, a packaged name or a folder), loaded once
        per handle."""
        with self._load_lock:
            if model not in self._rerankers:
                from .rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings
                self._rerankers[model] = CrossEncoderReranker(CrossEncoderSettings(
                    model=model, device=self.device, trust_remote_code=self.trust_remote_code))
        return self._rerankers[model]

    def _spec(self, components: dict):
        """The plan's second stage as a RerankerSpec (validated, nothing loaded)."""
        def spec(opts, kinds: list[str]):
            from .rerank.cross_encoder import CrossEncoderSettings
            from .rerank.late import check_named

            if opts.rerank_model:
                loaded = self._rerankers.get(opts.rerank_model)
                windows = (loaded.settings if loaded is not None else CrossEncoderSettings(opts.rerank_model)).max_windows
                return RerankerSpec(f"cross-encoder:{opts.rerank_model}", opts.rerank_model, windows=windows,
                                    reads_text=True)
            if opts.rerank in (None, "none"):
                return None
            check_named(opts.rerank, components)
            return RerankerSpec(opts.rerank, weights=tuple((n, (opts.weights or {}).get(n, 1.0)) for n in kinds))
        return spec

    def _bind(self, spec: RerankerSpec, exact):
        """The reranker `spec` names, where the plan runs (`exact(kind)`: the kind's exact scores
        over the shards, what the rescorers read)."""
        if spec.model:
            return self.cross_encoder(spec.model)
        from .rerank.late import KindRescorer
        from .rerank.passage import PassageRescorer

        if spec.name == "passage":
            return PassageRescorer(dict(spec.weights), {n: exact(n) for n, _ in spec.weights})
        return KindRescorer(spec.name, exact(spec.name))

    def _run(self, snap: searcher.Snapshot) -> searcher.Run:
        from .search.passages import finder_for

        components = snap.manifest["components"]
        return searcher.Run(
            each=lambda call: self._each(snap, call),
            finder=lambda weights, kinds: finder_for(components, weights, kinds, self._window_terms, self._load_lock),
            bind=self._bind, device=self.device)

    def facets(self, top: int = 10) -> dict:
        """The documents' metadata fields with counts, as one point in time has them: per field the
        documents having it, its types, its `top` values with counts, a number's range
        (search/facets.py; the search page lists them, filters take them)."""
        from .search.facets import merge

        snap = self._snapshot()
        return {**merge(self._each(snap, lambda shard: shard.facets()), top), "generation": snap.generation}

    def _each(self, snap, call) -> list:
        """[call(shard) for each shard of `snap`] (None for a shard that did not answer): here, in
        this process, a thread per shard."""
        if len(snap.shards) == 1:
            return [call(snap.shards[0])]
        return list(self._pool().map(call, snap.shards))

    def _pool(self):
        """One thread pool for every search of this handle (a pool per query cost ~1 ms), made
        again in a forked child (pools.py)."""
        with self._load_lock:
            if getattr(self, "_threads", None) is None:
                from .pools import ProcessPool
                self._threads = ProcessPool(8, "ldr-shard")
        return self._threads.get()

    def _close_pool(self) -> None:
        if getattr(self, "_threads", None) is not None:
            self._threads.close()
            self._threads = None

    # -- searching ----------------------------------------------------------------------------
    def search(self, query: str, k: int = 10, **options):
        """Top-k documents for `query`, best first; every hit carries each stage's score.

        `options` are the fields of ldr.search.options.QueryOptions (one schema for the API, the
        CLI, the server and the RAG adapters); None keeps the index's default:
        mode, fusion, weights, rrf_k, depth: the first stage (every retriever of the index, fused,
        as recorded in the manifest); `filters` ({"lang": "de", "path": "contracts/*"}, see
        ldr/search/filters.py) restrict every retriever before fusion.
        window_weight, window_depth: the top candidates rescored by their best window's BM25.
        rerank (False skips it, "passage"), rerank_model (a cross-encoder), rerank_depth,
        rerank_weight (0–1: the reranker's share of the final score, z-normalised mix with the
        stage before), rerank_windows (best passages per document a cross-encoder scores).
        stages: registered extra stages ({name: {setting: value}}).
        passages=N gives each hit its N best passages (character offsets into its text); a hit's
        full text is read only with with_text=True. `plan(query, ...)` shows what runs. The whole
        search reads one generation (`result.generation`), whatever writers commit meanwhile.
        """
        t0 = time.perf_counter()
        snap = self._snapshot()
        return searcher.search(snap, prepare(query), QueryOptions.of(k=k, **options), self._run(snap),
                               self._spec(snap.manifest["components"]), t0=t0)

    def plan(self, query: str, k: int = 10, **options):
        """The plan `search(query, k, **options)` would run (ldr/search/plan.py): print it with
        `.explain()`. Compiling reads no document and loads no model."""
        snap = self._snapshot()
        request = QueryOptions.of(k=k, **options)
        query = prepare(query)
        conds = snap.conditions(request.filters)
        count, _, _ = searcher.statistics(snap, query, conds, self._run(snap))
        plan = searcher.compile_for(snap, query, request, count, bool(conds), self.device,
                                    self._spec(snap.manifest["components"]))
        return dataclasses.replace(plan, shards=len(snap.shards))

    def search_many(self, queries, k: int = 10, *, batch_size: int = 32, progress=None, **options):
        """Search many queries ({qid: text} or [(qid, text)]), yielding (qid, SearchResult or the
        QueryError that query raised) in order, all on one generation. Queries are encoded in
        batches: a run of 1,000 queries takes a fraction of 1,000 `search` calls."""
        items = list(queries.items()) if isinstance(queries, dict) else list(queries)
        request = QueryOptions.of(k=k, **options)
        snap = self._snapshot()
        run, spec = self._run(snap), self._spec(snap.manifest["components"])
        try:
            # the kinds every query of the batch searches (one plan's: they differ only in text)
            conds = snap.conditions(request.filters)
            count, _, _ = searcher.statistics(snap, "batch", conds, run)
            kinds = searcher.compile_for(snap, "batch", request, count, bool(conds), self.device, spec).kinds \
                if count else []
        except QueryError:
            kinds = []
        from .search.batch import search_batch
        lone, plans = True, {}      # a batch whose plan is one ranking is searched together (search/batch.py)
        for i in range(0, len(items), batch_size):
            ready = []
            for qid, text in items[i:i + batch_size]:
                try:
                    ready.append((qid, prepare(text), None))
                except QueryError as e:
                    ready.append((qid, None, e))
            texts = [t for _, t, e in ready if e is None]
            reps = [{} for _ in texts]
            for n in kinds:
                terms = snap.terms(n)     # the index's terms, for a kind that narrows its queries
                side = snap.side(n)
                for j, rep in enumerate(side.encode_many(texts) if terms is None else side.encode_many(texts, terms)):
                    reps[j][n] = rep
            together = None
            if texts and lone:
                try:
                    together = search_batch(snap, texts, request, run, spec, reps, plans)
                except QueryError:
                    together = None     # each query alone says which one the error is about
                # the plan is the same for every batch: one that is not a lone ranking never will be
                lone, together = together is not None, iter(together or ())
            j = 0
            for qid, text, err in ready:
                if err is not None:
                    yield qid, err
                else:
                    try:
                        got = next(together, None) if together is not None else None
                        yield qid, got if got is not None else searcher.search(
                            snap, text, request, run, spec, t0=time.perf_counter(), reps=reps[j])
                    except QueryError as e:
                        yield qid, e
                    j += 1
                if progress is not None:
                    progress(1)

    # -- writing ------------------------------------------------------------------------------
    def add(self, docs: str | os.PathLike | Iterable, *, wait: bool | float = False, progress: bool = False,
            report: IngestReport | None = None, max_doc_mb: float = DEFAULT_MAX_DOC_MB, auto_merge: bool = True,
            ray: "RayOptions | bool | None" = None, doc_timeout: float | None = None) -> dict:
        """Encode only these documents (a corpus path or Docs/dicts) and commit; an id already in
        the index replaces its old copy. Returns {added, replaced (ids), skipped, generation}; this
        handle then reads the new generation. `ray`: encode on a Ray cluster."""
        report = report if report is not None else IngestReport()
        with self._writer(wait) as w:
            known = None
            if isinstance(docs, (str, os.PathLike)) and os.path.exists(docs):   # a folder: unchanged files unread
                from pathlib import Path

                from .index.unchanged import known_files
                where = Path(docs).resolve()
                known = known_files(w.origins(), str(where if where.is_dir() else where.parent))
            result = w.add(corpus_docs(docs, report, max_doc_mb, self.path, doc_timeout or DEFAULT_DOC_TIMEOUT, known),
                           report, progress=progress, max_doc_mb=max_doc_mb, auto_merge=auto_merge, ray=ray_options(ray))
        result["report"] = report
        self.refresh()
        return result

    def load_write_encoders(self) -> None:
        """Load the models a write encodes documents with, now: a server does before it accepts
        writes, so its first POST /documents does not wait for them (19 s, issue 58)."""
        from . import components as registry

        comps = self.manifest["components"]
        for name, kind in registry.kinds(comps):
            settings = kind.encoder_settings(comps[name], self.trust_remote_code, self.device, str(self.path))
            if settings is not None:
                registry.lazy_encoder(name, settings)()

    def delete(self, ids: Iterable[str], *, wait: bool | float = False) -> dict:
        """Delete documents by id and commit. Returns {deleted (ids), missing (ids), generation}."""
        with self._writer(wait) as w:
            result = w.delete([ids] if isinstance(ids, str) else ids)
        self.refresh()
        return result

    def merge(self, max_segments: int = 1, *, faiss: str | None = None, wait: bool | float = False,
              rewrite: dict | None = None) -> dict:
        """Merge segments (deleted documents dropped, nothing re-encoded) and commit; `faiss`: the
        dense index type from now on ("rabitq": compressed), the merged segments rewritten with it;
        `rewrite`: {kind: (its entry from now on, a map of its rows)} (`ldr train whitening --apply`)."""
        with self._writer(wait) as w:
            result = w.merge(max_segments, faiss=faiss, rewrite=rewrite)
        self.refresh()
        return result

    def set_search_defaults(self, search: dict, record: dict | None = None, *, wait: bool | float = False) -> dict:
        """Commit new query-time defaults (the manifest's `search` entry, as `ldr tune` writes it)
        as a new generation; `record` goes into the history."""
        with self._writer(wait) as w:
            result = w.set_search_defaults(search, record or {})
        self.refresh()
        return result
