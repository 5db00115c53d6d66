"""Segment replication: a copy of an index (sharded or not) on another disk, brought to a newer
commit by copying only the files it lacks (OpenSearch's segment replication, Lucene's
replicator). Every file an ldr commit names is immutable, so "catch up" is: read the source's
manifest (its own checksum checked), copy each file the copy lacks into a temporary name while
hashing it, refuse it unless its SHA-256 is the one the manifest records, rename it into place,
then write the manifest last: a reader of the copy never sees a generation whose files are not
all there and verified. Generations no reader of the copy holds are then collected.

The source may be a folder or a URI (index/remote.py: s3://, gs://, file://, ...): a writer
publishes its commits to object storage with `push` (files first, each manifest after its files,
the cluster manifest last) and each node's replica catches up from there.

    catch_up("/shared/idx", "/local/idx")           # the newest commit; {"copied": ..., "bytes": ...}
    catch_up("s3://bucket/idx", "/local/idx")       # from object storage
    push("/local/idx", "s3://bucket/idx")           # a writer's commit published to object storage
    ldr replicate SOURCE TARGET                     # either, from a shell
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import ConfigError, IndexFormatError
from ..paths import inside
from . import generations as gens
from .cluster import (cluster_generations, cluster_generations_in, cluster_name, collect_cluster, is_cluster,
                      parse_cluster, read_cluster)
from .lock import WriteLock
from .manifest import parse_manifest, read_manifest
from .remote import Remote, is_uri
from .replica_target import claim, identity

CHUNK = 1 << 20


def catch_up(source, target, generation: int | None = None, wait: bool | float = True) -> dict:
    """Bring `target` (a copy, or a new or empty folder) to `source`'s newest commit (or `generation`):
    {generation, copied (files), bytes, kept (files already there, each hashed), shards}. Any
    other target is refused before anything is written (replica_target.py). `source` may be a
    URI; a URI `target` publishes the folder `source` there instead (`push`)."""
    if is_uri(target):
        if is_uri(source):
            raise ConfigError(f"{source} and {target} are both URIs: copy one to a folder first (a copy or a "
                              "publication runs between a folder and a URI)")
        return push(source, target, generation)
    dst = Path(target).absolute()
    if is_uri(source):
        src = _RemoteSource(Remote(str(source)))
    else:
        path = Path(source).absolute()
        if path == dst or path in dst.parents or dst in path.parents:
            raise IndexFormatError(f"a replica of {path} must be outside it (and it outside the replica): {dst}")
        src = _LocalSource(path)
    out = {"generation": None, "copied": 0, "bytes": 0, "kept": 0, "shards": 0}
    clusters = src.clusters()
    if not clusters:
        found = src.generations("")
        if not found:
            raise IndexFormatError(f"{src.name('')} holds no committed index to replicate")
        out["generation"] = generation if generation is not None else found[-1]
        claim(src.name(""), identity(src.manifest("", out["generation"], dst)[0]), dst)
        _add(out, _index(src, "", dst, out["generation"], wait))
        return out
    cluster = src.cluster(generation if generation is not None else clusters[-1], dst)
    out["generation"] = cluster["generation"]
    claim(src.name(""), identity(cluster), dst)
    for s in cluster["shards"]:
        if s["generation"] is not None:
            _add(out, _index(src, s["path"], inside(dst, s["path"], "shard path"), s["generation"], wait))
            out["shards"] += 1
    name = cluster_name(cluster["generation"])
    if not (dst / name).is_file():      # the cluster's commit point, last
        gens.publish(dst, cluster, name)
    collect_cluster(dst, 3)
    return out


def newest_cluster(location) -> dict:
    """The newest cluster commit where a writer commits (a folder or a URI), checked."""
    if not is_uri(location):
        return read_cluster(Path(location))
    src = _RemoteSource(Remote(str(location)))
    found = src.clusters()
    if not found:
        raise IndexFormatError(f"{location} holds no sharded ldr index (no cluster manifest)")
    return src.cluster(found[-1], Path("/nonexistent/ldr-replica"))


class _LocalSource:
    """A folder of this machine: each generation pinned while it is copied (its writer keeps it)."""

    def __init__(self, root: Path):
        self.root = root

    def name(self, rel: str) -> str:
        return str(self.root / rel)

    def clusters(self) -> list[int]:
        return cluster_generations(self.root)

    def cluster(self, gen: int, dst: Path) -> dict:
        return read_cluster(self.root, gen)

    def generations(self, rel: str) -> list[int]:
        return gens.generations(self.root / rel)

    def pin(self, rel: str, gen: int):
        return gens.Pin(self.root / rel, gen)

    def manifest(self, rel: str, gen: int, dst: Path) -> tuple[dict, dict]:
        """(the checked manifest, its raw form as the copy will hold it)."""
        checked = read_manifest(self.root / rel, gen)       # before the raw read: a damaged file is a clear error
        return checked, json.loads(gens.manifest_path(self.root / rel, gen).read_text(encoding="utf-8"))

    def open(self, rel: str):
        return open(inside(self.root, rel, "a manifest's file"), "rb")


class _RemoteSource:
    """A URI: nothing can be pinned there, so a file its writer collects during the copy is a
    clear error (run again); everything read is checked against the copy's folder."""

    def __init__(self, remote: Remote):
        self.remote = remote

    def name(self, rel: str) -> str:
        return self.remote.name(rel)

    def clusters(self) -> list[int]:
        return cluster_generations_in(self.remote.names())

    def cluster(self, gen: int, dst: Path) -> dict:
        rel = cluster_name(gen)
        return parse_cluster(self.remote.read_text(rel), dst, gen, self.remote.name(rel))

    def generations(self, rel: str) -> list[int]:
        return gens.generations_in(self.remote.names(rel))

    def pin(self, rel: str, gen: int):
        return None

    def manifest(self, rel: str, gen: int, dst: Path) -> tuple[dict, dict]:
        name = _join(rel, gens.manifest_path(Path(""), gen).name)
        text = self.remote.read_text(name)
        return parse_manifest(text, dst, gen, self.remote.name(name)), json.loads(text)

    def open(self, rel: str):
        return self.remote.open(rel)


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _add(out: dict, got: dict) -> None:
    for k in ("copied", "bytes", "kept"):
        out[k] += got[k]


def _index(src, rel: str, dst: Path, gen: int, wait) -> dict:
    """One index (`rel` of `src`)'s generation `gen` copied into `dst` (its own write lock held:
    one catch-up at a time per copy), then what no reader of the copy holds collected."""
    from .stores import collect

    pin = src.pin(rel, gen)             # a local source's writer keeps these files while they are copied
    dst.mkdir(parents=True, exist_ok=True)
    manifest, raw = src.manifest(rel, gen, dst)
    lock = WriteLock(dst, wait)
    try:
        got = {"copied": 0, "bytes": 0, "kept": 0}
        if gen in gens.generations(dst):
            return got
        for name, info in manifest["files"].items():
            target = inside(dst, name, "a manifest's file")
            if target.is_file() and target.stat().st_size == info["size"] and _sha256(target) == info["sha256"]:
                got["kept"] += 1        # a file of an earlier commit, hashed again: a damaged one is replaced
                continue
            _copy_verified(src, _join(rel, name), target, info)
            got["copied"] += 1
            got["bytes"] += info["size"]
        gens.fsync_tree(dst)
        if src.manifest(rel, gen, dst)[1].get("checksum") != manifest.get("checksum"):
            raise IndexFormatError(f"{src.name(rel)}'s manifest of generation {gen} changed while it was copied")
        gens.publish(dst, raw)          # the copy's commit point, written last
        read_manifest(dst, gen)         # as a reader will read it
        collect(dst, gen)
        return got
    finally:
        lock.release()
        if pin is not None:
            pin.close()


def push(source, uri: str, generation: int | None = None) -> dict:
    """Publish the folder `source`'s newest commit (or `generation`) to `uri`: the files the URI
    lacks (each checked against its manifest's SHA-256 before it leaves), each index's manifest
    after its files, a sharded index's cluster manifest last. Generations already published stay
    (a replica may be copying them): expire them with the storage's own lifecycle rules."""
    src, remote = Path(source).absolute(), Remote(str(uri))
    out = {"generation": None, "copied": 0, "bytes": 0, "kept": 0, "shards": 0}
    if not is_cluster(src):
        found = gens.generations(src)
        if not found:
            raise IndexFormatError(f"{src} holds no committed index to publish")
        out["generation"] = generation if generation is not None else found[-1]
        _add(out, _push_index(src, remote, "", out["generation"]))
        return out
    cluster = read_cluster(src, generation)
    out["generation"] = cluster["generation"]
    for s in cluster["shards"]:
        if s["generation"] is not None:
            _add(out, _push_index(src / s["path"], remote, s["path"], s["generation"]))
            out["shards"] += 1
    name = cluster_name(cluster["generation"])
    if name not in remote.names():
        remote.put(src / name, name)    # the cluster's commit point, last
    return out


def _push_index(src: Path, remote: Remote, rel: str, gen: int) -> dict:
    pin = gens.Pin(src, gen)
    try:
        manifest = read_manifest(src, gen)
        got = {"copied": 0, "bytes": 0, "kept": 0}
        name = _join(rel, gens.manifest_path(Path(""), gen).name)
        if remote.size(name) is not None:
            return got
        for f, info in manifest["files"].items():
            if remote.size(_join(rel, f)) == info["size"]:
                got["kept"] += 1        # published with an earlier commit (a partial upload differs in size)
                continue
            path = inside(src, f, "a manifest's file")
            if _sha256(path) != info["sha256"]:
                raise IndexFormatError(f"{path} does not match its manifest (SHA-256): not published; run `ldr check`")
            remote.put(path, _join(rel, f))
            got["copied"] += 1
            got["bytes"] += info["size"]
        remote.put(gens.manifest_path(src, gen), name)     # this index's commit point, after its files
        return got
    finally:
        pin.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_verified(src, rel: str, dst: Path, info: dict) -> None:
    """`rel` of `src` → `dst` through a temporary name, refused unless its size and SHA-256 are the manifest's."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    part = dst.with_name(dst.name + ".ldr-copy")
    digest, size = hashlib.sha256(), 0
    try:
        with src.open(rel) as fin, open(part, "wb") as fout:
            while chunk := fin.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        if size != info["size"] or digest.hexdigest() != info["sha256"]:
            raise IndexFormatError(f"{src.name(rel)} does not match its manifest (size or SHA-256): not copied; run "
                                   "`ldr check` on the source")
        os.replace(part, dst)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
