"""ldr's per-user cache (ONNX exports, converted models): where it is, content digests memoised
per (file, size, mtime) so that a query does not re-read 100 MB of weights, and folders built
once and published atomically."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def cache_root() -> Path:
    env = os.environ.get("LDR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ldr"


def digest(files: list[Path]) -> str:
    """sha256 over the files' names and bytes, memoised in the cache by path, size and mtime."""
    stamp = json.dumps([(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files])
    memo = cache_root() / "hashes.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    key = hashlib.sha256(stamp.encode()).hexdigest()
    if key in known:
        return known[key]
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    out = h.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**known, key: out}))
        os.replace(tmp, memo)
    except OSError:
        pass    # a read-only cache only costs the hash again next time
    return out


def build_once(folder: Path, ready: str, build: Callable[[Path], None],
               unwritable: Callable[[OSError], Path]) -> Path:
    """`folder`, built by `build(work)` in a temporary sibling and renamed into place: readers see
    a whole folder or none, and a process that loses the race keeps the winner's. A cache that
    cannot be written is `unwritable(error)`'s to handle (build elsewhere, or raise)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as e:
        return unwritable(e)
    try:
        build(work)
        try:
            os.replace(work, folder)
        except OSError:
            if not (folder / ready).is_file():     # not another process winning the race
                raise
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return folder
