"""Where a build may write: a new or empty directory, or one holding an ldr index and nothing else."""
from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigError, IndexFormatError
from .manifest import MANIFEST, read_manifest


@contextmanager
def cleared_if_first_build_fails(out: Path, committed):
    """A first build (into a directory it makes) that fails before its first commit leaves no
    directory behind: only ldr's own files are in it, its lock among them. `committed(out)`: whether
    a commit landed there (then what is there stays)."""
    created = not out.exists()
    try:
        yield
    except BaseException:
        if created and out.is_dir() and not committed(out):
            shutil.rmtree(out, ignore_errors=True)
        raise


def check_target(out: Path) -> None:
    """Write only into a new or empty directory, or one holding an ldr index and nothing else.

    A directory is an index only if its newest manifest parses as an ldr manifest; then its
    entries must all be ldr's own (manifests, segments, BM25 generations, locks, and for a format 2
    index the files its manifest lists). Anything else (a web project's manifest.json, a corpus
    inside the output directory) is a refusal naming the files.
    """
    from . import generations as gens
    from .stores import foreign_entries, own_names

    if out.is_symlink() or out.is_file():
        raise ConfigError(f"{out} is a file or a link; give a directory path for the index")
    if not out.is_dir() or not any(out.iterdir()):
        return
    own = own_names()
    found = gens.generations(out)
    if not found:
        foreign = foreign_entries(out)
        if not foreign:
            return   # a first build that never committed: the writer removes its leftovers
        shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
        raise ConfigError(f"{out} exists and is not an ldr index (it holds {shown}); refusing to write into it: "
                          "choose another -o, or an empty directory")
    try:
        manifest = read_manifest(out)
    except IndexFormatError as e:
        raise ConfigError(f"{out} holds a manifest that is not a readable ldr index manifest ({e}); "
                          "ldr cannot tell which files there are its own, so it will not write there: "
                          "choose another -o, or delete it yourself if it is an old index") from None
    own.update(Path(rel).parts[0] for rel in manifest.get("files", {}))
    if 0 in found:
        own.update({MANIFEST, "docstore.parquet", "bm25", "dense", "sparse"})
    foreign = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir()
                     if p.name not in own and not re.match(r"^manifest-\d{6,}\.json(\.part)?$", p.name))
    if foreign:
        shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
        raise ConfigError(f"{out} is an ldr index but also holds files ldr did not write ({shown}); refusing to "
                          "write there: move them out or choose another -o")
