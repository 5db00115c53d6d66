"""ldr's per-user cache (ONNX exports, converted models): where it is, content digests memoised
per (file, size, mtime) so that a query does not re-read 100 MB of weights, and folders built
once and published atomically."""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:      # no flock: builders of one folder may build it side by side, as before
    fcntl = None

log = logging.getLogger(__name__)


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
    a whole folder or none. A process that finds another building it waits, then reuses it (and
    one that loses a race without the lock keeps the winner's). A cache that cannot be written is
    `unwritable(error)`'s to handle (build elsewhere, or raise)."""
    with _building(folder):
        if (folder / ready).is_file():      # built while this process waited
            return folder
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            # work folders of builds killed before their rename (SIGKILL skips every cleanup): under
            # this folder's lock no live process builds into one
            for left in folder.parent.glob(f".{folder.name}-*"):
                shutil.rmtree(left, ignore_errors=True)
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


@contextlib.contextmanager
def _building(folder: Path):
    """An exclusive flock on the cache's lock for `folder` while it is built. Ray workers of one
    node, or a server beside `ldr index`, each exported the same model side by side on a fresh
    machine (multilingual-e5: 20 s and a 2.7 GB child each). The kernel drops the lock of a
    process that dies. No lock where the cache cannot be written: `unwritable` handles that."""
    fd = None
    if fcntl is not None:
        try:
            locks = cache_root() / "locks"
            locks.mkdir(parents=True, exist_ok=True)
            fd = os.open(locks / f"{folder.parent.name}-{folder.name}.lock",
                         os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError:
            fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.warning("another process is building %s; waiting for it to finish", folder)
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)      # releases the lock
