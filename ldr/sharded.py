"""A sharded index (storage: ldr/index/cluster.py), built and resharded by api.py and opened by the
one handle, api.Index (shard_sets.LocalShards: the shards of one cluster generation, each pinned
to the generation the cluster names, searched in one process, a thread per shard) so that a query
answers exactly as the unsharded index of the same documents.

The query is encoded once (BM25 with the whole index's statistics: document count, average
length and every query term's document frequency, summed over the shards); each shard runs the
plan's first stages; the coordinator gathers their lists (search/gather.py) and runs the rest.
"""
from __future__ import annotations

from .api import Index, open, reshard  # noqa: F401  (ldr.open opens either; ldr.reshard)

ShardedIndex = Index        # the one handle; `ShardedIndex.build(corpus, path, shards=N)` as before


class Shards:
    """What `ldr eval --shards N` evaluates: `Shards(n)(path)` opens, `.build(...)` builds sharded
    indexes of n shards (the Index class's calls), cached apart from unsharded ones."""

    def __init__(self, n: int):
        self.n, self.cache_tag = n, f"-shards{n}"

    def __call__(self, path, verify: bool = False) -> Index:
        return Index(path, verify=verify)

    def build(self, corpus, path, config=None, progress: bool = False) -> Index:
        return Index.build(corpus, path, shards=self.n, config=config, progress=progress)

