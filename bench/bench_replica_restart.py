"""A killed replica answering again (issue 55): a sharded index of N synthetic documents served by
one Serve application per shard on a local Ray cluster (ray_shards.open_on_ray, as `ldr serve --ray`'s
coordinator), one replica of shard 0 killed (ray.kill: the process gone, as a crashed node's);
measured: with 1 replica, the seconds until a search answers whole again (what Serve's restart of
the replica, its open of the shard and the coordinator's retries cost), and the searches that
named shard 0 missing meanwhile; with 2 replicas, the searches that failed or missed a shard
while the other replica answered, and the seconds until Serve had 2 replicas again.

    python bench/bench_replica_restart.py --docs 10000 --shards 2
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_coordinator import corpus, queries  # noqa: E402


def replicas_of(ray, shard: int) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "serve" and f"ldr-shard-{shard}" in a["name"] and "REPLICA" in a["name"].upper()]


def trial(path: Path, replicas: int, qs: list[str]) -> dict:
    import ray
    from ray import serve

    from ldr.serve.ray_shards import deploy, open_on_ray

    handles = deploy(str(path), None, replicas)
    ix = open_on_ray(path, handles)
    want = {q: [(h.id, round(h.score, 5)) for h in ix.search(q, k=10)] for q in qs}
    before = replicas_of(ray, 0)
    ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
    t0, wrong, missing, answered, whole_at, n = time.perf_counter(), 0, 0, 0, None, 0
    back_at = None
    while time.perf_counter() - t0 < 120:
        q = qs[n % len(qs)]
        n += 1
        r = ix.search(q, k=10)
        if r.missing_shards:
            missing += 1
        elif [(h.id, round(h.score, 5)) for h in r] != want[q]:
            wrong += 1
        else:
            answered += 1
            if whole_at is None:
                whole_at = time.perf_counter() - t0
        now = replicas_of(ray, 0)
        if back_at is None and len(now) >= len(before) and before[0] not in now:
            back_at = time.perf_counter() - t0
        if whole_at is not None and back_at is not None and n >= 20:
            break
    for i in range(len(handles)):
        serve.delete(f"ldr-shard-{i}")
    return {"replicas": replicas, "searches": n, "whole": answered, "missing_shard": missing, "wrong": wrong,
            "first_whole_answer_s": None if whole_at is None else round(whole_at, 2),
            "replicas_restored_s": None if back_at is None else round(back_at, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "figures" / "bench_replica_restart.json"))
    a = ap.parse_args()
    import ray

    from ldr.sharded import ShardedIndex

    path = Path(tempfile.mkdtemp(prefix="ldr-restart-")) / "idx"
    ShardedIndex.build(corpus(a.docs), path, shards=a.shards, dense=None, sparse=None)
    ray.init(num_cpus=4, logging_level=logging.WARNING, log_to_driver=False)
    qs = queries(20, seed=3)
    rows = [trial(path, r, qs) for r in (1, 2)]
    for r in rows:
        print(json.dumps(r), flush=True)
    Path(a.out).write_text(json.dumps({"documents": a.docs, "shards": a.shards, "trials": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
