"""A sharded index's shards built in parallel on Ray (`ldr index --shards N --ray`): each shard is
one Ray task that builds a complete index from its routed documents (cluster.py) on storage every
node mounts. A task whose worker dies is retried (Ray's fault tolerance: the next attempt's writer
removes what the dead one left); the cluster commit comes after every shard has committed."""
from __future__ import annotations

from pathlib import Path

from ..errors import IndexWriteError

RETRIES = 3


def _build_shard(path: str, routed: str, config, count: int, threads: int) -> int:
    from ..corpus import IngestReport
    from .cluster import routed_docs
    from .writer import IndexWriter

    with IndexWriter(Path(path), threads=threads, create=True, cluster=True) as w:
        return w.rebuild(routed_docs(Path(routed)), config, IngestReport(), progress=False, total=count)["generation"]


def build_on_ray(paths: list[Path], files: list[Path], counts: list[int], config, opts) -> dict:
    """Every shard built as a Ray task; returns what `ldr index` reports of the cluster used."""
    from .ray_build import Cluster

    cluster = Cluster(opts.address)
    try:
        ray = cluster.ray
        # default: the cluster's CPUs shared by the shards, 1 to 4, and no more than a node holds
        share = min(4.0, cluster.cpus / max(len(paths), 1), cluster.largest_node)
        cpus = cluster.fit(opts.cpus_per_worker or max(1.0, share))
        task = ray.remote(num_cpus=cpus, max_retries=RETRIES, retry_exceptions=False)(_build_shard)
        refs = [task.remote(str(p), str(f), config, c, max(1, int(cpus))) for p, f, c in zip(paths, files, counts)]
        try:
            ray.get(refs)
        except Exception as e:
            raise IndexWriteError(f"a shard's build failed on Ray after {RETRIES + 1} attempts: {e}; nothing was "
                                  "committed") from None
        return {"nodes": cluster.nodes, "cpus_per_shard": cpus, "shards": len(paths)}
    finally:
        cluster.close()
