"""`--ray`: encode an index's new documents on a Ray cluster; the driver checks and commits.

    driver   reads the corpus (the same checks and skip counts as a local build), gives uids,
             writes tantivy/Lucene, and stages the documents as Parquet row groups in
             `segments/ray-work-*/docs.parquet` inside the index directory
    Ray Data one row per shard (a run of row groups), `map_batches` over an actor pool: each actor
             (ray_worker.ShardEncoder) loads the models once and writes one segment per shard
             next to the staged documents, on storage every node mounts at the same path
    driver   checks every segment (documents, uids, ids, file sizes and SHA-256, vectors and
             postings, the same engine everywhere), moves them into `segments/` and commits them
             with the BM25 index as one generation, or nothing

The staging folder sits under `segments/`, so a driver that dies leaves nothing a later writer
does not remove (it lists no manifest)."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import crash_signals, ray_session
from ..errors import ConfigError, IndexWriteError

log = logging.getLogger(__name__)


@dataclass
class RayOptions:
    address: str | None = None        # as ray.init takes it; None: a local cluster on this machine
    workers: int | None = None        # actors; default: as many as the cluster's CPUs (GPUs) allow
    cpus_per_worker: float | None = None   # default: 1 with GPUs, else min(4, the cluster's CPUs)
    shard_docs: int | None = None     # documents per shard; default: ~4 shards per worker, at most 1000
    shard_mb: float = 256.0           # and at most this much text per shard
    retries: int = 3                  # a shard whose worker died is tried again this many times
    faults: dict = field(default_factory=dict)   # tests: {"kill_shard": i} / {"fail_shard": i}

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--ray-workers must be at least 1 (got {self.workers})")
        if self.cpus_per_worker is not None and self.cpus_per_worker <= 0:
            raise ConfigError(f"--ray-cpus-per-worker must be positive (got {self.cpus_per_worker})")
        if self.shard_docs is not None and self.shard_docs < 1:
            raise ConfigError(f"--ray-shard-docs must be at least 1 (got {self.shard_docs})")
        if not self.faults and os.environ.get("LDR_RAY_FAULTS"):
            self.faults = json.loads(os.environ["LDR_RAY_FAULTS"])


def ray_options(ray) -> "RayOptions | None":
    """What an API call's `ray=` means: None or False none, True a local cluster, or the RayOptions given."""
    return None if ray is None or ray is False else RayOptions() if ray is True else ray


def import_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError("--ray needs Ray, an optional part of ldr: pip install 'ldr[ray]'") from None
    return ray


class Cluster:
    """Connected to Ray for one build: joins a running cluster (`address`), reuses the one this
    process already runs, or starts a local one (stopped again afterwards)."""

    def __init__(self, address: str | None):
        self.ray = import_ray()
        self.started = ray_session.join(address)
        from ray.data import DataContext
        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False          # ldr shows one bar for the whole build
        ctx.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        res = self.ray.cluster_resources()
        self.cpus, self.gpus = float(res.get("CPU", 0)), float(res.get("GPU", 0))
        # a worker runs on one node: what it may ask for is bounded by a node's CPUs, not the
        # cluster's (two 1-CPU nodes never run a 2-CPU worker: such a build waited forever)
        self.node_cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in self.ray.nodes() if n.get("Alive")]
        self.nodes = len(self.node_cpus)

    @property
    def largest_node(self) -> float:
        """The CPUs of the largest live node: the most one worker can ask for."""
        return max(self.node_cpus, default=0.0)

    def fit(self, cpus: float, what: str = "--ray-cpus-per-worker") -> float:
        """`cpus` if some node has that many, else a ConfigError (Ray would wait for such a node)."""
        largest = self.largest_node
        if largest <= 0:
            raise ConfigError("the Ray cluster has no CPUs to run encoders on")
        if cpus > largest:
            raise ConfigError(f"{what} {cpus:g} is more CPUs than any node of the Ray cluster has (the largest has "
                              f"{largest:g}, the cluster {self.cpus:g} in all); a worker runs on one node")
        return cpus

    def plan(self, opts: RayOptions) -> tuple[int, float, float]:
        """(workers, CPUs per worker, GPUs per worker) for this cluster."""
        if self.gpus >= 1:
            cpus = opts.cpus_per_worker or 1
            workers = opts.workers or int(self.gpus)
            return workers, cpus, 1.0
        cpus = self.fit(opts.cpus_per_worker or min(4.0, self.largest_node))
        workers = opts.workers or max(1, sum(int(n // cpus) for n in self.node_cpus))
        return workers, cpus, 0.0

    def close(self) -> None:
        if self.started:
            with crash_signals.jvm_kept():         # shutdown resets the fault handlers to the default
                self.ray.shutdown()


def worker_settings(encoders: dict, gpus: float) -> dict:
    """The encoders' settings as the workers get them. On CPU workers an `auto` engine is pinned to
    the precision the driver resolves it to (bf16 stays bf16, any fp32 engine becomes EXACT): a node
    with bf16 in hardware and one without encode one index alike, as a plain build on the driver
    would (issue 79). A GPU worker resolves its own (PyTorch on the GPU)."""
    from ..encode.dense import DenseSettings, dense_engine
    from ..encode.runtime import EXACT
    from ..encode.sparse import SparseSettings, sparse_engine

    out = {}
    for name, s in encoders.items():
        d = asdict(s)
        engine = {DenseSettings: dense_engine, SparseSettings: sparse_engine}.get(type(s))
        if not gpus and engine is not None and d.get("backend") == "auto":
            d["backend"] = "bf16" if engine(s) == "bf16" else EXACT
        out[name] = d
    return out


def _attempts(staging: Path) -> dict[int, int]:
    from .ray_worker import ATTEMPTS
    out: dict[int, int] = {}
    for p in (staging / ATTEMPTS).glob("shard-*.*"):
        s, n = p.name[len("shard-"):].split(".")
        out[int(s)] = max(out.get(int(s), 0), int(n))
    return out


def run_shards(cluster: Cluster, shards: list[dict], staging: Path, components: dict, settings: dict,
               opts: RayOptions, plan: tuple[int, float, float], bar, names) -> dict[int, dict]:
    """Encode every shard on the actor pool; {shard: worker result}. Fails naming the shard."""
    ray = cluster.ray
    from .ray_worker import PROGRESS, SHARD_COLUMNS, ShardEncoder, progress_totals

    workers, cpus, gpus = plan
    (staging / PROGRESS).mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k in ("LDR_CACHE_DIR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    ds = ray.data.from_items([{k: s[k] for k in SHARD_COLUMNS} for s in shards], override_num_blocks=len(shards))
    with warnings.catch_warnings():
        # Ray Data takes the actors' retry limits only as `ray_remote_args` (deprecated in 2.60, kept
        # until 2.64: the [ray] extra stays below it); its default retries a shard forever
        warnings.simplefilter("ignore", DeprecationWarning)
        ds = ds.map_batches(
            ShardEncoder, batch_size=1, compute=ray.data.ActorPoolStrategy(size=min(workers, len(shards))),
            num_cpus=cpus, num_gpus=gpus or None,
            fn_constructor_kwargs={"staging": str(staging), "components": components,
                                   "settings": worker_settings(settings, gpus), "threads": max(1, int(cpus)), "env": env,
                                   "faults": opts.faults, "progress": True},
            # an actor restarts at most once per death its shards may cost: unbounded (-1), the actor
            # of a build that failed kept restarting and held the cluster's CPUs from the next build
            max_restarts=len(shards) * max(opts.retries, 1), max_task_retries=opts.retries)
    done = threading.Event()

    def poll():
        while not done.wait(0.5):
            try:
                bar.update(*progress_totals(staging))
            except Exception as e:  # the bar is cosmetic: never fail the build for it
                log.debug("progress: %s", e)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    results: dict[int, dict] = {}
    rows = ds.iter_rows()
    try:
        for row in rows:
            r = json.loads(row["result"])
            if "error" in r:
                log.debug("shard %s failed on %s:\n%s", r["shard"], r.get("node"), r.get("traceback"))
                raise IndexWriteError(f"{names(r['shard'])} failed on Ray worker {r.get('node')} "
                                      f"(pid {r.get('pid')}): {r['error']}")
            results[r["shard"]] = r
    except IndexWriteError:
        raise
    except Exception as e:
        # Ray gave up: a worker died on every attempt at a shard (or the cluster went away)
        tries = _attempts(staging)
        failing = sorted((s for s in tries if s not in results), key=lambda s: -tries[s])
        what = (f"{names(failing[0])} failed on {tries[failing[0]]} attempts (its worker died each time)"
                if failing else "the Ray build failed")
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IndexWriteError(f"{what}: {type(e).__name__}: {first[:300]}") from None
    finally:
        # closing the iteration shuts Ray Data's executor down now: left to the garbage collector
        # (a caller that keeps the error keeps its frames), a failed build's actors held the
        # cluster's CPUs and the next build on it waited ~17 s for them
        getattr(rows, "close", lambda: None)()
        done.set()
        poller.join()
    bar.update(*(sum(r["segment"]["docs"] for r in results.values()), sum(r["tokens"] for r in results.values())))
    missing = [s["shard"] for s in shards if s["shard"] not in results]
    if missing:
        raise IndexWriteError(f"the Ray build returned no result for {', '.join(names(s) for s in missing[:3])}")
    return results


def verify_shards(staging: Path, shards: list[dict], results: dict[int, dict], components: dict,
                  ids: list[str], first_uid: int, names) -> tuple[list[dict], dict, dict]:
    """Check every worker's segment before anything is committed; returns (segment entries,
    component info from the workers, {file: size, sha256, inode} as the driver read them)."""
    import numpy as np

    from .check import _segments
    from .docstore import Docstore
    from .ray_worker import file_hashes
    from .segment import segment_rel

    # a compressed dense part's codebook is per worker (each segment names its own)
    abouts = {json.dumps({k: {f: v for f, v in info.items() if f != "codebook"} for k, info in
                          results[s["shard"]]["about"].items()}, sort_keys=True) for s in shards}
    if len(abouts) > 1:
        raise IndexWriteError("the Ray workers did not all run the same model engine "
                              f"({' vs '.join(sorted(abouts)[:2])}); pass --backend explicitly (e.g. torch or "
                              "onnx) so every node encodes alike")
    about = results[shards[0]["shard"]]["about"]
    comps = {**components, **{name: {**components.get(name, {}), **info} for name, info in about.items()}}
    entries, known = [], {}
    for s in shards:
        r, name = results[s["shard"]], names(s["shard"])
        e, rel = r["segment"], segment_rel(s["segment"])
        folder = staging / rel
        if e.get("path") != rel or e.get("docs") != s["docs"] or e.get("live") != s["docs"]:
            raise IndexWriteError(f"{name}: the worker wrote {e.get('path')} with {e.get('docs')} documents, "
                                  f"expected {rel} with {s['docs']}")
        hashes = file_hashes(folder, inode=True)
        plain = {f: {"size": h["size"], "sha256": h["sha256"]} for f, h in hashes.items()}
        if plain != r["files"]:
            bad = sorted(set(plain) ^ set(r["files"]) | {f for f in plain if plain[f] != r["files"].get(f)})
            raise IndexWriteError(f"{name}: segment files differ from what the worker wrote ({', '.join(bad[:5])}): "
                                  "is the index directory on storage every node shares?")
        store = Docstore(folder, s["docs"])
        a = s["first_uid"] - first_uid
        if list(store.ids) != ids[a:a + s["docs"]] or \
                not np.array_equal(store.uids, np.arange(s["first_uid"], s["first_uid"] + s["docs"])):
            raise IndexWriteError(f"{name}: the segment's documents are not the shard's")
        problems = _segments(staging, {"components": comps, "segments": [e]}, lambda _: None)
        if problems:
            raise IndexWriteError(f"{name}: the segment does not check: {'; '.join(problems[:3])}")
        known.update({f"{rel}/{f}": h for f, h in hashes.items()})
        entries.append(e)
    return entries, about, known


def write_segments(writer, docs, report, settings, components, stores, number, first_uid, progress, total,
                   max_doc_mb, opts):
    """IndexWriter's Ray path: the driver reads, numbers and stages the documents (feeding the
    index stores), the actors encode shards into segments, the driver checks them and moves them
    into `segments/`. Returns (segment entries, bytes, component info, files already hashed)."""
    import shutil
    import uuid

    from . import ray_stage as rb

    staging = writer.root / "segments" / f"ray-work-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    created: list[Path] = []

    def run():
        cluster = Cluster(opts.address)     # a wrong address fails before the corpus is read
        bar = None
        try:
            plan = cluster.plan(opts)
            stores.prepare()
            created.extend([*stores.folders, staging])
            staging.mkdir(parents=True)
            stores.open()
            bar = rb._Bar(progress, total)
            t0 = time.perf_counter()
            chunks, ids, n_bytes = rb.stage_documents(
                docs, report, max_doc_mb, staging, first_uid, stores if stores else None, bar,
                chunk_docs=min(rb.CHUNK_DOCS, opts.shard_docs or rb.CHUNK_DOCS))
            stores.close()
            t_read = time.perf_counter()
            shards = rb.plan_shards(chunks, plan[0], opts, first_uid, number)

            def names(i):
                return rb._shard_name(shards[i], ids, first_uid)
            bar.encoding(min(plan[0], len(shards)))
            results = run_shards(cluster, shards, staging, components, settings, opts, plan, bar, names)
            t_enc = time.perf_counter()
            entries, about, known = verify_shards(staging, shards, results, components, ids, first_uid, names)
        except BaseException:
            stores.abort()
            raise
        finally:
            if bar is not None:
                bar.close()
            cluster.close()
        for e in entries:
            created.append(writer.root / e["path"])
            os.rename(staging / e["path"], writer.root / e["path"])
        for book in sorted((staging / "codebooks").glob("*.faiss")):     # compressed dense parts'
            (writer.root / "codebooks").mkdir(exist_ok=True)
            if not (writer.root / "codebooks" / book.name).exists():
                created.append(writer.root / "codebooks" / book.name)
                os.rename(book, writer.root / "codebooks" / book.name)
        shutil.rmtree(staging)
        t_done = time.perf_counter()
        writer.profile = {"read": round(t_read - t0, 3), "encode": round(t_enc - t_read, 3),
                        "verify": round(t_done - t_enc, 3)}
        retried = sorted(r["shard"] for r in results.values() if r["attempt"] > 1)
        writer.ray_info = {"address": opts.address, "nodes": cluster.nodes, "workers": min(plan[0], len(shards)),
                         "cpus_per_worker": plan[1], "gpus_per_worker": plan[2], "shards": len(shards),
                         "retried": retried, "tokens": sum(r["tokens"] for r in results.values()),
                         "worker_seconds": round(sum(r["seconds"] for r in results.values()), 3),
                         "options": {k: v for k, v in asdict(opts).items() if k != "faults"}}
        return entries, n_bytes, about, known

    return writer._guard(run, created)
