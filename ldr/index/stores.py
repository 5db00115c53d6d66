"""Index stores: the components that keep one index of their own for the whole index (tantivy,
Lucene) rather than a part per segment.

Their files are write-once, so each generation gets its own folder `<store_dir>/gen-NNNNNN/`
made of hard links to the previous generation's files plus what the backend wrote for this
change: a reader pinned to an old generation keeps an exact view. A write works in
`<store_dir>/work-*` (listed by no manifest: a killed writer's is removed by the next one).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

from .. import components as registry
from ..paths import inside
from .generations import LEASE

log = logging.getLogger(__name__)
# lock files the backends leave in their folder: never linked into the next generation
BACKEND_LOCKS = {".tantivy-writer.lock", ".tantivy-meta.lock", "write.lock"}


def store_dirs() -> list[str]:
    """Top-level folders of every registered kind's index store."""
    return [k.store_dir for k in map(registry.get, registry.names()) if k.store_dir]


# what ldr makes inside its own top-level folders (anything else there is not ldr's)
_OWN_CHILDREN = {"segments": re.compile(r"^(seg-\d{6,}|ray-work-\d+-[0-9a-f]{8})$"),
                 "*store*": re.compile(r"^(gen-\d{6,}|work-\d+-[0-9a-f]{8})$"),
                 "readers": re.compile(rf"^(gen-\d{{6,}}\.lock|{LEASE}(\.part)?)$")}


def leftovers(root: Path) -> list[Path]:
    """The folders a build that never committed left (segments, index-store work folders): only
    children named as ldr names them, real folders, not links."""
    out = []
    for top in ("segments", *store_dirs()):
        base = Path(root) / top
        if base.is_symlink() or not base.is_dir():
            continue
        pattern = _OWN_CHILDREN["segments" if top == "segments" else "*store*"]
        out += [c for c in sorted(base.iterdir()) if pattern.match(c.name) and c.is_dir() and not c.is_symlink()]
    return out


def foreign_entries(root: Path) -> list[str]:
    """Entries of a directory without a committed manifest that ldr did not make: anything but
    its own top-level names, each holding only what ldr puts there (a `write.lock` ldr wrote)."""
    root = Path(root)
    found = []
    own = own_names()
    for p in sorted(root.iterdir()):
        if p.name not in own:
            found.append(p.name)
        elif p.is_symlink():
            found.append(p.name + " (a link)")
        elif p.name == "write.lock":
            try:
                text = p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None
            except OSError:
                text = None
            if text is None or (text and not text.startswith("pid ")):
                found.append(p.name)
        elif not p.is_dir():
            found.append(p.name)
        else:
            pattern = _OWN_CHILDREN.get(p.name, _OWN_CHILDREN["*store*"])
            found += [f"{p.name}/{c.name}" for c in sorted(p.iterdir()) if not pattern.match(c.name)]
    return found


def own_names() -> set[str]:
    """What ldr itself writes at the top of an index directory."""
    from .generations import READERS

    return {"segments", READERS, "write.lock", *store_dirs()}


class Stores:
    """The index stores one write feeds: documents by uid, deletions by uid; `publish` names the
    new generation's folders in `components` (the manifest entries, changed in place)."""

    def __init__(self, root: Path, components: dict, threads: int, append: bool, files: dict | None = None):
        """`append`: start from the files of the generation `components` describes (add, delete),
        whose manifest lists `files`; otherwise from nothing (a rebuild)."""
        self.root, self.components, self.threads, self.append = Path(root), components, threads, append
        self.files = files
        self.kinds = [(n, k) for n, k in registry.kinds(components) if k.uses_store(components[n])]
        self.works: dict[str, Path] = {}
        self.writers: dict = {}

    def __bool__(self) -> bool:
        return bool(self.kinds)

    @property
    def folders(self) -> list[Path]:
        return list(self.works.values())

    def prepare(self) -> None:
        """Make the work folders: hard links to the previous generation's files, each verified
        against the SHA-256 its manifest records first: the backend rewrites and merges them, so a
        damaged one would be carried into new files that hash as sound."""
        from .manifest import verify_listed

        if self.append and self.files:
            verify_listed(self.root, self.files, [self.components[n]["path"] for n, _ in self.kinds
                                             if self.components[n].get("path")])
        for name, kind in self.kinds:
            work = self.root / kind.store_dir / f"work-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            work.mkdir(parents=True)
            self.works[name] = work
            previous = self.components[name].get("path") if self.append else None
            if previous:
                for f in inside(self.root, previous, f"components.{name}.path").iterdir():
                    if f.is_file() and f.name not in BACKEND_LOCKS:
                        os.link(f, work / f.name)

    def open(self) -> "Stores":
        if not self.works:
            self.prepare()
        for name, kind in self.kinds:
            self.writers[name] = kind.store_writer(self.works[name], self.components[name], self.threads,
                                                   append=self.append and bool(self.components[name].get("path")))
        return self

    def add(self, uid: int, doc) -> None:
        for w in self.writers.values():
            w.add(uid, doc)

    def delete(self, uids: list[int]) -> None:
        for w in self.writers.values():
            w.delete(uids)

    def close(self) -> None:
        for name, w in list(self.writers.items()):
            log.info("committing the %s index store (%s)", name, self.components[name].get("backend", ""))
            w.close()
        self.writers.clear()

    def abort(self) -> None:
        for w in self.writers.values():
            try:
                w.abort()
            except Exception as e:  # cleanup: keep the original error
                log.debug("abort failed: %s", e)
        self.writers.clear()

    def publish(self, gen: int) -> None:
        """Move each work folder to `<store_dir>/gen-NNNNNN` and record it in the manifest entry."""
        for name, kind in self.kinds:
            rel = f"{kind.store_dir}/gen-{gen:06d}"
            final = self.root / rel
            if final.exists():   # left by a writer that died before committing generation `gen`
                shutil.rmtree(final)
            work = self.works[name]
            for lock in BACKEND_LOCKS:
                (work / lock).unlink(missing_ok=True)
            os.rename(work, final)
            self.components[name]["path"] = rel

    def rebuild(self, segments: list[dict]) -> None:
        """Write the stores anew from the live documents of `segments` (a merge): a store's own
        statistics (document frequencies, average length) then count exactly the live documents,
        as a fresh build of the same corpus would, instead of documents deleted since."""
        from .docstore import Docstore
        from .segment import read_deletes

        self.open()         # prepares the work folders when the caller has not
        for seg in segments:
            deleted = read_deletes(self.root, seg)
            for row, uid, doc in Docstore(inside(self.root, seg["path"], "segment"), seg["docs"]).iter_docs():
                if not deleted[row]:
                    self.add(uid, doc)
        self.close()

    def paths(self) -> list[str]:
        """The published folders (relative), for the commit's file list."""
        return [self.components[n]["path"] for n, _ in self.kinds if self.components[n].get("path")]


def collect(root: Path, current: int | None) -> list[str]:
    """Remove generations no reader holds and the files under ldr's own folders that no kept
    generation lists (generations.collect); a first build that never committed leaves nothing.
    An unreadable current generation (`current`) is an error; an older one stops collection."""
    from . import generations as gens
    from ..errors import IndexFormatError
    from .manifest import read_manifest

    manifests = {}
    for g in gens.generations(root):
        try:
            manifests[g] = read_manifest(root, g)
        except IndexFormatError as e:
            if g == current:
                raise
            log.warning("not collecting files: generation %d cannot be read (%s)", g, e)
            return []
    for part in root.glob("manifest-*.json.part"):
        part.unlink(missing_ok=True)
    owned = ("segments", "codebooks", *store_dirs())
    if not manifests:   # a first build that never finished: only what ldr itself made goes
        removed = [p.relative_to(root).as_posix() for p in leftovers(root)]
        for rel in removed:
            shutil.rmtree(root / rel, ignore_errors=True)
        for top in owned:
            try:
                (root / top).rmdir()      # only when empty: nothing else of anyone's is removed
            except OSError:
                pass
        return removed
    removed = gens.collect(root, manifests, owned_dirs=owned)
    if removed:
        log.info("removed %d unreferenced files or folders", len(removed))
    return removed
