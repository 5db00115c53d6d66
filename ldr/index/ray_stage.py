"""The driver's side of a Ray build before any worker runs: documents checked, numbered and
staged as Parquet row groups (feeding the index stores on the way), then cut into shards."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from ..corpus import check_documents
from ..corpus.text import utf8_len
CHUNK_DOCS = 16                # staging row group: at most this many documents ...
CHUNK_CHARS = 8 << 20          # ... or this much text (shards are whole row groups)
FILE_DOCS = 4096               # documents per staging file
SHARDS_PER_WORKER = 4          # default shard size: about this many shards per worker ...
MAX_SHARD_DOCS = 1000          # ... and at most this many documents in one (a retry redoes one shard)


class _Bar:
    """The build's one progress bar: documents encoded, tokens per second, documents read."""

    def __init__(self, enabled: bool, total: int | None):
        from tqdm.auto import tqdm
        self.bar = tqdm(desc="indexing (ray)", unit="doc", total=total, disable=not enabled, leave=False)
        self.t0 = time.perf_counter()
        self.read = 0

    def reading(self, n: int) -> None:
        self.read = n
        if n % 64 == 0:
            self.bar.set_postfix_str(f"read {n}", refresh=True)

    def encoding(self, workers: int) -> None:
        self.bar.total = self.read
        self.bar.set_description(f"encoding on {workers} Ray worker{'s' if workers > 1 else ''}")
        self.t0 = time.perf_counter()

    def update(self, docs: int, tokens: int) -> None:
        self.bar.n = min(docs, self.read)
        rate = tokens / max(time.perf_counter() - self.t0, 1e-6)
        self.bar.set_postfix_str(f"{rate:,.0f} tok/s", refresh=True)

    def close(self) -> None:
        self.bar.close()


def plan_shards(chunks: list[tuple[int, int, int, int]], workers: int, opts, first_uid: int,
                first_segment: int) -> list[dict]:
    """Consecutive row groups into shards: about SHARDS_PER_WORKER per worker (so a slow or
    retried shard does not hold the build), bounded in documents and text."""
    n_docs = sum(c[2] for c in chunks)
    per = opts.shard_docs or min(MAX_SHARD_DOCS, max(1, math.ceil(n_docs / (workers * SHARDS_PER_WORKER))))
    limit = opts.shard_mb * (1 << 20)
    shards, groups, docs, chars, uid = [], [], 0, 0, first_uid

    def close():
        nonlocal groups, docs, chars, uid
        shards.append({"shard": len(shards), "segment": first_segment + len(shards), "first_uid": uid,
                       "docs": docs, "groups": json.dumps(groups)})
        uid += docs
        groups, docs, chars = [], 0, 0

    for f, g, d, c in chunks:
        if groups and (docs + d > per or chars + c > limit):
            close()
        groups.append([f, g])
        docs, chars = docs + d, chars + c
    if groups:
        close()
    return shards


def stage_documents(docs, report, max_doc_mb: float, staging: Path, first_uid: int, store_writer, bar: _Bar,
                    chunk_docs: int = CHUNK_DOCS):
    """Check and number the documents as a local build does, feed the index stores (tantivy/Lucene), and write them
    to staging files `docs-NNNNNN.parquet` in row groups (a file holds at most FILE_DOCS
    documents, which bounds its footer). Returns (row groups [(file, group, docs, chars)], ids, bytes)."""
    import pyarrow.parquet as pq

    from .docstore import SCHEMA, rows_table

    chunks, ids, pending, chars, n_bytes, uid = [], [], [], 0, 0, first_uid
    out, n_file, in_file, n_groups = None, -1, 0, 0

    def flush():
        nonlocal pending, chars, out, n_file, in_file, n_groups
        if out is None or in_file >= FILE_DOCS:
            if out is not None:
                out.close()
            n_file, in_file, n_groups = n_file + 1, 0, 0
            out = pq.ParquetWriter(staging / f"docs-{n_file:06d}.parquet", SCHEMA, compression="zstd",
                                   write_page_checksum=True, write_statistics=["uid"])
        out.write_table(rows_table([d for _, d in pending], [u for u, _ in pending], [0] * len(pending)))
        chunks.append((n_file, n_groups, len(pending), chars))
        in_file, n_groups = in_file + len(pending), n_groups + 1
        pending, chars = [], 0

    try:
        for doc in check_documents(docs, report, max_doc_mb):
            pending.append((uid, doc))
            ids.append(doc.id)
            if store_writer is not None:
                store_writer.add(uid, doc)
            uid += 1
            chars += len(doc.text)
            n_bytes += utf8_len(doc.text)
            bar.reading(len(ids))
            if len(pending) >= chunk_docs or chars >= CHUNK_CHARS:
                flush()
        if pending:
            flush()
    finally:
        if out is not None:
            out.close()
    return chunks, ids, n_bytes


def _shard_name(shard: dict, ids: list[str], first_uid: int) -> str:
    a = shard["first_uid"] - first_uid
    b = a + shard["docs"] - 1
    return f"shard {shard['shard']} (documents {ids[a]!r} … {ids[b]!r})"
