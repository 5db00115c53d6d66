"""Every path an index's manifest names must stay inside the index directory (a manifest is
untrusted input). Used by the storage side and by every component."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import IndexFormatError

MANIFEST = "manifest.json"  # format 2's single manifest
REBUILD = "rebuild it with `ldr index` (or restore it from a backup)"
_REBUILD = REBUILD


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
