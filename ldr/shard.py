"""One pinned generation of an index on this machine as a shard of a search (search/gather.py's
`Shard`): it answers in values (statistics, first-stage lists with ids, window features, the
final hits' texts and passages) and is the only side that reads the generation's files. An
unsharded search has one; a sharded index's handle N; a Ray Serve replica one over its own copy."""
from __future__ import annotations

import time

import numpy as np

from .errors import IndexFormatError
from .stages import Stage, detail
from .values import Fetched, FirstStage, ShardInfo, ShardStats

WINDOW_FEATURES = detail(Stage.WINDOWS, "features")   # a search's timing of the features sent with the lists


class RecentTexts:
    """The texts a shard read for its latest searches, by uid (a uid's text never changes): the
    window stage, the passages and the fetch of one query read a document once (a docstore read
    costs ~0.5 ms of fixed overhead per call). Bounded by characters; thread-safe."""

    def __init__(self, max_chars: int = 16_000_000):
        import threading
        from collections import OrderedDict

        self.max_chars, self._chars, self._by_uid = max_chars, 0, OrderedDict()
        self._lock = threading.Lock()

    def retain(self, alive) -> None:
        """Keep only the texts of the documents `alive(uids)` says the index still holds."""
        with self._lock:
            if not self._by_uid:
                return
            uids = np.fromiter(self._by_uid, dtype=np.int64, count=len(self._by_uid))
            for u in uids[~alive(uids)].tolist():
                self._chars -= len(self._by_uid.pop(u))

    def read(self, store, docs: list) -> dict:
        """{docno: text} of `docs` (of `store`, a generation's Segments), reading the missing together."""
        uids = {d: int(store.uids[d]) for d in docs}
        with self._lock:
            out = {d: self._by_uid[u] for d, u in uids.items() if u in self._by_uid}
            for u in {uids[d] for d in out}:
                self._by_uid.move_to_end(u)
        want = [d for d in dict.fromkeys(docs) if d not in out]
        if want:
            got = store.texts(want)
            out.update(got)
            with self._lock:
                for d, text in got.items():
                    if uids[d] not in self._by_uid and len(text) <= self.max_chars // 4:
                        self._by_uid[uids[d]] = text
                        self._chars += len(text)
                while self._chars > self.max_chars:
                    self._chars -= len(self._by_uid.popitem(last=False)[1])
        return out


class ShardFiles:
    """What the searches of one index directory share across its generations: each generation's
    retrievers loaded once (its files, no model), the texts read for recent searches and the
    analysed windows, by uid (a uid's text never changes)."""

    def __init__(self, path, device: str | None = None):
        import threading

        self.path, self.device = path, device
        self.texts = RecentTexts()
        self.window_terms: dict = {}      # analysed passage windows by uid, per analyzer (search/passages.py)
        self.lock = threading.RLock()     # a reader loads once, whichever thread asks first

    def retriever(self, view, name: str):
        """The loaded first-stage reader `name` of the generation `view`."""
        if name in view.retrievers:
            return view.retrievers[name]
        with self.lock:
            if name not in view.retrievers:
                view.retrievers[name] = self._load(view, name)
        return view.retrievers[name]

    def _load(self, view, name: str):
        from . import components as registry
        from .components.states import ReadState
        from .errors import ConfigError, LdrError

        comp = view.manifest["components"].get(name)
        if comp is None:
            have = ", ".join(registry.in_order(view.manifest["components"])) or "none"
            raise ConfigError(f"this index has no {name!r} component (it has: {have})")
        try:
            return registry.get(name).open(ReadState(self.path, name, comp, view.segments))
        except LdrError:
            raise
        except BaseException as e:  # a damaged file surfaces as whatever its reader raises (tantivy: a panic)
            if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
                raise
            where = comp.get("path") or "its segment parts"
            raise IndexFormatError(
                f"the {name} component of {self.path} ({where}) cannot be loaded: {type(e).__name__}: "
                f"{str(e)[:300]}. Run `ldr check {self.path}`; rebuild the index with `ldr index`") from None

    def retain(self, segments) -> None:
        """The caches by uid keep only the documents the generation `segments` holds: their memory
        follows the live index, not its history."""
        def alive(uids):
            docnos = segments.docnos_of_uids(uids)
            if not len(segments.live):        # every document deleted: nothing is alive
                return np.zeros(len(docnos), dtype=bool)
            return (docnos >= 0) & segments.live[np.maximum(docnos, 0)]
        for cache in [self.texts, *list(self.window_terms.values())]:
            cache.retain(alive)


class LocalShard:
    """One generation (`view`) of an index directory (`files`: what its searches share)."""

    def __init__(self, files: ShardFiles, view):
        self.files, self.view = files, view

    @property
    def store(self):
        return self.view.segments

    def retriever(self, kind: str):
        return self.files.retriever(self.view, kind)

    def mask(self, filters: dict | None):
        """The filters' mask over this generation's docnos (None: no filter); the coordinator
        checked their fields against every shard (one this shard lacks passes none of its documents)."""
        from .search import filters as _filters

        if not filters:
            return None
        return self.store.cached_mask(_filters.key(filters) + "/unchecked",
                                      lambda s: _filters.mask(filters, s, False))

    # -- the calls of a Shard ------------------------------------------------------------------
    def describe(self) -> ShardInfo:
        """What the shard is; with each kind that scores with collection statistics (native BM25),
        its live documents and their summed length, so a coordinator knows the whole index's at
        its point in time without asking per query; with a learned-sparse kind, the terms its
        documents hold (a query is weighed over those alone)."""
        from . import components as registry

        comps = self.view.manifest["components"]
        totals, vocabularies = {}, {}
        for name, kind in registry.kinds(comps):
            if kind.collection_stats(comps[name]):
                r = self.retriever(name)
                totals[name] = (int(r.n), r.length)
            if getattr(kind, "narrows_queries", False):     # the terms its documents hold (TermSet)
                vocabularies[name] = self.retriever(name).vocabulary()
        return ShardInfo(int(self.store.rows), len(self.store), tuple(sorted(self.store.meta_fields())), totals,
                         vocabularies=vocabularies)

    def facets(self) -> dict:
        """This generation's metadata fields with counts (search/facets.py), counted once."""
        from .search.facets import count, file_counts
        # counted once per generation (over distinct metadata, in Arrow), not per request of the search
        # page; a document read from a file has its type and folder as fields too (a folder of files has
        # no metadata of its own)
        return self.store.cached("facets", lambda s: count(s.meta_counts() + file_counts(s.all_meta(), s.live),
                                                           len(s)))

    def stats(self, query: str, kinds: list, filters: dict | None) -> ShardStats:
        m = self.mask(filters)
        return ShardStats(len(self.store) if m is None else int(m.sum()),
                          {k: self.retriever(k).collection_stats(query) for k in kinds})

    def stats_many(self, queries: list[str], kinds: list, filters: dict | None) -> list[ShardStats]:
        """stats() of each query, in one call (a batch's statistics: one round, not one a query)."""
        m = self.mask(filters)
        count = len(self.store) if m is None else int(m.sum())
        per_kind = {}
        for k in kinds:
            r = self.retriever(k)
            many = getattr(r, "collection_stats_many", None)
            per_kind[k] = many(queries) if many is not None else [r.collection_stats(q) for q in queries]
        return [ShardStats(count, {k: v[j] for k, v in per_kind.items()}) for j in range(len(queries))]

    def first(self, plan_first, reps: dict, filters: dict | None, ask=None) -> FirstStage:
        """The plan's first stages: each kind's (docno, score) list, each listed document's id and
        the documents the filters leave. A kind sent the whole index's totals only (IndexTotals:
        native BM25 before its document frequencies are summed) ranks with its own frequencies
        scaled up and says how to score its list exactly (TermEvidence); `ask` (WindowAsk): the
        window features of the documents this shard's lists fuse best, for the window stage."""
        from dataclasses import replace

        from .search.source import IndexSource

        allow = self.mask(filters)
        reps = dict(reps)
        totals = [k for k, r in reps.items() if getattr(r, "needs_evidence", False)]
        for k in totals:
            reps[k] = self.retriever(k).provisional(reps[k])
        # such a kind's distribution and bound need the whole index's frequencies: the coordinator's
        stages = tuple(replace(s, distribution=False, bound=False) if s.kind in totals else s for s in plan_first.first)
        source = IndexSource(plan_first.query, self.retriever, self.store, allow, None, reps)
        cands = replace(plan_first, first=stages).run_first(source)
        evidence = {s.kind: self.retriever(s.kind).evidence(reps[s.kind], cands.lists[s.kind], s.depth,
                                                            s.distribution, allow is not None)
                    for s in plan_first.first if s.kind in totals}
        listed = sorted({d for rows in cands.lists.values() for d, _ in rows})
        self._check_listed(listed)
        ids = self.store.ids
        timings = dict(cands.timings)
        features = {}
        if ask is not None:     # timed apart (`windows.features`): a window stage's work done here
            t = time.perf_counter()
            features = self._likely_features(cands, source, ask, reps)
            timings[WINDOW_FEATURES] = time.perf_counter() - t
        return FirstStage(cands.lists, timings, dict(zip(listed, _read(ids, listed))), cands.distributions, cands.bounds,
                          len(self.store) if allow is None else int(allow.sum()), evidence, features)

    def _likely_features(self, cands, source, ask, reps: dict) -> dict:
        """{docno: WindowFeatures} of the `ask.depth` documents this shard's own lists fuse best:
        the window stage's candidates from this shard, most often all of them (the coordinator
        asks again for any it lacks)."""
        from dataclasses import replace

        from .search.stages.base import Candidates

        own = Candidates(cands.query)
        own.lists, own.runs = dict(cands.lists), {k: dict(v) for k, v in cands.runs.items()}
        ranked = replace(ask.fuse, keep=ask.depth).run(own, source).rows
        docs = [d for d, _, _ in ranked[:ask.depth]]
        return self.windows(docs, list(ask.kinds), {k: reps[k] for k in ask.kinds}, list(ask.terms)) if docs else {}

    def first_many(self, plan_first, reps: list[dict], filters: dict | None) -> list[FirstStage]:
        """first() of each query (`reps`: each one's representations): a lone first stage whose
        reader scores many queries at once (native BM25: its `search_many` gives each query's
        (docnos, scores) arrays, best first) is one call, and the listed documents' ids are read
        together."""
        from .search.stages.retrieve import damage_guard

        stage = plan_first.first[0] if len(plan_first.first) == 1 else None
        reader = self.retriever(stage.kind) if stage is not None else None
        if stage is None or stage.distribution or not hasattr(reader, "search_many") \
                or any(stage.kind not in r for r in reps):
            return [self.first(plan_first, r, filters) for r in reps]
        t = time.perf_counter()
        with damage_guard(stage.kind):
            lists = reader.search_many([r[stage.kind] for r in reps], stage.depth, self.mask(filters))
        share = (time.perf_counter() - t) / max(len(reps), 1)
        listed = np.unique(np.concatenate([d for d, _ in lists])).tolist() if lists else []
        self._check_listed(listed)
        names = dict(zip(listed, _read(self.store.ids, listed)))
        out = []
        for docs, scores in lists:
            docs = docs.tolist()
            out.append(FirstStage({stage.kind: list(zip(docs, scores.tolist()))}, {stage.kind: share},
                                  dict(zip(docs, map(names.__getitem__, docs)))))
        return out

    def document(self, doc_id: str):
        """The document `doc_id` of this generation (KeyError: not in it)."""
        if doc_id not in self.store:
            raise KeyError(doc_id)
        return self.store.doc(self.store.row(doc_id))

    def _check_listed(self, listed: list) -> None:
        """A retriever's document numbers are this generation's (a damaged component's are not)."""
        if listed and not 0 <= listed[0] <= listed[-1] < self.store.rows:
            bad = next(d for d in listed if not 0 <= d < self.store.rows)
            raise IndexFormatError(f"a retriever returned document number {bad}, but the index has "
                                   f"{self.store.rows} documents: a component is damaged; run `ldr check` and "
                                   "rebuild the index")

    def _finder(self, kinds=()):
        from .search.passages import finder_for

        return finder_for(self.view.manifest["components"], None, kinds, self.files.window_terms,
                          self.files.lock, self.retriever)

    def windows(self, docs: list, kinds: list, reps: dict, terms: list) -> dict:
        """{docno: WindowFeatures} of `docs` for the query (`terms`, `reps` of the vector `kinds`)."""
        finder = self._finder(kinds)
        keys = {d: int(self.store.uids[d]) for d in docs}
        known = finder.cache.lengths        # documents analysed before: their text is not read
        texts = self.files.texts.read(self.store, [d for d in docs if keys[d] not in known])
        return finder.features(reps, docs, lambda d: texts[d] if d in texts else self.store.text(d), keys, terms)

    def exact(self, kind: str, rep, docs: list, first: dict) -> list:
        return np.asarray(self.retriever(kind).exact_scores(rep, docs, first), dtype=np.float64).tolist()

    def fetch(self, docs: list, text: bool = False, meta: bool = False, cuts: dict | None = None) -> dict:
        """{docno: Fetched}: id and title, and what is asked: the text, the metadata, the passages
        (`cuts` {docno: (its windows best first, n, query terms)})."""
        texts = self.files.texts.read(self.store, docs) if text or cuts else {}
        metas = self.store.doc_metas(docs) if meta else {}
        finder = self._finder() if cuts else None
        out = {}
        for d, i, t in zip(docs, _read(self.store.ids, docs), _read(self.store.titles, docs)):
            got = finder.cut(texts[d], *cuts[d]) if cuts and d in cuts else None
            out[d] = Fetched(i, t, texts[d] if text else None, metas.get(d), meta, got,
                             [texts[d][a:e] for _, a, e, _, _ in got] if got is not None else None)
        return out


def _read(column, docs: list) -> list:
    """column[d] of each of `docs`: a docstore column reads many in one Arrow call."""
    take = getattr(column, "take", None)
    return take(np.asarray(docs, dtype=np.int64)) if take is not None and len(docs) > 8 else [column[d] for d in docs]

