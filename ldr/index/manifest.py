"""manifest.json: the single source of truth for reopening an index.

Written last during a build. Holds the format version, what each component is and how it was
built, a size + SHA-256 per file, and a checksum of itself. An index is data that may come from
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
from pathlib import Path

from .. import __version__
from ..errors import IndexFormatError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2          # 2: the manifest carries its own checksum
MANIFEST = "manifest.json"
SMALL_FILE = 1 << 20        # files below this are hashed at every open
_REBUILD = "rebuild it with `ldr index` (or restore it from a backup)"


def file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def inside(root: Path, rel, what: str = "path") -> Path:
    """`root/rel`, refusing anything that would leave the index directory (absolute paths, `..`,
    symlinks pointing out). A manifest is untrusted input: it must not name other files."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise IndexFormatError(f"{Path(root) / MANIFEST}: {what} {rel!r} is not a relative path; {_REBUILD}")
    if os.path.isabs(rel) or rel.startswith(("/", "\\")) or ".." in Path(rel).parts:
        raise IndexFormatError(
            f"{Path(root) / MANIFEST}: {what} {rel!r} points outside the index directory; refusing to use it. "
            f"The index is damaged or was tampered with: {_REBUILD}")
    base = Path(root).resolve()
    p = (base / rel).resolve()
    if p != base and base not in p.parents:
        raise IndexFormatError(
            f"{Path(root) / MANIFEST}: {what} {rel!r} resolves to {p}, outside the index directory (a symlink?); "
            f"refusing to use it. {_REBUILD}")
    return Path(root) / rel


def checksum_tree(root: Path) -> dict[str, dict]:
    """{relative path: {size, sha256}} for every file under root except the manifest."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if rel in (MANIFEST, MANIFEST + ".part"):
                continue
            out[rel] = {"size": p.stat().st_size, "sha256": file_digest(p)}
    return dict(sorted(out.items()))


def _self_checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def new_manifest(components: dict, doc_count: int, ingest: dict, settings: dict) -> dict:
    return {
        "format": "ldr-index",
        "format_version": FORMAT_VERSION,
        "ldr_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "doc_count": doc_count,
        "ingest": ingest,
        "components": components,
        "settings": settings,
    }


def write_manifest(root: Path, manifest: dict) -> dict:
    manifest = dict(manifest, files=checksum_tree(root))
    manifest["checksum"] = _self_checksum(manifest)
    tmp = root / (MANIFEST + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / MANIFEST)
    return manifest


def _need(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise IndexFormatError(f"{path}: {what}; the manifest is damaged or not from ldr: {_REBUILD}")


# keys every component needs to be opened, with their types
_COMPONENT_KEYS = {
    "docstore": {"path": str},
    "bm25": {"path": str, "backend": str, "k1": (int, float), "b": (int, float), "analyzer": dict},
    "dense": {"path": str, "faiss": dict, "model": dict, "vectors": int, "dim": int},
    "sparse": {"path": str, "model": dict, "documents": int},
}


def validate(root: Path, manifest: dict) -> None:
    """Required keys and types; every path inside the index. Raises IndexFormatError."""
    path = Path(root) / MANIFEST
    _need(isinstance(manifest.get("doc_count"), int) and manifest["doc_count"] >= 0, path,
          "'doc_count' is missing or not a count")
    comps = manifest.get("components")
    _need(isinstance(comps, dict) and "docstore" in comps, path, "'components' (with a docstore) is missing")
    for name, comp in comps.items():
        _need(name in _COMPONENT_KEYS, path, f"unknown component {name!r}")
        _need(isinstance(comp, dict), path, f"components.{name} is not an object")
        for key, typ in _COMPONENT_KEYS[name].items():
            _need(key in comp, path, f"components.{name}.{key} is missing")
            _need(isinstance(comp[key], typ) and not isinstance(comp[key], bool), path,
                  f"components.{name}.{key} has the wrong type ({type(comp[key]).__name__})")
            if isinstance(comp[key], float):
                _need(math.isfinite(comp[key]), path, f"components.{name}.{key} is not a finite number")
        inside(root, comp["path"], f"components.{name}.path")
        if "model" in comp:
            _need(isinstance(comp["model"].get("settings"), dict), path, f"components.{name}.model.settings is missing")
    files = manifest.get("files")
    _need(isinstance(files, dict), path, "'files' is missing")
    for rel, info in files.items():
        inside(root, rel, "file")
        _need(isinstance(info, dict) and isinstance(info.get("size"), int) and isinstance(info.get("sha256"), str),
              path, f"files[{rel!r}] needs a size and a sha256")
    if "search" in manifest:
        _need(isinstance(manifest["search"], dict), path, "'search' is not an object")


def read_manifest(root: Path) -> dict:
    root = Path(root)
    path = root / MANIFEST
    if not root.is_dir():
        raise IndexFormatError(f"no index at {str(root)!r} (build one with `ldr index CORPUS -o {root}`)")
    if not path.is_file():
        raise IndexFormatError(
            f"{str(root)!r} has no manifest.json: not an ldr index, or a build that did not finish; rebuild it")
    if path.stat().st_size > 64 << 20:
        raise IndexFormatError(f"{path} is {path.stat().st_size} bytes: not an ldr manifest")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
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
    validate(root, manifest)
    return manifest


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
