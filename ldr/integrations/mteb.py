"""MTEB: `LdrSearchModel`, an MTEB `SearchProtocol` (mteb >= 2), so `mteb.evaluate` runs ldr's
whole search (an index built from each task's corpus) on any retrieval task.

    import mteb
    from ldr.integrations.mteb import LdrSearchModel
    results = mteb.evaluate(LdrSearchModel(), mteb.get_tasks(tasks=["NFCorpus"]))
    LdrSearchModel(build_options={"dense": None, "sparse": None}, mode="bm25")   # BM25 alone

Each (task, subset, split) gets its own index, built from the corpus MTEB passes (in `folder`,
else a temporary one), so the scores are ldr's `ldr eval` scores of the same collection. Search
options (mode, rerank, ...) go to every query; a reranking task's candidates (`top_ranked`) are a
filter on ids.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any


_MTEB_TYPE = ("sparse",)     # MTEB's word for a lexical-first retriever (its own BM25 says so)


class LdrSearchModel:
    def __init__(self, *, folder: str | None = None, build_options: dict | None = None, batch_size: int = 32,
                 name: str = "ldr/default", **search_options: Any):
        self.folder, self.build_options = folder, dict(build_options or {})
        self.batch_size, self.search_options, self.name = batch_size, search_options, name
        self._tmp = None
        self._index = None

    @property
    def mteb_model_meta(self):
        from mteb.models.model_meta import ModelMeta

        from .._version import __version__

        return ModelMeta(loader=None, name=self.name, model_type=list(_MTEB_TYPE), languages=None, open_weights=True,
                         revision=__version__, release_date=None, n_parameters=None, n_embedding_parameters=None,
                         memory_usage_mb=None, embed_dim=None, license=None, max_tokens=None,
                         reference="https://pypi.org/project/ldr", similarity_fn_name=None, framework=[],
                         use_instructions=False, public_training_code=None, public_training_data=None,
                         training_datasets=None)

    def index(self, corpus, *, task_metadata, hf_split: str, hf_subset: str, encode_kwargs=None,
              num_proc: int | None = None, **kwargs: Any) -> None:
        from ..api import Index

        if self.folder is None and self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ldr-mteb-")
        base = Path(self.folder or self._tmp.name)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{task_metadata.name}-{hf_subset}-{hf_split}")
        docs = ({"id": str(row["id"]), "title": row.get("title") or "", "text": row.get("text") or ""}
                for row in corpus)
        if self._index is not None:
            self._index.close()
        self._index = Index.build(docs, base / name, overwrite=True, progress=False, **self.build_options)

    def search(self, queries, *, task_metadata, hf_split: str, hf_subset: str, top_k: int, encode_kwargs=None,
               top_ranked: dict | None = None, num_proc: int | None = None, **kwargs: Any) -> dict:
        """{query id: {document id: score}} of the top_k documents per query."""
        import glob

        from ..errors import ConfigError

        if self._index is None:
            raise ConfigError("LdrSearchModel.search before index: MTEB indexes the corpus first")
        out: dict[str, dict[str, float]] = {}
        options = {"relevance": False, **self.search_options}     # a run: ids and scores only
        rows = [(str(q["id"]), q["text"] if isinstance(q["text"], str) else " ".join(q["text"])) for q in queries]
        if top_ranked:      # a reranking task: each query ranks its own candidates only
            for qid, text in rows:
                ids = [glob.escape(str(d)) for d in top_ranked.get(qid, [])]
                hits = self._index.search(text, k=top_k, passages=0, filters={"id": ids}, **options) if ids else []
                out[qid] = {h.id: float(h.score) for h in hits}
            return out
        for qid, hits in self._index.search_many(rows, k=top_k, batch_size=self.batch_size, passages=0, **options):
            out[qid] = {} if isinstance(hits, Exception) else {h.id: float(h.score) for h in hits}
        return out
