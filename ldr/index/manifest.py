"""Generation manifests (`manifest-NNNNNN.json`): the single source of truth for reopening an index.

A commit writes one (see generations.py). It holds the format version, the generation number,
what each component is and how it was built, the segments with their deletions, a size +
SHA-256 per file, and a checksum of itself. Format 2 indexes (one `manifest.json`, files at the
top level) are read as generation 0 with a single segment. An index is data that may come from
anywhere, so everything read from a manifest is checked before use: its own checksum, its
shape (required keys and types), and that every path it names stays inside the index directory.

What opening checks (cheap) and what only `ldr check` catches (see ldr/index/check.py):
- open: manifest checksum and schema; every listed file present with its recorded size; every
  file under SMALL_FILE bytes (metadata, offsets, id maps) hashed in full; per-component
  structure (array shapes, monotone offsets, id ranges) as each component loads.
- `ldr check`: the SHA-256 of every file, whatever its size, plus the full value checks.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path

import numpy as np

from .._version import __version__
from ..errors import IndexFormatError, NotAnIndex
from ..paths import MANIFEST, REBUILD as _REBUILD, inside  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

FORMAT_VERSION = 4          # 2: the manifest carries its own checksum; 3: segments and generations;
#                             4: a segment keeps its texts in their own file (index/doctexts.py)
SMALL_FILE = 1 << 20        # files below this are hashed at every open


def file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _self_checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def new_manifest(generation: int, components: dict, segments: list[dict], ingest: dict, settings: dict) -> dict:
    return {
        "format": "ldr-index",
        "format_version": FORMAT_VERSION,
        "generation": generation,
        "ldr_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "doc_count": sum(s["live"] for s in segments),
        "ingest": ingest,
        "components": components,
        "segments": segments,
        "settings": settings,
    }


def seal(manifest: dict) -> dict:
    """The manifest with its own checksum, ready to publish."""
    manifest = dict(manifest)
    manifest["checksum"] = _self_checksum(manifest)
    return manifest


def file_entries(root: Path, rels, previous: dict | None = None) -> dict[str, dict]:
    """{path: {size, sha256}} for every file under the given paths.

    A file the previous generation listed that is still the same file (same inode and size: files
    are never modified, only replaced), or a hard link to one (an index store's next generation),
    keeps its recorded hash, so a commit hashes only what it wrote. A listed file that is no longer
    the same file (an index copied or restored: new inodes) is hashed and must match its record:
    a write never records a damaged file as sound (IndexFormatError, nothing committed)."""
    previous = previous or {}
    by_inode = {(info["inode"], info["size"]): info for info in previous.values() if info.get("inode")}
    out, damaged = {}, []
    for rel in rels:
        base = Path(root) / rel
        paths = [base] if base.is_file() else [Path(d, n) for d, _, names in os.walk(base) for n in names]
        for p in paths:
            r = p.relative_to(root).as_posix()
            st = p.stat()
            old = previous.get(r)
            same = by_inode.get((st.st_ino, st.st_size)) if not old else None
            if old and old.get("size") == st.st_size and old.get("inode") == st.st_ino:
                out[r] = old
            elif same is not None:
                out[r] = same
            else:
                out[r] = {"size": st.st_size, "sha256": file_digest(p), "inode": st.st_ino}
                if old and (old.get("size") != st.st_size or old.get("sha256") != out[r]["sha256"]):
                    damaged.append(r)
    if damaged:
        raise_damaged(root, damaged)
    return dict(sorted(out.items()))


def raise_damaged(root: Path, rels: list[str]) -> None:
    shown = ", ".join(rels[:5]) + (f" and {len(rels) - 5} more" if len(rels) > 5 else "")
    raise IndexFormatError(f"{shown} in {root} no longer match the checksums the index recorded: the index is "
                           "damaged, and nothing was written on top of it. Run `ldr check` to see every damaged "
                           "file; restore the index from a backup or rebuild it with `ldr index`")


def verify_listed(root: Path, files: dict, under: list[str]) -> None:
    """Hash every file `files` lists under the folders `under` and compare with its record, before
    a write reads them to make new files (a merge, an index store's next generation)."""
    prefixes = tuple(u.rstrip("/") + "/" for u in under)
    damaged = []
    for rel, info in files.items():
        if rel.startswith(prefixes):
            p = Path(root) / rel
            if not p.is_file() or p.stat().st_size != info["size"] or file_digest(p) != info["sha256"]:
                damaged.append(rel)
    if damaged:
        raise_damaged(root, damaged)


def _need(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise IndexFormatError(f"{path}: {what}; the manifest is damaged or not from ldr: {_REBUILD}")


# format 3: the keys each component needs come from its kind (Component.manifest_keys);
# format 2 (ldr 0.1) knew three kinds, with these keys:
_LEGACY_KEYS = {
    "docstore": {"path": str},
    "bm25": {"path": str, "backend": str, "k1": (int, float), "b": (int, float), "analyzer": dict},
    "dense": {"path": str, "faiss": dict, "model": dict, "vectors": int, "dim": int},
    "sparse": {"path": str, "model": dict, "documents": int},
}
_SEGMENT_KEYS = {"name": str, "path": str, "docs": int, "live": int}


def _check_keys(path: Path, where: str, obj, keys: dict) -> None:
    _need(isinstance(obj, dict), path, f"{where} is not an object")
    for key, typ in keys.items():
        _need(key in obj, path, f"{where}.{key} is missing")
        _need(isinstance(obj[key], typ) and not isinstance(obj[key], bool), path,
              f"{where}.{key} has the wrong type ({type(obj[key]).__name__})")
        if isinstance(obj[key], float):
            _need(math.isfinite(obj[key]), path, f"{where}.{key} is not a finite number")


def validate(root: Path, manifest: dict, path: Path | None = None) -> None:
    """Required keys and types; every path inside the index. Raises IndexFormatError."""
    path = path or Path(root) / MANIFEST
    legacy = manifest.get("format_version", 0) < 3
    _need(isinstance(manifest.get("doc_count"), int) and manifest["doc_count"] >= 0, path,
          "'doc_count' is missing or not a count")
    comps = manifest.get("components")
    _need(isinstance(comps, dict) and (not legacy or "docstore" in comps), path,
          "'components' (with a docstore) is missing" if legacy else "'components' is missing")
    from .. import components as registry

    for name, comp in comps.items():
        if legacy:
            _need(name in _LEGACY_KEYS, path, f"unknown component {name!r}")
            keys = _LEGACY_KEYS[name]
        else:
            if not registry.known(name):
                raise IndexFormatError(f"{path}: component {name!r} is not a kind this ldr knows "
                                       f"({', '.join(registry.names())}); register it (ldr.components.register) or "
                                       "upgrade ldr")
            keys = registry.get(name).manifest_keys
        _check_keys(path, f"components.{name}", comp, keys)
        if legacy or isinstance(comp.get("path"), str):
            _need(isinstance(comp.get("path"), str), path, f"components.{name}.path is missing")
            inside(root, comp["path"], f"components.{name}.path")
        if "model" in comp:
            _need(isinstance(comp["model"].get("settings"), dict), path, f"components.{name}.model.settings is missing")
    if not legacy:
        _need(isinstance(manifest.get("generation"), int) and manifest["generation"] >= 1, path,
              "'generation' is missing")
        for name, comp in comps.items():
            if registry.get(name).uses_store(comp):
                _need(isinstance(comp.get("path"), str), path, f"components.{name}.path is missing")
        for key, low in (("next_uid", 0), ("next_segment", 1)):
            v = manifest.get(key)
            _need(isinstance(v, int) and not isinstance(v, bool) and v >= low, path,
                  f"'{key}' is missing or not a whole number from {low}")
        if "history" in manifest:
            _need(isinstance(manifest["history"], list), path, "'history' is not a list")
        segs = manifest.get("segments")
        _need(isinstance(segs, list), path, "'segments' is missing")
        for key in ("name", "path"):
            seen = [s.get(key) for s in segs if isinstance(s, dict)]
            _need(len(seen) == len(set(map(str, seen))), path, f"a segment {key} is listed twice")
        for i, seg in enumerate(segs):
            _check_keys(path, f"segments[{i}]", seg, _SEGMENT_KEYS)
            _need(0 <= seg["live"] <= seg["docs"], path, f"segments[{i}] has {seg['live']} live of {seg['docs']} rows")
            inside(root, seg["path"], f"segments[{i}].path")
            if seg.get("deletes") is not None:
                inside(root, seg["deletes"], f"segments[{i}].deletes")
            for name in comps:
                if name in seg:
                    _need(isinstance(seg[name], dict) and isinstance(seg[name].get("path"), str), path,
                          f"segments[{i}].{name}.path is missing")
                    inside(root, f"{seg['path']}/{seg[name]['path']}", f"segments[{i}].{name}.path")
        _need(sum(s["live"] for s in segs) == manifest["doc_count"], path,
              "'doc_count' differs from the segments' live documents")
    files = manifest.get("files")
    _need(isinstance(files, dict), path, "'files' is missing")
    for rel, info in files.items():
        inside(root, rel, "file")
        _need(isinstance(info, dict) and isinstance(info.get("size"), int) and isinstance(info.get("sha256"), str),
              path, f"files[{rel!r}] needs a size and a sha256")
    if "search" in manifest:
        _need(isinstance(manifest["search"], dict), path, "'search' is not an object")


def _from_legacy(manifest: dict) -> dict:
    """A format 2 manifest as generation 0 of format 3: one segment whose folder is the index."""
    from .. import components as registry

    m = dict(manifest)
    comps = {k: dict(v) for k, v in manifest["components"].items()}
    seg = {"name": "legacy", "path": ".", "docs": m["doc_count"], "live": m["doc_count"], "deletes": None}
    comps.pop("docstore")
    for name, kind in registry.kinds(comps):
        kind.from_legacy(comps[name], seg)
    m.update(components=comps, segments=[seg], generation=0, read_only=True)
    return m


def _not_an_index(root: Path) -> str:
    """What a directory without a manifest is, and the command that makes an index of it."""
    from ..corpus.readers import SUPPORTED

    entries = list(islice(root.iterdir(), 1000))
    if any(p.suffix.lower() in SUPPORTED and p.is_file() and not p.name.startswith("cluster-") for p in entries):
        return (f"{str(root)!r} holds documents, not an index: index them with `ldr index {root} -o IDX`, "
                "then use `-i IDX`")
    if not entries:
        return f"{str(root)!r} is an empty directory, not an index (build one with `ldr index CORPUS -o {root}`)"
    return (f"{str(root)!r} has no manifest: not an ldr index, or a build that did not finish "
            f"(build it with `ldr index CORPUS -o {root}`)")


def read_manifest(root: Path, generation: int | None = None) -> dict:
    """The manifest of `generation` (default: the newest committed one), checked."""
    from .generations import generations, manifest_path, read_newest

    root = Path(root)
    if not root.is_dir():
        raise NotAnIndex(f"no index at {str(root)!r} (build one with `ldr index CORPUS -o {root}`)")

    def read(gen: int) -> dict:
        path = manifest_path(root, gen)
        size = path.stat().st_size
        if size > 64 << 20:
            raise IndexFormatError(f"{path} is {size} bytes: not an ldr manifest")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise IndexFormatError(f"{path} is corrupted ({str(e)[:200]}); {_REBUILD}") from None
        return parse_manifest(text, root, gen, path)

    return read_newest(lambda: generations(root), generation, read, lambda: NotAnIndex(_not_an_index(root)),
                       lambda gen: IndexFormatError(f"generation {gen} of {root} does not exist (any more)"))


def parse_manifest(text: str, root: Path, gen: int, path) -> dict:
    """The manifest `text` of generation `gen`, checked as read_manifest checks it (its paths
    inside `root`); `path` names it in errors (a file, or a URI a replica copies from)."""
    try:
        manifest = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise IndexFormatError(f"{path} is corrupted ({str(e)[:200]}); {_REBUILD}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "ldr-index":
        raise IndexFormatError(f"{path} is not an ldr index manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{root} was written by ldr {manifest.get('ldr_version', '?')} in index format {version}; this ldr "
            f"({__version__}) reads format {FORMAT_VERSION} and older: upgrade ldr or rebuild the index")
    if version >= 2 or "checksum" in manifest:
        if manifest.get("checksum") != _self_checksum(manifest):
            raise IndexFormatError(f"{path} does not match its own checksum (corrupted or edited); {_REBUILD}")
    else:
        log.info("%s: format %s manifest has no checksum of its own (written by ldr before 0.2)", path, version)
    if version >= 3 and gen != 0 and manifest.get("generation") != gen:
        raise IndexFormatError(f"{path} says it is generation {manifest.get('generation')!r}; {_REBUILD}")
    validate(root, manifest, Path(str(path)))
    return _from_legacy(manifest) if version < 3 else manifest


def verify_files(root: Path, manifest: dict, full: bool = True, small: int = SMALL_FILE) -> list[str]:
    """Check every file the manifest lists: present, same size; the SHA-256 of files below `small`
    bytes, or of every file when `full`. Raises IndexFormatError naming the damaged files."""
    problems = []
    for rel, info in manifest.get("files", {}).items():
        p = inside(root, rel, "file")
        if not p.is_file():
            problems.append(f"{rel} is missing")
        elif p.stat().st_size != info["size"]:
            problems.append(f"{rel} has {p.stat().st_size} bytes, expected {info['size']} (truncated or modified)")
        elif (full or info["size"] < small) and file_digest(p) != info["sha256"]:
            problems.append(f"{rel} does not match its checksum (corrupted or modified)")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise IndexFormatError(f"index {root} is damaged: {shown}. {_REBUILD[0].upper() + _REBUILD[1:]}.")
    return problems


def check_uids(root: Path, manifest: dict, uids) -> None:
    """Every row's uid is below the manifest's `next_uid` (a uid handed out again would make a
    document added later collide with one already there). Raises IndexFormatError."""
    # numpy's max: the builtin over a million uids took 40 ms of every open
    top = int(np.max(np.asarray(uids))) if len(uids) else -1
    if "next_uid" in manifest and top >= manifest["next_uid"]:
        raise IndexFormatError(f"{root}: a document has uid {top} but the manifest's next_uid is "
                               f"{manifest['next_uid']}: the manifest is damaged; {_REBUILD}")


def describe(m: dict) -> dict:
    """A manifest as `ldr info` shows it: counts, size, segments, each component described by its kind."""
    from .. import components as registry

    comps = {n: kind.describe(dict(m["components"][n]), m["segments"]) for n, kind in registry.kinds(m["components"])}
    return {"documents": m["doc_count"], "bytes": sum(f["size"] for f in m.get("files", {}).values()),
            "generation": m["generation"],
            "segments": [{"name": s["name"], "documents": s["live"], "deleted": s["docs"] - s["live"]}
                         for s in m["segments"]],
            "created": m.get("created", "?"), "ldr_version": m.get("ldr_version", "?"),
            "format_version": m["format_version"], "components": comps, "ingest": m.get("ingest", {}),
            "history": m.get("history", [])}
