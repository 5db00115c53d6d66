"""Second stages named by `--rerank NAME`: the offline passage rescorer, or one retriever kind's
exact scores over the fused candidates (e.g. `colbert`: exact MaxSim of each candidate's token
vectors). A kind used this way need not search the whole index: give it fusion weight 0
(`--weights colbert=0`) and it only reads the vectors of the candidates it rescores, which is
how late interaction scales past the indexes brute force suits."""
from __future__ import annotations

import numpy as np

from .. import components as registry
from ..errors import ConfigError
from ..search.stages.rerank import Candidate, Query


class KindRescorer:
    """Rescore the candidates with one component kind's `exact_scores`."""

    reads_text = False

    def __init__(self, kind: str, retriever):
        self.name, self.retriever = kind, retriever

    def passages_wanted(self, override: int | None) -> int:
        return 0

    def rescore(self, query: Query, candidates: list[Candidate]) -> tuple[np.ndarray, dict]:
        docnos = [c.docno for c in candidates]
        first = {c.docno: c.first_stage[self.name] for c in candidates if self.name in c.first_stage}
        scores = self.retriever.exact_scores(query.rep(self.name), docnos, first)
        return np.asarray(scores, dtype=np.float64), {}


def check_named(name: str, components: dict) -> None:
    """ConfigError unless `--rerank NAME` names a second stage of an index with `components`."""
    if name == "passage" or (name in components and registry.known(name) and registry.get(name).passage_features):
        return
    kinds = [n for n in registry.in_order(components) if registry.get(n).passage_features]
    raise ConfigError(f"unknown reranker {name!r}; use passage, none, {', '.join(kinds + ['']) if kinds else ''}"
                      "or --rerank-model MODEL")


def named_reranker(name: str, weights: dict | None, components: dict, retriever):
    """The second stage `--rerank NAME` asks for, on an index with `components`; `retriever(kind)`
    loads a kind's reader (the passage rescorer takes those of the searched kinds itself)."""
    if name == "passage":
        from .passage import PassageRescorer
        return PassageRescorer(weights)
    if name in components and registry.known(name) and registry.get(name).passage_features:
        return KindRescorer(name, retriever(name))
    kinds = [n for n in registry.in_order(components) if registry.get(n).passage_features]
    raise ConfigError(f"unknown reranker {name!r}; use passage, none, {', '.join(kinds + ['']) if kinds else ''}"
                      "or --rerank-model MODEL")
