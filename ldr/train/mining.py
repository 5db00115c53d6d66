"""Training examples mined from an index, as ldr uses the models on long documents.

For each query with judged documents:
- positives: each relevant document's best passage for the query, as MaxP finds it (the
  document's passage vectors scored by the current dense model; word windows when the index has
  no passage vectors);
- hard negatives: the best passages of the top documents the index's own search returns for the
  query that are not judged relevant.
A document is never a negative of a query it is relevant to, and a query whose relevant documents
are not in the index is counted and skipped.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

from ..errors import ConfigError

log = logging.getLogger(__name__)
DENSE_ONLY = {"bm25": 0.0, "dense": 1.0, "sparse": 0.0}


@dataclass
class Example:
    qid: str
    query: str
    positives: list[str]                 # passage texts, best first
    negatives: list[str]                 # hard negatives' best passages, hardest first
    positive_docs: list[str] = field(default_factory=list)
    negative_docs: list[str] = field(default_factory=list)


def split_queries(qids: list[str], fraction: float, seed: int, minimum: int = 2) -> tuple[list[str], list[str]]:
    """(train, dev): a seeded random `fraction` of the queries (at least `minimum`) held out."""
    qids = sorted(qids)
    rng = random.Random(seed)
    rng.shuffle(qids)
    n_dev = max(minimum, round(len(qids) * fraction))
    if len(qids) - n_dev < 2:
        raise ConfigError(f"too few queries to train on ({len(qids)} with relevant documents; a dev split of "
                          f"{n_dev} leaves {len(qids) - n_dev})")
    return sorted(qids[n_dev:]), sorted(qids[:n_dev])


def mine(index, queries: dict[str, str], qrels: dict[str, dict[str, int]], qids: list[str], negatives: int = 4,
         depth: int = 30, passages: int = 1, progress: bool = True) -> tuple[list[Example], int]:
    """(examples, queries skipped because none of their relevant documents is in the index)."""
    from tqdm.auto import tqdm

    known = set(index.live_ids())
    dense_passages = "dense" in index.components
    out, skipped = [], 0
    for qid in tqdm(qids, desc="mining passages", unit="query", disable=not progress, leave=False):
        rel = [d for d, r in sorted(qrels.get(qid, {}).items()) if int(r) > 0 and d in known]
        if not rel or qid not in queries:
            skipped += 1
            continue
        query = queries[qid]
        judged = {d for d in qrels.get(qid, {})}
        hits = index.search(query, k=min(depth, len(index)), rerank=False, with_meta=False, passages=0)
        negs = [h.id for h in hits if h.id not in judged][:negatives]
        # one passage search over the positives and the negatives: MaxP under the current model
        found = index.search(query, k=len(rel) + len(negs), filters={"id": rel + negs}, passages=passages,
                             rerank=False, with_meta=False, weights=DENSE_ONLY if dense_passages else None)
        best = {h.id: [p.text for p in h.passages] for h in found}
        pos = [t for d in rel for t in best.get(d, [])]
        neg = [t for d in negs for t in best.get(d, [])]
        if not pos:
            skipped += 1
            continue
        out.append(Example(qid, query, pos, neg, rel, negs))
    if skipped:
        log.info("%d queries skipped: none of their relevant documents is in the index", skipped)
    return out, skipped
