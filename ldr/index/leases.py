"""Leases: a hold on one generation of an index for a holder that may run on another machine (a
coordinator on Ray Serve, which reads no file of the index, takes its point in time through the
shards' replicas), kept until the holder releases it or stops renewing it (Elasticsearch's point
in time with a keep-alive). A reader's `generations.Pin` is a flock, which holds only while its
process lives on the machine that took it; a lease is a file `readers/lease-NNNNNN-HOLDER.json`
naming when it expires. The collector keeps a generation with an unexpired lease and sweeps the
expired ones: a holder that died frees the generation after its lease's time.

A lease is written under the generation's shared lock and refused when the generation is gone,
and the collector reads the leases under that lock held exclusively: a generation is either
leased and kept, or collected and never leased."""
from __future__ import annotations

import errno
import json
import os
import re
import time
from pathlib import Path

from . import generations as gens

TTL_S = 120.0       # a holder renews well before (a Ray coordinator: every TTL_S / 4)
_HOLDER = re.compile(rf"^{gens.HOLDER}$")


def _checked(holder: str) -> str:
    if not isinstance(holder, str) or not _HOLDER.match(holder):
        raise ValueError(f"a lease holder is 1-64 letters, digits, '-' or '_', not {holder!r}")
    return holder


def _path(root: Path, gen: int, holder: str) -> Path:
    return Path(root) / gens.READERS / f"lease-{gen:06d}-{_checked(holder)}.json"


def take(root, gen: int, holder: str, ttl_s: float = TTL_S) -> bool:
    """Hold generation `gen` of the index at `root` for `holder` until `ttl_s` from now (again:
    renewed). False when the generation is gone (collected, or never committed): the holder moves
    to a newer one. Raises OSError where the index cannot be written (a read-only index is never
    collected either)."""
    root = Path(root)
    pin = gens.Pin(root, gen)           # blocks while a collector holds the generation exclusively
    try:
        if not gens.manifest_path(root, gen).is_file():
            return False
        final = _path(root, gen, holder)
        if final.parent.is_symlink() or not final.parent.is_dir():
            raise OSError(errno.ELOOP, f"{final.parent} is not ldr's own folder")
        part = final.with_name(final.name + ".part")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"generation": gen, "holder": holder, "expires": time.time() + ttl_s}, fh)
        os.replace(part, final)
        return True
    finally:
        pin.close()


def release(root, gen: int, holder: str) -> None:
    """Let go of `holder`'s lease on `gen` (none held: nothing to do)."""
    try:
        _path(Path(root), gen, holder).unlink()
    except FileNotFoundError:
        pass


def leases(root) -> list[tuple[int, str, float]]:
    """(generation, holder, expiry) of every lease of the index."""
    return [(g, h, e) for g, h, e, _ in gens.lease_files(root)]


def held(root, gen: int, now: float | None = None) -> bool:
    """Whether an unexpired lease holds generation `gen` (what the collector asks)."""
    return gens.leased(root, gen, now)
