"""Commit generations: `manifest-NNNNNN.json` files, the highest one wins.

A commit writes the new manifest to a `.part` file, fsyncs it, renames it into place and fsyncs
the directory: a generation either exists completely or not at all, so a writer killed at any
moment leaves the previous generation as the newest. Nothing a manifest lists is ever modified.

Readers pin the generation they opened with a shared `flock` on `readers/gen-NNNNNN.lock`; the
kernel drops it when the reader closes or its process dies. A holder on another machine (a Ray
coordinator) takes a lease instead (leases.py: a file with an expiry). The garbage collector
removes a generation (its manifest, then the files no kept generation lists) only when it can
take that lock exclusively and no unexpired lease names it. The newest generation is always kept.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from ..errors import IndexFormatError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^manifest-(\d{6,})\.json$")
HOLDER = r"[A-Za-z0-9_-]{1,64}"          # a lease holder's name (leases.py)
LEASE = rf"lease-(\d{{6,}})-({HOLDER})\.json"    # a lease file in readers/
_LEASE = re.compile(rf"^{LEASE}$")
READERS = "readers"
LEGACY = "manifest.json"            # format 2 and older: one generation, files at the top level

try:
    import fcntl
except ImportError:  # not POSIX: no pins (the collector then keeps every generation)
    fcntl = None


def manifest_name(gen: int) -> str:
    return f"manifest-{gen:06d}.json"


def generations(root: Path) -> list[int]:
    """Every committed generation in the directory, oldest first (0: a format-2 manifest.json)."""
    try:
        return generations_in(os.listdir(root))
    except OSError:
        return []


def generations_in(names) -> list[int]:
    """The committed generations a folder holding the files `names` has, oldest first."""
    gens = []
    for name in names:
        m = _NAME.match(name)
        if m and name == manifest_name(int(m.group(1))):   # only ldr's own spelling (a stray copy is not one)
            gens.append(int(m.group(1)))
        elif name == LEGACY:
            gens.append(0)
    return sorted(gens)


def read_newest(listing, generation: int | None, read, none, gone):
    """`read(gen)` of `generation`, or of the newest generation `listing()` names (`none()`: the
    error when it names none; `gone(gen)`: the one for a generation not there). A reader slow
    between listing and reading can find the newest it listed collected by a writer that committed
    newer ones meanwhile: it reads the newest again (not damage). Manifests and cluster manifests
    are read this way."""
    for _ in range(20):
        found = listing()
        if not found:
            raise none()
        gen = found[-1] if generation is None else generation
        try:
            return read(gen)
        except FileNotFoundError:
            if generation is None and listing()[-1:] != [gen]:
                continue
            raise gone(gen) from None
    raise IndexFormatError("the index changed too quickly to be read (a writer committing without pause); try again")


def manifest_path(root: Path, gen: int) -> Path:
    return Path(root) / (LEGACY if gen == 0 else manifest_name(gen))


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Make every file under root durable before a manifest names it."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def publish(root: Path, manifest: dict, name: str | None = None) -> Path:
    """Write generation manifest['generation'] durably (as `name`: a sharded index's cluster
    manifest); it becomes the newest at the rename."""
    gen = manifest["generation"]
    final = Path(root) / (name or manifest_name(gen))
    if final.exists():
        raise FileExistsError(f"{final} already exists")
    part = final.with_name(final.name + ".part")
    with open(part, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(part, final)
    fsync_dir(Path(root))
    return final


def _open_pin(readers: Path, gen: int) -> int:
    """A generation's reader lock file, never through a symlink (neither `readers/` nor the file):
    a link planted there must not lead ldr to lock, create or delete a file outside the index."""
    if readers.is_symlink() or not readers.is_dir():
        raise OSError(errno.ELOOP, f"{readers} is not ldr's own folder")
    return os.open(readers / f"gen-{gen:06d}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)


class Pin:
    """A reader's hold on one generation (a shared flock); released by close() or process exit."""

    def __init__(self, root: Path, gen: int):
        self.gen, self._fd = gen, None
        if fcntl is None:
            return
        d = Path(root) / READERS
        try:
            d.mkdir(exist_ok=True)
            self._fd = _open_pin(d, gen)
            fcntl.flock(self._fd, fcntl.LOCK_SH)
        except OSError as e:  # a read-only index cannot be collected either: reading needs no pin
            # any other failure leaves this reader's files to the next writer's collector: say so
            quiet = e.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            log.log(logging.DEBUG if quiet else logging.WARNING, "no reader pin for generation %d of %s: %s",
                    gen, root, e)
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)   # closing the descriptor drops the lock
            self._fd = None

    def __del__(self):
        try:
            self.close()
        except (AttributeError, TypeError, OSError):   # at interpreter exit, `os` may be gone already
            pass


def _with_exclusive(root: Path, gen: int, fn) -> bool:
    """Run `fn` holding generation `gen`'s lock exclusively (no reader holds it); False if held,
    or if `fn` returns False (a lease holds it: leases.py)."""
    if fcntl is None:
        return False
    lock = Path(root) / READERS / f"gen-{gen:06d}.lock"
    try:
        lock.parent.mkdir(exist_ok=True)
        fd = _open_pin(lock.parent, gen)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        if fn() is False:
            return False
        os.unlink(lock)
        return True
    finally:
        os.close(fd)


def referenced(manifest: dict) -> set[str]:
    """Every path (relative to the index) a manifest needs: its files and component folders."""
    refs = set(manifest.get("files", {}))
    for seg in manifest.get("segments", []):
        refs.add(seg["path"])
        refs |= {c for part in seg.values() if (c := _codebook(part))}
    for comp in manifest.get("components", {}).values():
        if isinstance(comp, dict) and isinstance(comp.get("path"), str):
            refs.add(comp["path"])
        if c := _codebook(comp):
            refs.add(c)
    return refs


def codebooks(segments: list[dict], components: dict) -> set[str]:
    """The index-level codebook files the segments and components name (a commit lists them)."""
    return {c for e in [*components.values(), *(p for seg in segments for p in seg.values())] if (c := _codebook(e))}


def held_codebooks(root: Path, components: dict) -> dict:
    """The components without an index-level codebook this index does not hold (a reshard's
    copied settings): later segments reuse that codebook, so a missing one is dropped and the
    next segment trains its own."""
    return {k: ({f: v for f, v in c.items() if f != "codebook"}
                if (cb := codebooks([], {k: c})) and not all((Path(root) / p).is_file() for p in cb) else c)
            for k, c in components.items()}


def adopt_codebooks(components: dict, merged: dict) -> None:
    """A codebook a merge trained (for more vectors than the index's) becomes the index's."""
    for kind, part in merged.items():
        if _codebook(part) and isinstance(components.get(kind), dict) and part["codebook"].get("trained_for", 0) > \
                (components[kind].get("codebook") or {}).get("trained_for", 0):
            components[kind]["codebook"] = part["codebook"]


def _codebook(entry) -> str | None:
    """The index-level codebook file a component or segment part names (compressed dense parts)."""
    cb = entry.get("codebook") if isinstance(entry, dict) else None
    return cb["path"] if isinstance(cb, dict) and isinstance(cb.get("path"), str) else None


def collect(root: Path, manifests: dict[int, dict], owned_dirs=("segments", "bm25-generations", "codebooks")) -> list[str]:
    """Remove generations older than the newest that no reader holds, then every file under
    ldr's own folders that no remaining generation lists. Returns what was removed.

    Called by a writer holding the write lock, so nothing under construction is touched except
    leftovers of writers that died (their work folders are listed by no manifest)."""
    root = Path(root)
    newest = max(manifests)
    kept = {newest}
    removed = []

    def drop(gen: int) -> bool:
        # under the exclusive lock a lease is either there (kept) or can no longer be taken
        if leased(root, gen):
            return False
        manifest_path(root, gen).unlink(missing_ok=True)
        return True

    for gen in sorted(manifests):
        if gen == newest:
            continue
        path = manifest_path(root, gen)
        if _with_exclusive(root, gen, lambda g=gen: drop(g)):
            removed.append(path.name)
        else:
            kept.add(gen)
    keep: set[str] = set()
    for gen in kept:
        keep |= referenced(manifests[gen])
    keep_parts = {Path(k).parts for k in keep}

    def needed(rel: Path) -> bool:
        parts = rel.parts
        # a path is needed when it, an ancestor or a descendant is referenced
        return any(parts[:len(k)] == k or k[:len(parts)] == parts for k in keep_parts)

    for top in owned_dirs:
        base = root / top
        if not base.is_dir():
            continue
        for child in sorted(base.iterdir()):
            rel = child.relative_to(root)
            if needed(rel):
                if child.is_dir() and not child.is_symlink():
                    for sub in sorted(child.iterdir()):
                        if not needed(sub.relative_to(root)):
                            _remove(sub)
                            removed.append(sub.relative_to(root).as_posix())
                continue
            _remove(child)
            removed.append(rel.as_posix())
    if 0 in manifests and 0 not in kept:
        # a format-2 index upgraded in place: its top-level files belong to generation 0 only
        for rel in list(manifests[0].get("files", {})) + ["dense", "sparse", "bm25", "docstore.parquet"]:
            p = root / rel
            if (p.exists() or p.is_symlink()) and not needed(Path(rel)):
                _remove(p)
                removed.append(rel)
    _sweep_readers(root, set(manifests))
    removed += _sweep_leases(root)
    return removed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _sweep_readers(root: Path, gens: set[int]) -> None:
    """Lock files of generations that no longer exist (left by readers that raced a collection)."""
    d = root / READERS
    if d.is_symlink() or not d.is_dir():
        return
    present = set(generations(root))
    for p in d.glob("gen-*.lock"):
        try:
            g = int(p.stem.split("-")[1])
        except (IndexError, ValueError):
            continue
        if g not in present:
            _with_exclusive(root, g, lambda: None)


def lease_files(root) -> list[tuple[int, str, float, Path]]:
    """(generation, holder, expiry, file) of every lease of the index (leases.py writes them); a
    file that cannot be read expires now, so it holds nothing."""
    d = Path(root) / READERS
    if d.is_symlink() or not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = _LEASE.match(p.name)
        if m:
            try:
                expires = 0.0 if p.is_symlink() else float(json.loads(p.read_text(encoding="utf-8"))["expires"])
            except (OSError, ValueError, KeyError, TypeError):
                expires = 0.0
            out.append((int(m.group(1)), m.group(2), expires, p))
    return sorted(out)


def leased(root, gen: int, now: float | None = None) -> bool:
    """Whether an unexpired lease holds generation `gen`."""
    now = time.time() if now is None else now
    return any(g == gen and expires > now for g, _, expires, _ in lease_files(root))


def _sweep_leases(root: Path) -> list[str]:
    """Expired leases, and those of generations no longer there."""
    now, present, gone = time.time(), set(generations(root)), []
    for gen, _, expires, p in lease_files(root):
        if expires <= now or gen not in present:
            p.unlink(missing_ok=True)
            gone.append(p.relative_to(root).as_posix())
    return gone
