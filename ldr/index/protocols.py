"""What every component provides, written down once (build.py and the search pipeline rely on it)."""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..corpus import Doc


@runtime_checkable
class ComponentWriter(Protocol):
    """Docstore, BM25, dense and sparse writers: documents stream in by docno, in order."""

    def add(self, docno: int, doc: Doc) -> None: ...
    def close(self) -> Any: ...          # finishes the files; encoder-backed writers return their manifest entry
    def abort(self) -> None: ...         # stops background work so the build folder can be removed


@runtime_checkable
class DocumentEncoder(Protocol):
    """What the dense and sparse writers need of an encoder: tokenising a batch (on the feeding
    thread) is split from running the model (on the build pipeline's worker, see batched.py)."""

    def prepare_documents(self, texts: list[str], **kwargs) -> Any: ...
    def finish_documents(self, job: Any, progress=None) -> Any: ...   # dense: (vectors, owner[, spans]); sparse: CSR
    def describe(self) -> dict: ...


@runtime_checkable
class Retriever(Protocol):
    """A first-stage retriever: the query is encoded once, then searched (the pipeline shares reps)."""

    def encode(self, query: str) -> Any: ...
    def search_rep(self, rep: Any, k: int) -> list[tuple[int, float]]: ...   # (docno, score), best first
    def search(self, query: str, k: int) -> list[tuple[int, float]]: ...
