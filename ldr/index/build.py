"""Atomic index build.

Everything is written into a hidden temporary sibling of the target; the manifest is written
last, and only then is the directory renamed into place. A build that fails or is killed leaves
no loadable index behind, and an index already at the target stays intact until the new one is
complete. Leftover temporaries of dead builds are removed by the next build.
"""
from __future__ import annotations

import copy
import errno
import logging
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from tqdm.auto import tqdm

from ..corpus import Doc, IngestReport, check_documents
from ..corpus.text import utf8_len
from ..errors import ConfigError, IndexFormatError, IndexWriteError
from ..encode.dense import DenseSettings
from ..encode.sparse import SparseSettings
from .bm25.analysis import Analyzer
from .bm25.base import open_writer, resolve_params
from .dense import DenseWriter, FaissSettings
from .docstore import FILE as DOCSTORE_FILE, DocstoreWriter
from ..search.defaults import DEFAULT_SEARCH
from .manifest import MANIFEST, new_manifest, read_manifest, write_manifest

log = logging.getLogger(__name__)
_TMP, _OLD = ".ldr-tmp-", ".ldr-old-"


@dataclass
class BuildConfig:
    bm25: str | None = "tantivy"          # tantivy | lucene | None
    language: str = "en"
    stemming: bool = True
    stopwords: bool = True
    k1: float | None = None               # None: the backend's default
    b: float | None = None
    threads: int = 0                      # 0: all cores
    max_doc_mb: float = 64.0              # larger documents are skipped and counted (memory bound)
    # the packaged MiniLM with MaxP by default; None: no dense component
    dense: DenseSettings | None = field(default_factory=DenseSettings)
    # the packaged SPLADE-tiny by default; None: no learned-sparse component
    sparse: SparseSettings | None = field(default_factory=SparseSettings)
    faiss: FaissSettings = field(default_factory=FaissSettings)

    # query-time defaults recorded in the manifest (chosen by measurement: see bench/README.md)
    search: dict = field(default_factory=lambda: copy.deepcopy(DEFAULT_SEARCH))

    def __post_init__(self):
        if isinstance(self.dense, str):  # a model name or path
            self.dense = DenseSettings(model=self.dense)
        if isinstance(self.sparse, str):
            self.sparse = SparseSettings(model=self.sparse)
        if self.bm25 is None and self.dense is None and self.sparse is None:
            raise ConfigError("nothing to index: enable at least one of BM25, dense and sparse")

    def analyzer(self) -> Analyzer:
        return Analyzer(self.language, self.stemming, self.stopwords)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(out: Path) -> None:
    for p in out.parent.glob(f".{out.name}{_TMP}*"):
        try:
            pid = int(p.name.rsplit(_TMP, 1)[1].split("-")[0])
        except ValueError:
            continue
        if not _pid_alive(pid):
            log.info("removing leftover of an interrupted build: %s", p)
            shutil.rmtree(p, ignore_errors=True)


# what a build writes at the top of an index directory (besides the files its manifest lists)
OWN_NAMES = {MANIFEST, MANIFEST + ".part", DOCSTORE_FILE, "bm25", "dense", "sparse"}


def _check_target(out: Path) -> None:
    """Refuse to replace anything but an ldr index holding only what ldr wrote there.

    A directory is an index only if its manifest parses as an ldr manifest; then its entries must
    all be ones that manifest lists (or ldr's own component folders). Anything else (a web
    project's manifest.json, a corpus inside the output directory) is a refusal naming the files.
    """
    if out.is_symlink() or out.is_file():
        raise ConfigError(f"{out} is a file or a link; give a directory path for the index")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / MANIFEST).is_file():
        raise ConfigError(f"{out} exists and is not an ldr index; refusing to replace it (choose another -o)")
    try:
        manifest = read_manifest(out)
    except IndexFormatError as e:
        raise ConfigError(f"{out} holds a manifest.json that is not a readable ldr index manifest ({e}); "
                          "ldr cannot tell which files there are its own, so it will not replace the directory: "
                          "choose another -o, or delete it yourself if it is an old index") from None
    own = set(OWN_NAMES)
    own.update(Path(rel).parts[0] for rel in manifest.get("files", {}))
    own.update(Path(c["path"]).parts[0] for c in manifest["components"].values())
    foreign = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir() if p.name not in own)
    if foreign:
        shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
        raise ConfigError(f"{out} is an ldr index but also holds files ldr did not write ({shown}); refusing to "
                          "replace it, since that would delete them: move them out or choose another -o")


def _swap_into_place(tmp: Path, out: Path) -> None:
    if out.exists():
        old = out.parent / f".{out.name}{_OLD}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


def _no_space(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    # tantivy, pyarrow and faiss report a full disk in their own exception types
    msg = str(e).lower()
    return "no space left" in msg or "disk quota exceeded" in msg or "(os error 28)" in msg


def _fsync_tree(root: Path) -> None:
    """Make every file of the new index durable before the rename publishes it."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def build_index(docs: Iterable[Doc], out: str | os.PathLike, config: BuildConfig | None = None,
                report: IngestReport | None = None, progress: bool = True, total: int | None = None) -> dict:
    """Index `docs` into directory `out`; returns the manifest. Raises LdrError on bad input."""
    config = config or BuildConfig()
    report = report if report is not None else IngestReport()
    out = Path(out).absolute()
    _check_target(out)
    analyzer = config.analyzer()
    params = resolve_params(config.bm25, config.k1, config.b) if config.bm25 else None
    threads = config.threads or os.cpu_count() or 1

    out.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(out)
    tmp = out.parent / f".{out.name}{_TMP}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    t0 = time.perf_counter()
    store = bm25 = None
    writers: dict = {}
    try:
        store = DocstoreWriter(tmp)
        bm25 = open_writer(config.bm25, tmp / "bm25", analyzer, threads) if config.bm25 else None
        if config.dense is not None:
            from ..encode.dense import DenseEncoder
            writers["dense"] = DenseWriter(tmp / "dense", DenseEncoder(config.dense), config.faiss)
        if config.sparse is not None:
            from ..encode.sparse import SparseEncoder
            from .sparse import SparseWriter
            writers["sparse"] = SparseWriter(tmp / "sparse", SparseEncoder(config.sparse))
        n_bytes = 0
        with tqdm(desc="indexing", unit="doc", total=total, disable=not progress, leave=False) as bar:
            for doc in check_documents(docs, report, config.max_doc_mb):
                docno = store.add(doc)
                if bm25:
                    bm25.add(docno, doc)
                for w in writers.values():
                    w.add(docno, doc)
                n_bytes += utf8_len(doc.text)
                bar.update(1)
        store.close()
        if bm25:
            log.info("committing BM25 index (%s)", config.bm25)
            bm25.close()
        components = {"docstore": {"path": DOCSTORE_FILE}}
        for name, w in writers.items():
            log.info("finishing the %s component", name)
            components[name] = w.close()
        if bm25:
            components["bm25"] = {"backend": config.bm25, "path": "bm25", "k1": params[0], "b": params[1],
                                  "analyzer": analyzer.to_dict()}
        seconds = time.perf_counter() - t0
        settings = {"build": {"seconds": round(seconds, 3), "bytes": n_bytes, "threads": threads}}
        manifest = new_manifest(components, store.count, report.to_dict(), settings)
        retrievers = [n for n in ("bm25", "dense", "sparse") if n in components]
        manifest["search"] = {"mode": "hybrid" if len(retrievers) > 1 else retrievers[0], **config.search}
        manifest = write_manifest(tmp, manifest)
        _fsync_tree(tmp)
        _swap_into_place(tmp, out)
    except BaseException as e:
        for w in [store, bm25, *writers.values()]:
            if w is not None:
                try:
                    w.abort()
                except Exception as e:  # keep the original error; this is cleanup
                    log.debug("abort failed: %s", e)
        shutil.rmtree(tmp, ignore_errors=True)
        if _no_space(e):
            raise IndexWriteError(f"no space left on device while writing the index for {out}; nothing was "
                                  "changed there (the previous index, if any, is intact): free space and "
                                  "run the build again") from None
        raise
    log.info("built %s in %.1fs: %s", out, seconds, report.summary())
    return manifest
