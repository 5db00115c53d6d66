"""Where `ldr replicate` may write: a folder that does not exist or is empty, or a copy of the same
index (a replica it made before, finished or not). Anything else is refused before a byte is
written: a replica's catch-up replaces and collects files under ldr's folder names, and a folder
that is not this index's copy may hold the user's files under those names, or another index.

A copy is told by the index's identity: the `index_id` every commit carries forward (writer.py,
cluster.py); an index written before it existed is told by its commit history instead (the
copy's newest commit must be one of the source's). A first copy marks its folder (MARKER) before
it copies anything, so a copy killed half-way is taken up again rather than refused."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import ConfigError, IndexFormatError
from . import generations as gens
from .cluster import cluster_generations, read_cluster
from .manifest import read_manifest

MARKER = ".ldr-replica.json"


def identity(manifest: dict) -> dict:
    """What names an index across its commits: its id, and its history's (generation, time, op)."""
    return {"index_id": manifest.get("index_id"),
            "history": [[h.get("generation"), h.get("at"), h.get("op")] for h in manifest.get("history", [])
                        if isinstance(h, dict)]}


def same_index(source: dict, copy: dict) -> bool:
    """`copy` (an identity) is an earlier or equal state of `source`'s index."""
    if source["index_id"] and copy["index_id"]:
        return source["index_id"] == copy["index_id"]
    # an index from before ids: the copy's newest commit is among the source's
    return bool(copy["history"]) and copy["history"][-1] in source["history"]


def _copy_identity(dst: Path) -> dict | None:
    """The identity of what `dst` holds: its newest commit's, or its marker's; None if neither."""
    try:
        if cluster_generations(dst):
            return identity(read_cluster(dst))
        if gens.generations(dst):
            return identity(read_manifest(dst))
    except IndexFormatError:
        pass                        # damaged: the marker below, if ldr's, still says whose copy it is
    try:
        marker = json.loads((dst / MARKER).read_text(encoding="utf-8"))
        if isinstance(marker, dict) and isinstance(marker.get("history"), list):
            return {"index_id": marker.get("index_id"), "history": marker["history"]}
    except (OSError, ValueError):
        pass
    return None


def claim(source_name: str, source: dict, dst: Path) -> None:
    """Refuse `dst` unless it is absent, empty, or a copy of `source` (an identity); mark a new copy."""
    if dst.exists() and not dst.is_dir():
        raise ConfigError(f"{dst} is a file: a replica is a folder (give an empty or new folder)")
    if dst.is_dir() and any(dst.iterdir()):
        held = _copy_identity(dst)
        if held is None:
            raise ConfigError(f"{dst} is not empty and is not a copy of {source_name}: ldr replicate writes only "
                              "into a new or empty folder, or a copy of the same index it made before (it replaces "
                              "and removes files under its own folder names there). Give a new folder")
        if not same_index(source, held):
            raise ConfigError(f"{dst} holds another index, not a copy of {source_name}: nothing was written. "
                              "Replicate into a new or empty folder (remove that index first if you mean to "
                              "replace it)")
        return
    dst.mkdir(parents=True, exist_ok=True)
    part = dst / (MARKER + ".part")
    with open(part, "w", encoding="utf-8") as fh:
        json.dump(source, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(part, dst / MARKER)
    gens.fsync_dir(dst)
