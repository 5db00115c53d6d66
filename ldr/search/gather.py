"""The coordinator of a search over shards: it gathers the values shards return (their first
stages' lists with each candidate's id, their candidates' window features, their final hits'
texts and passages) into one Candidates and gives the rest of the plan (fusion, the window
stage, reranking, relevance, passages) a QuerySource over those values, as if the shards were
one index. Nothing here opens a shard: a shard is anything with the calls of `Shard` (a local
pinned generation, a Ray Serve replica on another node).

Documents are numbered globally: shard s's document d is `offsets[s] + d`. Ties in score are
broken by id over the whole index, as one index breaks them (the ids come with the candidates),
so the gathered lists equal the lists one index would return.
"""
from __future__ import annotations

import bisect
from dataclasses import replace
from operator import itemgetter
from typing import Any, Protocol

import numpy as np

from .passages import COVER, WindowFeatures
from .window_counts import covers
from .stages.base import Candidates, ListedScores, strictly_falling
from ..values import Fetched, FirstStage, ShardInfo, ShardStats


class Shard(Protocol):
    """A shard of one point in time, as values (each call names nothing but documents of its own)."""

    def describe(self) -> ShardInfo: ...
    def stats(self, query: str, kinds: list, filters: dict | None) -> ShardStats: ...
    def stats_many(self, queries: list, kinds: list, filters: dict | None) -> list[ShardStats]: ...
    def first(self, plan_first, reps: dict, filters: dict | None, ask=None) -> FirstStage: ...
    def first_many(self, plan_first, reps: list, filters: dict | None) -> list[FirstStage]: ...  # first() of each
    def windows(self, docs: list, kinds: list, reps: dict, terms: list) -> dict[int, WindowFeatures]: ...
    def exact(self, kind: str, rep, docs: list, first: dict) -> list: ...
    def fetch(self, docs: list, text: bool = False, meta: bool = False, cuts: dict | None = None) -> dict[int, Fetched]: ...
    def facets(self) -> dict: ...      # its documents' metadata fields with counts (search/facets.py)


class ShardMap:
    """Global document numbers over shards of `rows` document numbers each."""

    def __init__(self, rows: list[int]):
        self.offsets = [0]
        for n in rows:
            self.offsets.append(self.offsets[-1] + int(n))

    def locate(self, docno: int) -> tuple[int, int]:
        s = bisect.bisect_right(self.offsets, docno) - 1
        return s, docno - self.offsets[s]

    def group(self, docnos) -> dict[int, list[tuple[int, int]]]:
        """{shard: [(global, local)]} of `docnos`, in their order."""
        docnos = [int(d) for d in docnos]
        if len(self.offsets) == 2:      # one shard: its numbers are the index's
            return {0: list(zip(docnos, docnos))} if docnos else {}
        out: dict[int, list] = {}
        for d in docnos:
            s, local = self.locate(d)
            out.setdefault(s, []).append((d, local))
        return out


class CandidateOrder:
    """Equal scores broken by id (as IdOrder, over the ids the candidates came with): `order[docno]`
    is its id, `order[docnos]` the rank of each among those given."""

    def __init__(self, ids: dict):
        self.ids = ids

    def __getitem__(self, docnos):
        if isinstance(docnos, (int, np.integer)):
            return self.ids[int(docnos)]
        keys = np.array([self.ids[d] for d in np.asarray(docnos, dtype=np.int64).tolist()], dtype=object)
        rank = np.empty(len(keys), dtype=np.int64)
        rank[np.argsort(keys, kind="stable")] = np.arange(len(keys))
        return rank


def gather(parts: list[FirstStage | None], shards: ShardMap, query: str, depth: dict[str, int]) -> tuple[Candidates, dict]:
    """(one Candidates, {docno: id}) from each shard's first stages (None: a shard that did not
    answer): per kind of the plan (`depth`), the best `depth[kind]` of every shard's list (global
    numbers), ordered by score then id; a kind's time (and the features') is its slowest shard's."""
    out = Candidates(query)
    answered = [(s, c) for s, c in enumerate(parts) if c is not None]
    if len(answered) == 1 and not shards.offsets[answered[0][0]]:
        ids = answered[0][1].ids        # one shard's numbers are the index's (its value is not changed)
    else:
        ids = {}
        for s, c in answered:
            off = shards.offsets[s]
            ids.update(c.ids if not off else {off + int(d): i for d, i in c.ids.items()})
    for kind in depth:
        if len(answered) == 1 and not shards.offsets[answered[0][0]]:
            rows = answered[0][1].lists.get(kind, [])
        else:                       # global numbers, each shard's offset looked up once
            rows = []
            for s, c in answered:
                off, listed = shards.offsets[s], c.lists.get(kind, [])
                rows.extend([(off + d, sc) for d, sc in listed] if off else listed)
        if len(answered) > 1:       # one shard's list is in this order already
            # by score, then id: equal scores are rare, so by score alone (4x faster than the two
            # keys: a 4-shard BM25 run's lists are ~160 rows a query) unless two are equal
            rows.sort(key=itemgetter(1), reverse=True)
            if not strictly_falling(rows, len(rows)):
                rows.sort(key=lambda r: (-r[1], ids[r[0]]))
        out.lists[kind] = rows[:depth[kind]]     # a copy: the shard's own list is left as it came
        out.runs[kind] = ListedScores(out.lists[kind])
        out.timings[kind] = max((c.timings.get(kind, 0.0) for _, c in answered), default=0.0)
        parts_of = [c.distributions[kind] for _, c in answered if kind in c.distributions]
        if parts_of and len(parts_of) == len(answered):     # the whole index's, or none (a shard that did not say)
            out.distributions[kind] = add_distributions(parts_of)
        # one value with the whole index's statistics (each shard's equal); a scorer with its own (tantivy): the highest
        told = [c.bounds[kind] for _, c in answered if kind in c.bounds]
        if told:
            out.bounds[kind] = max(told)
    # what else the shards timed with their lists (the window features): the slowest shard's
    for key in {k for _, c in answered for k in c.timings} - set(depth):
        out.timings[key] = max(c.timings.get(key, 0.0) for _, c in answered)
    return out, ids


def add_distributions(parts: list[dict]) -> dict:
    """Shards' score distributions of one query as the whole index's (sums add; the max is the max)."""
    return {"n": sum(p["n"] for p in parts), "sum": sum(p["sum"] for p in parts),
            "sumsq": sum(p["sumsq"] for p in parts), "max": max(p["max"] for p in parts)}


class Exact:
    """One kind's `exact_scores` over the shards, by global document number (what a second stage
    that rescores with a kind's own scores calls)."""

    def __init__(self, kind: str, shards: list, map_: ShardMap):
        self.kind, self.shards, self.map = kind, shards, map_

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        out = np.zeros(len(docnos), dtype=np.float64)
        at = {d: i for i, d in enumerate(docnos)}
        for s, pairs in self.map.group(docnos).items():
            local_first = {loc: first_stage[g] for g, loc in pairs if g in first_stage}
            got = self.shards[s].exact(self.kind, rep, [loc for _, loc in pairs], local_first)
            for (g, _), v in zip(pairs, got):
                out[at[g]] = v
        return out


class ShardedSource:
    """The QuerySource of the coordinator, over values: the query encoded once (BM25 with the
    whole index's statistics), the candidates' ids, their windows' features and texts asked of the
    shards that hold them (together, once per query), passages found among the gathered
    candidates as one index finds them."""

    def __init__(self, query: str, reps: dict, shards: list, map_: ShardMap, ids: dict, finder=None,
                 encode=None, bind=None, each=None):
        """`encode(kind)`: the query for a kind no first stage searched (a second stage's);
        `bind(spec)`: the reranker a plan's RerankerSpec names, loaded where the plan runs;
        `each(call)`: [call(shard) for every shard], in parallel (None: one shard after another)."""
        self.query, self.reps, self.shards, self.map, self.ids = query, reps, shards, map_, ids
        self.finder, self.encode, self.bind, self.each = finder, encode, bind, each
        self.read: dict[int, str] = {}
        self.feats: dict[int, Any] = {}
        self.fetched: dict[int, Fetched] = {}   # what a fetch brought (no texts): the final fetch asks for no more
        self.missing: set[int] = set()      # shards that failed a call after their first stages
        self.rounds = 0                     # calls to the shards made here (each to every shard concerned at once)
        self.with_meta = False              # the request shows the hits' metadata
        self._covers: dict[int, float] = {}

    def reranker(self, spec):
        return self.bind(spec)

    def rep(self, kind: str):
        if kind not in self.reps:
            self.reps[kind] = self.encode(kind)
        return self.reps[kind]

    def search(self, kind: str, rep, depth: int) -> list:
        raise RuntimeError("a plan's first stages run on the shards")

    def tiebreak(self):
        return CandidateOrder(self.ids)

    def _each(self, docnos, call) -> dict:
        """{global docno: value} from `call(shard, locals, s)` -> {local: value} on each shard holding
        some (None: the shard did not answer; it is named in the result)."""
        out = {}
        groups = self.map.group(docnos)
        self.rounds += bool(groups)
        if self.each is not None and len(groups) > 1:      # every shard concerned at once (Ray: one round trip)
            which = {id(self.shards[s]): s for s in groups}
            answers = self.each(lambda sh: call(sh, [loc for _, loc in groups[which[id(sh)]]], which[id(sh)])
                                if id(sh) in which else None)
        else:
            answers = {s: call(self.shards[s], [loc for _, loc in pairs], s) for s, pairs in groups.items()}
        for s, pairs in groups.items():
            got = answers[s]
            if got is None:
                self.missing.add(s)
                continue
            out.update({g: got[loc] for g, loc in pairs if loc in got})
        return out

    def prefetch(self, docnos) -> None:
        want = [d for d in dict.fromkeys(docnos) if d not in self.read]
        if want:
            got = self._each(want, lambda sh, locs, _: sh.fetch(locs, text=True))
            self.read.update({d: v.text for d, v in got.items()})
            self.fetched.update({d: replace(v, text=None) for d, v in got.items()})

    def text(self, docno: int) -> str:
        if docno not in self.read:
            self.prefetch([docno])
        return self.read.get(docno, "")

    def meta(self, docnos: list[int]) -> dict:
        got = self._each(docnos, lambda sh, locs, _: sh.fetch(locs, meta=True))
        return {d: v.doc.meta for d, v in got.items()}

    def _features(self, docnos) -> dict:
        want = [d for d in dict.fromkeys(docnos) if d not in self.feats]
        if want:
            kinds = self.finder.vector_kinds
            reps = {k: self.rep(k) for k in kinds}
            terms = self.finder.term_list(self.query)
            self.feats.update(self._each(want, lambda sh, locs, _: sh.windows(locs, kinds, reps, terms)))
        return self.feats

    def best_windows(self, docnos: list[int], scales=(), phrases: bool = False, aspects: bool = False) -> dict:
        """{docno: {the lexical kind: the BM25 of its best window among these documents' windows,
        each vector kind: its best window's similarity, each size of `scales`: its best window of
        that many terms}} (PassageFinder.best_from), with `phrases` the BM25 of the query's
        ordered term pairs in it (phrases.py) and with `aspects` the sum of each of the query's
        sentences' best window (aspects.py); {} where no finder analyses this index's windows."""
        if self.finder is None:
            return {}
        feats = self._features(docnos)
        memo: dict = {}            # windows placed for a scale, read again by the aspects
        out = self.finder.best_from(feats, docnos, scales, memo)
        self._covers.update((d, v[COVER]) for d, v in out.items())
        if phrases or aspects:
            from ..components.analysis import first_terms

            terms = self.finder.term_list(self.query)
            k1, b = self.finder.k1, self.finder.b
        if phrases:
            from .phrases import KEY, MIN_TERMS, pair_scores, query_pairs

            sequence = first_terms(self.finder.terms(self.query))
            if len(sequence) >= MIN_TERMS:
                pairs = query_pairs(sequence, terms)
                for d, v in pair_scores(feats, docnos, pairs, len(terms), k1, b).items():
                    out[d][KEY] = v
        if aspects:
            from . import aspects as asp

            parts = asp.split(self.query, lambda s: first_terms(self.finder.terms(s)))
            if parts:
                for d, v in asp.aspect_scores(feats, docnos, parts, terms, k1, b, memo).items():
                    out[d][asp.KEY] = v
        return out

    def covers(self, docnos: list[int]) -> dict:
        """{docno: the largest share of the query's terms two neighbouring windows of it hold}
        (window_counts.covers: it depends on the document and the query alone, so the window
        stage's are read again), {} where no finder analyses this index's windows."""
        if self.finder is None:
            return {}
        want = [d for d in dict.fromkeys(docnos) if d not in self._covers]
        if want:
            got = covers(self._features(want), want)
            self._covers.update((d, got.get(d, 0.0)) for d in want)
        return {d: self._covers[d] for d in docnos}

    def passages(self, docnos: list[int], n: int) -> dict:
        """{docno: its n best passages}: windows ranked here, cut to sentences where the text is."""
        if self.finder is None or n < 1:
            return {d: [] for d in docnos}
        ranked = self.finder.rank(self._features(docnos), docnos)
        terms = self.finder.term_list(self.query)
        cuts = {d: (ranked.win[ranked.order[d]], n, terms) for d in docnos if ranked.order.get(d)}
        off = self.map.offsets
        # the hits' metadata comes along (`with_meta`): the final fetch then asks for nothing more
        got = self._each(list(cuts), lambda sh, locs, s: sh.fetch(locs, meta=self.with_meta,
                                                                 cuts={loc: cuts[off[s] + loc] for loc in locs}))
        out = {d: [] for d in docnos}
        for d, v in got.items():
            out[d] = self.finder.passages_of(ranked, d, v.cuts, v.passages)
        self.fetched.update({d: replace(v, cuts=None, passages=None) for d, v in got.items()})
        return out

    def release(self) -> None:
        """Drop the texts read (a result keeps its candidates' scores, not their texts)."""
        self.read.clear()
        self.feats.clear()
        self.fetched.clear()
        self._covers.clear()
