"""manifest.json: the single source of truth for reopening an index.

Written last during a build. Holds the format version, what each component is and how it was
built, and a size + SHA-256 per file so that truncation or corruption is caught on open.
"""
from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..errors import IndexFormatError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def checksum_tree(root: Path) -> dict[str, dict]:
    """{relative path: {size, sha256}} for every file under root except the manifest."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if rel == MANIFEST:
                continue
            out[rel] = {"size": p.stat().st_size, "sha256": file_digest(p)}
    return dict(sorted(out.items()))


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


def write_manifest(root: Path, manifest: dict) -> None:
    manifest = dict(manifest, files=checksum_tree(root))
    tmp = root / (MANIFEST + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / MANIFEST)


def read_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    if not Path(root).is_dir():
        raise IndexFormatError(f"no index at {str(root)!r} (build one with `ldr index CORPUS -o {root}`)")
    if not path.is_file():
        raise IndexFormatError(
            f"{str(root)!r} has no manifest.json: not an ldr index, or a build that did not finish; rebuild it")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IndexFormatError(f"{path} is corrupted ({e}); rebuild the index") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "ldr-index":
        raise IndexFormatError(f"{path} is not an ldr index manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise IndexFormatError(
            f"{root} was written by ldr {manifest.get('ldr_version', '?')} in index format {version}; this ldr "
            f"({__version__}) reads format {FORMAT_VERSION} and older: upgrade ldr or rebuild the index")
    return manifest


def verify_files(root: Path, manifest: dict, full: bool = True) -> None:
    """Check every file the manifest lists: present, same size, and (full) same SHA-256."""
    problems = []
    for rel, info in manifest.get("files", {}).items():
        p = Path(root) / rel
        if not p.is_file():
            problems.append(f"{rel} is missing")
        elif p.stat().st_size != info["size"]:
            problems.append(f"{rel} has {p.stat().st_size} bytes, expected {info['size']} (truncated or modified)")
        elif full and file_digest(p) != info["sha256"]:
            problems.append(f"{rel} does not match its checksum (corrupted or modified)")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise IndexFormatError(f"index {root} is damaged: {shown}. Rebuild it with `ldr index`.")
