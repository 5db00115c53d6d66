"""Segment replication: a copy of an index (sharded or not) on another disk, brought to a newer
commit by copying only the files it lacks (OpenSearch's segment replication, Lucene's
replicator). Every file an ldr commit names is immutable, so "catch up" is: read the source's
manifest (its own checksum checked), copy each file the copy lacks into a temporary name while
hashing it, refuse it unless its SHA-256 is the one the manifest records, rename it into place,
then write the manifest last: a reader of the copy never sees a generation whose files are not
all there and verified. Generations no reader of the copy holds are then collected.

    catch_up("/shared/idx", "/local/idx")           # the newest commit; {"copied": ..., "bytes": ...}
    ldr replicate /shared/idx /local/idx            # the same from a shell
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import IndexFormatError
from ..paths import inside
from . import generations as gens
from .cluster import cluster_name, collect_cluster, is_cluster, read_cluster
from .lock import WriteLock
from .manifest import read_manifest

CHUNK = 1 << 20


def catch_up(source, target, generation: int | None = None, wait: bool | float = True) -> dict:
    """Bring `target` (a copy, or a new folder) to `source`'s newest commit (or `generation`):
    {generation, copied (files), bytes, kept (files already there), shards}."""
    src, dst = Path(source).absolute(), Path(target).absolute()
    if src == dst or src in dst.parents or dst in src.parents:
        raise IndexFormatError(f"a replica of {src} must be outside it (and it outside the replica): {dst}")
    out = {"generation": None, "copied": 0, "bytes": 0, "kept": 0, "shards": 0}
    if not is_cluster(src):
        found = gens.generations(src)
        if not found:
            raise IndexFormatError(f"{src} holds no committed index to replicate")
        out["generation"] = generation if generation is not None else found[-1]
        _add(out, _index(src, dst, out["generation"], wait))
        return out
    cluster = read_cluster(src, generation)
    out["generation"] = cluster["generation"]
    dst.mkdir(parents=True, exist_ok=True)
    for s in cluster["shards"]:
        if s["generation"] is not None:
            _add(out, _index(src / s["path"], inside(dst, s["path"], "shard path"), s["generation"], wait))
            out["shards"] += 1
    name = cluster_name(cluster["generation"])
    if not (dst / name).is_file():      # the cluster's commit point, last
        gens.publish(dst, cluster, name)
    collect_cluster(dst, 3)
    return out


def _add(out: dict, got: dict) -> None:
    for k in ("copied", "bytes", "kept"):
        out[k] += got[k]


def _index(src: Path, dst: Path, gen: int, wait) -> dict:
    """One index's generation `gen` copied into `dst` (its own write lock held: one catch-up at a
    time per copy), then what no reader of the copy holds collected."""
    from .stores import collect

    pin = gens.Pin(src, gen)            # the source's writer keeps these files while they are copied
    manifest = read_manifest(src, gen)
    dst.mkdir(parents=True, exist_ok=True)
    lock = WriteLock(dst, wait)
    try:
        got = {"copied": 0, "bytes": 0, "kept": 0}
        if gen in gens.generations(dst):
            return got
        for rel, info in manifest["files"].items():
            target = inside(dst, rel, "a manifest's file")
            if target.is_file() and target.stat().st_size == info["size"]:
                got["kept"] += 1        # immutable: a file of an earlier commit, verified when it came
                continue
            _copy_verified(inside(src, rel, "a manifest's file"), target, info)
            got["copied"] += 1
            got["bytes"] += info["size"]
        gens.fsync_tree(dst)
        raw = json.loads(gens.manifest_path(src, gen).read_text(encoding="utf-8"))
        if raw.get("checksum") != manifest.get("checksum"):
            raise IndexFormatError(f"{src}'s manifest of generation {gen} changed while it was copied")
        gens.publish(dst, raw)          # the copy's commit point, written last
        read_manifest(dst, gen)         # as a reader will read it
        collect(dst, gen)
        return got
    finally:
        lock.release()
        pin.close()


def _copy_verified(src: Path, dst: Path, info: dict) -> None:
    """`src` → `dst` through a temporary name, refused unless its size and SHA-256 are the manifest's."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    part = dst.with_name(dst.name + ".ldr-copy")
    digest, size = hashlib.sha256(), 0
    try:
        with open(src, "rb") as fin, open(part, "wb") as fout:
            while chunk := fin.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        if size != info["size"] or digest.hexdigest() != info["sha256"]:
            raise IndexFormatError(f"{src} does not match its manifest (size or SHA-256): not copied; run `ldr check` "
                                   "on the source")
        os.replace(part, dst)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
