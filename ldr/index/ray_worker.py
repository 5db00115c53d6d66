"""What runs on a Ray worker: one actor per worker loads the models once and turns shards into segments.

A shard is a run of row groups of the staging files the driver wrote (`docs-NNNNNN.parquet`,
the docstore's schema, uids already given). The actor writes `seg-NNNNNN` under the staging
folder, which is on storage every node reaches, and returns what the driver checks before it
commits anything: the segment entry, the engine that ran and a size + SHA-256 per file.

A Python error is returned as the shard's result (the driver stops and names the shard); a worker
process that dies is restarted by Ray and its shard retried (`max_task_retries`)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
import traceback
from pathlib import Path

import numpy as np

SHARD_COLUMNS = ("shard", "segment", "first_uid", "docs", "groups")
ATTEMPTS, PROGRESS = "attempts", "progress"


def file_hashes(folder: Path, inode: bool = False) -> dict[str, dict]:
    """{path inside `folder`: {size, sha256}} of every file in it (and the inode, which a rename
    keeps: the commit then need not hash the file again)."""
    from .manifest import file_digest

    out = {}
    for d, _, names in os.walk(folder):
        for n in names:
            p = Path(d, n)
            st = p.stat()
            out[p.relative_to(folder).as_posix()] = {"size": st.st_size, "sha256": file_digest(p),
                                                     **({"inode": st.st_ino} if inode else {})}
    return dict(sorted(out.items()))


def _attempt(staging: Path, shard: int) -> int:
    """Count this attempt at `shard` in a file on the shared storage (1 for the first): a retry
    after a worker died is visible to the next attempt and to the driver."""
    folder = staging / ATTEMPTS
    folder.mkdir(exist_ok=True)
    n = 1
    while True:
        try:
            fd = os.open(folder / f"shard-{shard:06d}.{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
            return n
        except FileExistsError:
            n += 1


class ShardEncoder:
    """A Ray Data callable class: `map_batches(ShardEncoder, batch_size=1, concurrency=N, ...)`."""

    def __init__(self, staging: str, components: dict, settings: dict, threads: int,
                 env: dict | None = None, faults: dict | None = None, progress: bool = False):
        # the encoders size their thread pools from LDR_THREADS: the CPUs Ray gave this actor
        os.environ.update(env or {})
        os.environ["LDR_THREADS"] = str(max(1, int(threads)))
        self.staging = Path(staging)
        if not self.staging.is_dir():
            raise FileNotFoundError(
                f"worker on {socket.gethostname()} cannot see {self.staging}: the index directory must be on "
                "storage every Ray node mounts at the same path")
        from .. import components as registry

        self.components = components
        # the models load once per actor, before the first shard
        self.encoders = {}
        for name, kind in registry.kinds(settings):
            enc = registry.ENCODERS.get(name, kind.settings_from_dict(settings[name]))
            self.encoders[name] = (lambda e: lambda: e)(enc)
        self.faults = faults or {}
        self.progress = progress

    def __call__(self, batch: dict) -> dict:
        results = [self.encode_shard({k: batch[k][i] for k in SHARD_COLUMNS}) for i in range(len(batch["shard"]))]
        return {"shard": np.asarray([r["shard"] for r in results], dtype=np.int64),
                "result": np.asarray([json.dumps(r) for r in results], dtype=object)}

    def encode_shard(self, row: dict) -> dict:
        shard, number = int(row["shard"]), int(row["segment"])
        attempt = _attempt(self.staging, shard)
        where = {"shard": shard, "attempt": attempt, "node": socket.gethostname(), "pid": os.getpid()}
        from .segment import segment_rel

        out = self.staging / segment_rel(number)
        if out.exists():       # an attempt whose worker died left it half written
            shutil.rmtree(out)
        try:
            self._inject(shard, attempt)
            return {**where, **self._write(out, number, int(row["first_uid"]), int(row["docs"]),
                                           json.loads(row["groups"]), shard)}
        except Exception as e:
            shutil.rmtree(out, ignore_errors=True)
            return {**where, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}

    def _inject(self, shard: int, attempt: int) -> None:
        """Fault injection for the tests: kill this worker process (SIGKILL, as a node loss) on the
        first attempt at a shard, or fail a shard on every attempt."""
        if self.faults.get("kill_shard") == shard and (attempt == 1 or self.faults.get("kill_always")):
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        if self.faults.get("fail_shard") == shard:
            raise RuntimeError(f"injected failure in shard {shard}")

    def _write(self, out: Path, number: int, first_uid: int, n_docs: int, groups: list[int], shard: int) -> dict:
        import pyarrow.parquet as pq

        from .docstore import doc_of
        from .segment import SegmentWriter

        t0 = time.perf_counter()
        writer = SegmentWriter(self.staging, number, self.components, self.encoders, allow_small=True)
        uid, last = first_uid, 0.0
        try:
            files: dict[int, pq.ParquetFile] = {}
            for f, g in groups:
                if f not in files:
                    files[f] = pq.ParquetFile(self.staging / f"docs-{f:06d}.parquet")
                d = files[f].read_row_group(g).to_pydict()
                for i in range(len(d["id"])):
                    if d["uid"][i] != uid:
                        raise ValueError(f"staging row group {g}: uid {d['uid'][i]}, expected {uid}")
                    writer.add(doc_of(d, i), uid)
                    uid += 1
                    if self.progress and time.monotonic() - last > 0.5:
                        last = time.monotonic()
                        report_progress(self.staging, shard, writer.count, writer.tokens)
            if uid - first_uid != n_docs:
                raise ValueError(f"read {uid - first_uid} documents, the shard has {n_docs}")
            entry, about = writer.close()
        except BaseException:
            writer.abort()
            raise
        if self.progress:
            report_progress(self.staging, shard, writer.count, writer.tokens)
        return {"segment": entry, "about": about, "files": file_hashes(out), "tokens": writer.tokens,
                "seconds": round(time.perf_counter() - t0, 3), "stages": writer.profile}


def report_progress(staging: Path, shard: int, docs: int, tokens: int) -> None:
    """A shard's documents and tokens so far, in a file of the staging folder (a retry's replaces
    the earlier attempt's), summed by the driver's bar. A file beside the attempts, not an actor:
    an actor per build was one more Ray worker process (~0.6 s of CPU) for a cosmetic bar."""
    folder = staging / PROGRESS
    tmp = folder / f".shard-{shard:06d}.{os.getpid()}"
    tmp.write_text(f"{docs} {tokens}")
    os.replace(tmp, folder / f"shard-{shard:06d}")


def progress_totals(staging: Path) -> tuple[int, int]:
    """(documents, tokens) every shard has reported so far."""
    docs = tokens = 0
    for p in (staging / PROGRESS).glob("shard-*"):
        try:
            d, t = map(int, p.read_text().split())
        except (OSError, ValueError):       # replaced under us: the next poll reads it
            continue
        docs, tokens = docs + d, tokens + t
    return docs, tokens
