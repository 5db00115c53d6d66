"""The coordinator's half of a first round that needs no statistics round: a kind that scores
with collection statistics (native BM25) ranks on each shard with the shard's own frequencies
scaled up and sends what scores its list exactly (components/bm25_store/native_evidence.py);
here its query side sums every shard's, scores each list as the unsharded index would (to the
bit), and a shard whose list could hide a document of the whole index's top `depth` (its bound
says so) is asked again with the exact statistics. The query's score distribution and bound,
which the relevance reads, come from the same sums.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..values import FirstStage


@dataclass
class Settled:
    parts: list                    # each shard's FirstStage with exact lists (None: did not answer)
    reps: dict                     # kind → the exact query (what a later call scores with)
    asked_again: list              # shards asked a second time (their bound failed)


def totals_of(snap, query: str, kinds: list) -> dict:
    """kind → what its shards are first sent: the whole index's totals, from each shard's describe()."""
    about = snap.about()
    return {k: snap.side(k).whole(query, [a.totals[k] for a in about if k in a.totals]) for k in kinds}


def settle(snap, parts: list, query: str, plan_first, depths: dict, totals: dict, again) -> Settled:
    """`parts`: round one's FirstStage per shard; `depths`: kind → the whole index's list depth;
    `totals`: kind → what was sent; `again(shard, plan, reps)`: a shard's first stages asked
    once more (a FirstStage or None)."""
    parts = list(parts)
    reps, retry = {}, {}
    for kind, tot in totals.items():
        evs = {s: p.evidence[kind] for s, p in enumerate(parts) if p is not None and kind in p.evidence}
        if not evs:
            continue
        got = snap.side(kind).settle(query, evs, depths[kind], tot, _asks(plan_first, kind, "distribution"))
        reps[kind] = got.rep
        bound = _asks(plan_first, kind, "bound")
        for s in evs:
            if s in got.retry:
                retry.setdefault(s, []).append(kind)
                continue
            p = parts[s]
            dist = got.distributions.get(s)
            parts[s] = replace(p, lists={**p.lists, kind: got.lists[s]},
                               distributions={**p.distributions, **({kind: dist} if dist else {})},
                               bounds={**p.bounds, kind: got.bound} if bound else p.bounds)
    for s, kinds in retry.items():
        plan = replace(plan_first, first=tuple(st for st in plan_first.first if st.kind in kinds))
        got = again(s, plan, {k: reps[k] for k in kinds})
        parts[s] = None if got is None else _merge(parts[s], got, kinds)
    return Settled(parts, reps, sorted(retry))


def _asks(plan_first, kind: str, what: str) -> bool:
    return any(s.kind == kind and getattr(s, what) for s in plan_first.first)


def _merge(p: FirstStage, got: FirstStage, kinds: list) -> FirstStage:
    """Round one's answer with `kinds`' lists, distributions and bounds from the exact one."""
    return replace(p, lists={**p.lists, **{k: got.lists[k] for k in kinds}},
                   ids={**p.ids, **got.ids}, timings={**p.timings, **{k: p.timings.get(k, 0) + got.timings.get(k, 0)
                                                                      for k in kinds}},
                   distributions={**p.distributions, **{k: got.distributions[k] for k in kinds
                                                        if k in got.distributions}},
                   bounds={**p.bounds, **{k: got.bounds[k] for k in kinds if k in got.bounds}})
