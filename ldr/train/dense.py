"""`ldr train dense`: fine-tune the index's dense encoder on (query, best passage, hard negatives).

sentence-transformers' trainer does the training; ldr supplies what it is trained on (mining.py),
the losses and the held-out dev split it stops on:
- mnrl: MultipleNegativesRankingLoss, the positive against the hard negatives and every other
  query's passages in the batch;
- opl: the orthogonal projection loss of M2-BERT (Saad-Falcon et al., 2024): the mean squared
  error between cos(query, passage) and 1 for the positive, 0 for each negative. It works with a
  batch of one.
The dev split is scored with sentence-transformers' InformationRetrievalEvaluator: each dev query
against the pool of all dev positives and negatives (nDCG@10), before training and after every
evaluation step; the best checkpoint is kept.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError
from .common import train_and_save, training_kwargs
from .mining import Example

log = logging.getLogger(__name__)
LOSSES = ("mnrl", "opl")


@dataclass
class DenseTrainSettings:
    loss: str = "mnrl"
    epochs: float = 1.0
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    negatives: int = 1                # hard negatives per query (mnrl also uses the batch's others)
    max_seq_length: int | None = None  # default: the model's window
    eval_steps: int | None = None     # default: 4 evaluations per epoch
    max_steps: int = -1
    seed: int = 0

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ConfigError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSSES)}")


def _losses():
    try:
        from sentence_transformers.sentence_transformer import losses
    except ImportError:   # sentence-transformers < 6
        from sentence_transformers import losses
    return losses


def _ir_evaluator():
    try:
        from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    except ImportError:
        from sentence_transformers.evaluation import InformationRetrievalEvaluator
    return InformationRetrievalEvaluator


def opl_loss(model):
    """M2-BERT's orthogonal projection loss as a sentence-transformers loss module."""
    import torch
    import torch.nn.functional as F

    class OrthogonalProjectionLoss(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, sentence_features, labels=None):
            reps = [F.normalize(self.model(f)["sentence_embedding"], dim=-1) for f in sentence_features]
            q = reps[0]
            loss = (1 - (q * reps[1]).sum(-1)).pow(2).mean()
            if len(reps) > 2:
                neg = torch.stack([(q * r).sum(-1) for r in reps[2:]])
                loss = loss + neg.pow(2).mean()
            return loss

        @property
        def citation(self) -> str:
            return "Saad-Falcon et al., Benchmarking and Building Long-Context Retrieval Models with LoCo and M2-BERT, 2024"

    return OrthogonalProjectionLoss(model)


def rows(examples: list[Example], negatives: int) -> dict[str, list[str]]:
    """Columns anchor, positive, negative_1..n: one row per (query, positive); a query with fewer
    hard negatives repeats its last one (the trainer needs full rows)."""
    cols: dict[str, list[str]] = {"anchor": [], "positive": []}
    for i in range(negatives):
        cols[f"negative_{i + 1}"] = []
    for ex in examples:
        negs = ex.negatives[:negatives]
        if negatives and not negs:
            continue
        for pos in ex.positives:
            cols["anchor"].append(ex.query)
            cols["positive"].append(pos)
            for i in range(negatives):
                cols[f"negative_{i + 1}"].append(negs[min(i, len(negs) - 1)])
    return cols


def dev_evaluator(examples: list[Example], name: str = "dev"):
    queries = {ex.qid: ex.query for ex in examples}
    corpus, relevant = {}, {}
    for ex in examples:
        for j, t in enumerate(ex.positives):
            corpus[f"{ex.qid}:p{j}"] = t
            relevant.setdefault(ex.qid, set()).add(f"{ex.qid}:p{j}")
        for j, t in enumerate(ex.negatives):
            corpus[f"{ex.qid}:n{j}"] = t
    return _ir_evaluator()(queries, corpus, relevant, name=name, show_progress_bar=False, write_csv=False,
                           accuracy_at_k=[1], precision_recall_at_k=[10], map_at_k=[10])


def train_dense(model_path: str, train: list[Example], dev: list[Example], out: Path, settings: DenseTrainSettings,
                device: str | None = None, progress: bool = True) -> dict:
    """Fine-tune the sentence-transformers model at `model_path`; save it to `out`. Returns the
    figures for the model card (dev nDCG@10 before and after, loss, steps, seconds)."""
    import tempfile

    from datasets import Dataset
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)

    s = settings
    model = SentenceTransformer(model_path, device=device or "cpu", local_files_only=True)
    model.model_card_data.generate_widget_examples = False    # it runs the model over samples, with a bar
    if s.max_seq_length:
        model.max_seq_length = s.max_seq_length
    data = Dataset.from_dict(rows(train, s.negatives))
    if len(data) == 0:
        raise ConfigError("no training rows: no query has a positive passage (and a hard negative)")
    dev_data = Dataset.from_dict(rows(dev, s.negatives))
    loss = _losses().MultipleNegativesRankingLoss(model) if s.loss == "mnrl" else opl_loss(model)
    evaluator = dev_evaluator(dev)
    before = evaluator(model)
    key = evaluator.primary_metric          # e.g. dev_cosine_ndcg@10 (set by the first call)
    metric = f"eval_{key}"
    with tempfile.TemporaryDirectory(prefix="ldr-train-") as work:
        args = SentenceTransformerTrainingArguments(
            **training_kwargs(s, len(data), metric, work, device, progress),
            batch_sampler="no_duplicates" if s.loss == "mnrl" else "batch_sampler")
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, eval_dataset=dev_data,
                                             loss=loss, evaluator=evaluator)
        return {"kind": "dense", "base_model": str(model_path), "settings": asdict(s), "rows": len(data),
                "dev_rows": len(dev_data), **train_and_save(trainer, evaluator, key, before, out, len(dev))}

