"""BEIR: `LdrSearch`, a `beir.retrieval.search.BaseSearch`, so BEIR's `EvaluateRetrieval` runs ldr.

    from beir.retrieval.evaluation import EvaluateRetrieval
    from ldr.integrations.beir import LdrSearch
    results = EvaluateRetrieval(LdrSearch(index="idx"), k_values=[1, 10, 100]).retrieve(corpus, queries)

Over an index the user built (`index=`: its documents must be the corpus BEIR passes, checked by
id), or one built from that corpus (`path=`, or a temporary folder; `build_options` as
`ldr.Index.build` takes them). Search options (mode, rerank, ...) go to every query.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from beir.retrieval.search.base import BaseSearch

from ..errors import ConfigError


class LdrSearch(BaseSearch):
    def __init__(self, index=None, *, path: str | None = None, build_options: dict | None = None,
                 batch_size: int = 32, **search_options):
        self.index, self.path, self.build_options = index, path, dict(build_options or {})
        self.batch_size, self.search_options = batch_size, search_options
        self._tmp = None

    def _open(self, corpus: dict):
        from .. import sharded

        if self.index is None:
            if self.path is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="ldr-beir-")
                self.path = str(Path(self._tmp.name) / "idx")
            self.encode(corpus, {}, self.path)
        elif not hasattr(self.index, "search"):
            self.index = sharded.open(self.index)
        held = set(self.index.live_ids())
        missing = [d for d in corpus if d not in held]
        if missing:      # an index of other documents would score a different collection
            raise ConfigError(f"the index lacks {len(missing)} of the corpus's {len(corpus)} documents "
                              f"(e.g. {', '.join(missing[:3])}): build it from this corpus")
        return self.index

    def encode(self, corpus: dict, queries: dict, encode_output_path: str = "./ldr-index", overwrite: bool = False,
               **kwargs) -> None:
        """Build the index of `corpus` at `encode_output_path` (BEIR's encode step: ldr's
        encoding is its index, with BM25 and sparse beside the vectors)."""
        from ..api import Index

        docs = ({"id": str(i), "title": d.get("title") or "", "text": d.get("text") or ""} for i, d in corpus.items())
        self.index = Index.build(docs, encode_output_path, overwrite=overwrite, **self.build_options)
        self.path = encode_output_path

    def search(self, corpus: dict, queries: dict, top_k: int, *args, **kwargs) -> dict[str, dict[str, float]]:
        """{qid: {doc id: score}} of the top_k documents per query (BEIR's score_function, the
        4th argument, does not apply: ldr's stages score)."""
        index = self._open(corpus)
        # a run holds ids and scores: no relevance estimate (several times faster at top_k 1,000)
        options = {"relevance": False, **self.search_options, **{k: v for k, v in kwargs.items() if k != "score_function"}}
        out: dict[str, dict[str, float]] = {}
        for qid, hits in index.search_many(list(queries.items()), k=top_k, batch_size=self.batch_size,
                                           passages=0, **options):
            if isinstance(hits, Exception):
                raise hits
            out[qid] = {h.id: float(h.score) for h in hits}
        return out

    def search_from_files(self, query_embeddings_file: str, corpus_embeddings_files: list[str], top_k: int,
                          **kwargs) -> dict[str, dict[str, float]]:
        raise NotImplementedError("ldr searches an index, not pickled embeddings: run `encode(corpus, queries, "
                                  "path)` once, then LdrSearch(index=path).search(corpus, queries, top_k)")
