"""A sharded index: N complete ldr indexes under one directory, documents routed by a stable hash
of their id, and a cluster commit point written last.

    idx/cluster-000003.json   the commit point: each shard's generation and the global statistics
    idx/shards/shard-000/     a complete ldr index (its own generations, segments, reader pins)
    idx/write.lock            one cluster writer at a time

A write commits the shards it touches (each its own next generation), then the cluster manifest
naming them. Readers open the newest cluster manifest and pin the shard generations it names, so
a write that fails or is killed on any shard leaves every reader on the previous cluster
generation, never a mix; the next writer first brings every shard back to the generation the
cluster names (`ClusterWriter.reconcile`). A shard no document was routed to has no generation
yet (`null`): it is created by the first write that routes one to it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from ..errors import IndexFormatError, NotAnIndex
from ..paths import inside
from . import generations as gens
from .manifest import _self_checksum

FORMAT = "ldr-cluster"
_NAME = re.compile(r"^cluster-(\d{6,})\.json$")
SHARDS = "shards"
HISTORY = 100


def cluster_name(gen: int) -> str:
    return f"cluster-{gen:06d}.json"


def shard_rel(i: int) -> str:
    return f"{SHARDS}/shard-{i:03d}"


def shard_of(doc_id: str, n: int) -> int:
    """The shard a document id lives on: a stable hash (the same on every machine and Python)."""
    digest = hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n


def cluster_generations(root: Path) -> list[int]:
    try:
        return cluster_generations_in(os.listdir(root))
    except OSError:
        return []


def cluster_generations_in(names) -> list[int]:
    return sorted(int(m.group(1)) for n in names if (m := _NAME.match(n)) and n == cluster_name(int(m.group(1))))


def is_cluster(root) -> bool:
    return bool(cluster_generations(Path(root)))


def read_cluster(root: Path, generation: int | None = None) -> dict:
    """The cluster manifest of `generation` (default: the newest), checked: its own checksum, its
    shape, and every shard path inside the directory."""
    root = Path(root)

    def read(gen: int) -> dict:
        path = root / cluster_name(gen)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise           # read_newest's to word (collected, or never there)
        except (OSError, ValueError) as e:
            raise IndexFormatError(f"{path} cannot be read ({e}); the sharded index is damaged") from None
        return parse_cluster(text, root, gen, path)

    return gens.read_newest(
        lambda: cluster_generations(root), generation, read,
        lambda: NotAnIndex(f"{str(root)!r} is not a sharded ldr index (no cluster manifest)"),
        lambda gen: IndexFormatError(f"generation {gen} of the sharded index {root} does not exist (any more)"))


def parse_cluster(text: str, root: Path, gen: int, path) -> dict:
    """The cluster manifest `text` of generation `gen`, checked: its own checksum, its shape, and
    every shard path inside `root`; `path` names it in errors."""
    try:
        m = json.loads(text)
    except ValueError as e:
        raise IndexFormatError(f"{path} cannot be read ({e}); the sharded index is damaged") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("checksum") != _self_checksum(m):
        raise IndexFormatError(f"{path} is not a valid cluster manifest (format or checksum); the sharded index "
                               "is damaged or was modified")
    shards = m.get("shards")
    if not isinstance(shards, list) or not shards or m.get("generation") != gen:
        raise IndexFormatError(f"{path}: no shards, or the wrong generation; the sharded index is damaged")
    for i, s in enumerate(shards):
        if not isinstance(s, dict) or s.get("path") != shard_rel(i) or not (
                s.get("generation") is None or isinstance(s.get("generation"), int)):
            raise IndexFormatError(f"{path}: shard {i} is not described as ldr writes it; the index is damaged")
        inside(root, s["path"], "shard path")
    return m


def new_cluster(gen: int, shards: list[dict], config: dict, history: list, record: dict,
                index_id: str | None = None) -> dict:
    import uuid

    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    m = {"format": FORMAT, "generation": gen, "created": now, "index_id": index_id or uuid.uuid4().hex, "routing": {"hash": "blake2b-8", "shards": len(shards)},
         "shards": shards, "config": config,
         "stats": {"docs": sum(s.get("live", 0) for s in shards), "tokens": sum(s.get("tokens", 0) for s in shards)},
         "history": (history + [{"generation": gen, "at": now, **record}])[-HISTORY:]}
    m["checksum"] = _self_checksum(m)
    return m


def publish_cluster(root: Path, manifest: dict) -> Path:
    """Write the cluster manifest durably (a `.part` file renamed into place): the commit point."""
    return gens.publish(root, manifest, cluster_name(manifest["generation"]))


def collect_cluster(root: Path, keep: int) -> None:
    """Old cluster manifests (the shards' own collectors remove their files), keeping `keep` ones."""
    found = cluster_generations(root)
    for g in found[:-keep] if keep else []:
        (Path(root) / cluster_name(g)).unlink(missing_ok=True)
    for part in Path(root).glob("cluster-*.json.part"):
        part.unlink(missing_ok=True)


def cluster_of_shard(path) -> Path | None:
    """The sharded index `path` is a shard of (`<idx>/shards/shard-NNN`), or None."""
    path = Path(path).absolute()
    if path.parent.name == SHARDS and re.fullmatch(r"shard-\d{3,}", path.name) and is_cluster(path.parent.parent):
        return path.parent.parent
    return None


def missing_shard(root: Path, i: int, entry: dict) -> IndexFormatError:
    """The error for a shard folder the cluster names that holds no index (removed, not mounted)."""
    return IndexFormatError(f"shard {i} of the sharded index {root} ({entry['path']}, generation "
                            f"{entry['generation']}) is missing: restore that folder from a backup or copy, or "
                            "rebuild the sharded index (`ldr index CORPUS -o NEW --shards N`)")


def check_shard_manifest(root: Path, i: int, entry: dict, manifest: dict) -> None:
    """IndexFormatError unless `manifest` is the shard generation the cluster committed: the same
    manifest checksum (a shard folder swapped for another index's, at the same generation number,
    differs) and document count."""
    want = entry.get("manifest")
    if want is not None and (manifest.get("checksum") != want or manifest.get("doc_count") != entry.get("live")):
        raise IndexFormatError(f"shard {i} of {root} ({entry['path']}, generation {entry['generation']}) is not the "
                               "one the cluster committed (another index's shard?): run `ldr check` and restore the "
                               "shard's folder, or rebuild the index")


def shard_entry(root: Path, i: int, manifest: dict | None) -> dict:
    """What the cluster manifest says of shard i at this shard manifest (None: no generation yet)."""
    if manifest is None:
        return {"path": shard_rel(i), "generation": None, "docs": 0, "live": 0, "tokens": 0}
    from .docstore import Docstore
    from .segment import read_deletes

    tokens = 0
    for seg in manifest["segments"]:      # the live documents' lengths: BM25's average length
        store = Docstore(inside(root / shard_rel(i), seg["path"], "segment"), seg["docs"])
        tokens += int(store.lengths[~read_deletes(root / shard_rel(i), seg)].sum())
    return {"path": shard_rel(i), "generation": manifest["generation"], "docs": manifest["doc_count"],
            "live": manifest["doc_count"], "tokens": tokens, "manifest": manifest["checksum"]}


def route_file(docs, n: int, folder: Path, report, max_doc_mb: float | None = None) -> tuple[list[Path], list[int]]:
    """Spill checked documents into one JSON-lines file per shard (each then built on its own, in
    parallel where a cluster runs them); returns the files and each one's document count."""
    from ..corpus import check_documents

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"shard-{i:03d}.jsonl" for i in range(n)]
    counts = [0] * n
    outs = [open(p, "w", encoding="utf-8") for p in paths]
    try:
        for d in check_documents(docs, report, *([max_doc_mb] if max_doc_mb is not None else [])):
            i = shard_of(d.id, n)
            outs[i].write(json.dumps([d.id, d.text, d.title, d.meta, d.source, d.path, d.root, d.stamp],
                                     ensure_ascii=False) + "\n")
            counts[i] += 1
    finally:
        for f in outs:
            f.close()
    return paths, counts


def routed_docs(path: Path):
    """The documents of one routed file, already checked (a shard's writer passes them through)."""
    from ..corpus import CheckedDocs, Doc

    def read():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                yield Doc(*json.loads(line))     # id, text, title, meta, source, path, root, stamp
    return CheckedDocs(read())
