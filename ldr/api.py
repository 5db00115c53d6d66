"""The Python API a RAG application embeds:

    import ldr
    ldr.Index.build("corpus/", "idx")          # or an iterable of ldr.Doc / dicts
    hits = ldr.open("idx").search("query", k=10)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from .corpus import Doc, IngestReport, iter_corpus
from .errors import ConfigError, CorpusError
from .index.bm25.analysis import Analyzer
from .index.bm25.base import open_searcher
from .index.build import BuildConfig, build_index
from .index.docstore import Docstore
from .index.manifest import read_manifest, verify_files
from .search.hits import Hit
from .search.pipeline import Retriever, run_retriever, to_hits

MODES = ("bm25", "dense")


def _as_docs(items: Iterable) -> Iterable[Doc]:
    for i, item in enumerate(items):
        if isinstance(item, Doc):
            yield item
        elif isinstance(item, dict):
            doc_id = item.get("id", item.get("_id"))
            if doc_id is None or "text" not in item:
                raise CorpusError(f"document #{i} needs 'id' (or '_id') and 'text' keys; got {sorted(item)}")
            meta = {k: v for k, v in item.items() if k not in ("id", "_id", "text", "title")}
            yield Doc(str(doc_id), item["text"], item.get("title") or "", meta)
        else:
            raise CorpusError(f"document #{i} is a {type(item).__name__}; give ldr.Doc objects or dicts")


class Index:
    """An opened index directory. Components are opened lazily on first use."""

    def __init__(self, path: str | os.PathLike, verify: bool = True):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        verify_files(self.path, self.manifest, full=verify)
        self.docstore = Docstore(self.path)
        self._retrievers: dict[str, Retriever] = {}

    # -- building -------------------------------------------------------------------------
    @classmethod
    def build(cls, corpus: str | os.PathLike | Iterable, path: str | os.PathLike, *,
              config: BuildConfig | None = None, report: IngestReport | None = None,
              progress: bool = False, **options) -> "Index":
        """Build an index from a corpus path or an iterable of Docs/dicts, then open it.

        `options` are BuildConfig fields (bm25="lucene", language="de", k1=..., b=...).
        The ingestion report (indexed / skipped counts) is available as `index.report`.
        """
        if config is not None and options:
            raise ConfigError("give either config= or keyword options, not both")
        config = config or BuildConfig(**options)
        report = report if report is not None else IngestReport()
        docs = iter_corpus(corpus, report) if isinstance(corpus, (str, os.PathLike)) else _as_docs(corpus)
        build_index(docs, path, config, report, progress=progress)
        index = cls(path, verify=False)
        index.report = report
        return index

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.docstore)

    @property
    def components(self) -> dict:
        return self.manifest["components"]

    def document(self, doc_id: str) -> Doc:
        if doc_id not in self.docstore:
            raise KeyError(doc_id)
        return self.docstore.doc(self.docstore.row(doc_id))

    def _retriever(self, name: str) -> Retriever:
        if name not in self._retrievers:
            comp = self.components.get(name)
            if comp is None:
                run_retriever(name, {}, "", 0)  # raises the "no such component" error
            if name == "bm25":
                s = open_searcher(comp["backend"], self.path / comp["path"], Analyzer.from_dict(comp["analyzer"]),
                                  comp["k1"], comp["b"])
                self._retrievers[name] = s.search
            elif name == "dense":
                from .encode.dense import DenseEncoder, DenseSettings
                from .index.dense import DenseSearcher

                settings = DenseSettings(**comp["model"]["settings"])
                self._retrievers[name] = DenseSearcher(self.path / comp["path"], comp, DenseEncoder(settings)).search
        return self._retrievers[name]

    def default_mode(self) -> str:
        return "bm25" if "bm25" in self.components else "dense"

    def search(self, query: str, k: int = 10, *, mode: str | None = None, with_text: bool = True) -> list[Hit]:
        """Top-k documents for `query`, best first."""
        if not isinstance(query, str):
            raise ConfigError("query must be a string")
        if k < 1:
            raise ConfigError(f"k must be at least 1 (got {k})")
        mode = mode or self.default_mode()
        if mode not in MODES:
            raise ConfigError(f"unknown search mode {mode!r}; choose one of {', '.join(MODES)}")
        if mode not in self.components:
            run_retriever(mode, {}, query, k)
        ranked = self._retriever(mode)(query, k)
        hits = to_hits(ranked, mode, self.docstore.ids, self.docstore.titles)
        if with_text:
            for h in hits:
                h.text = self.docstore.text(h.docno)
        return hits

    def info(self) -> dict:
        size = sum(f["size"] for f in self.manifest.get("files", {}).values())
        return {"path": str(self.path), "documents": self.manifest["doc_count"], "bytes": size,
                "created": self.manifest["created"], "ldr_version": self.manifest["ldr_version"],
                "format_version": self.manifest["format_version"], "components": self.components,
                "ingest": self.manifest.get("ingest", {})}


def open(path: str | os.PathLike, verify: bool = True) -> Index:  # noqa: A001 (mirrors builtins.open on purpose)
    """Open an index directory; `verify=False` checks sizes only (skips SHA-256 of every file)."""
    return Index(path, verify=verify)
