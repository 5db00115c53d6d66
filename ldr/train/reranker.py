"""`ldr train reranker`: a cross-encoder trained on (query, window) pairs from your qrels.

Initialised from the packaged MiniLM weights (a new one-logit head), trained with
sentence-transformers' CrossEncoderTrainer and BinaryCrossEntropyLoss on:
- positives: the relevant document's best windows for the query (mining.py);
- negatives: the best windows of the documents ldr's own search ranks highest that are not
  judged relevant (hard negatives), weighted so positives and negatives count alike.
The dev split is scored with CrossEncoderRerankingEvaluator (each dev query's positives among
its negatives, nDCG@10), before training and at every evaluation step; the best checkpoint is kept.
The result is an ordinary Hugging Face sequence-classification folder: `ldr search
--rerank-model MODEL_DIR` uses it, and `ldr tune --rerank-model MODEL_DIR` can make it an index's
default reranker.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError
from .common import train_and_save, training_kwargs
from .mining import Example

log = logging.getLogger(__name__)


@dataclass
class RerankerTrainSettings:
    epochs: float = 1.0
    batch_size: int = 16
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.1
    negatives: int = 4               # hard-negative windows per query
    max_length: int = 320            # query + window tokens
    eval_steps: int | None = None    # default: 4 evaluations per epoch
    max_steps: int = -1
    seed: int = 0


def pairs(examples: list[Example], negatives: int) -> dict[str, list]:
    cols: dict[str, list] = {"query": [], "passage": [], "label": []}
    for ex in examples:
        for t, y in [(p, 1.0) for p in ex.positives] + [(n, 0.0) for n in ex.negatives[:negatives]]:
            cols["query"].append(ex.query)
            cols["passage"].append(t)
            cols["label"].append(y)
    return cols


def dev_evaluator(examples: list[Example], name: str = "dev"):
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    import random

    samples = []
    for ex in examples:
        if ex.negatives:
            # in a seeded random order: the evaluator's "base" score is then a random ranking's
            docs = ex.positives + ex.negatives
            random.Random(ex.qid).shuffle(docs)
            samples.append({"query": ex.query, "positive": ex.positives, "documents": docs})
    return CrossEncoderRerankingEvaluator(samples, at_k=10, name=name, write_csv=False, show_progress_bar=False)


def train_reranker(base_model: str, train: list[Example], dev: list[Example], out: Path,
                   settings: RerankerTrainSettings, device: str | None = None, progress: bool = True) -> dict:
    import tempfile

    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                     CrossEncoderTrainingArguments)
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    s = settings
    torch.manual_seed(s.seed)     # the new classification head starts from the same weights every run
    model = CrossEncoder(base_model, num_labels=1, max_length=s.max_length, device=device or "cpu",
                         local_files_only=True)
    model.model_card_data.generate_widget_examples = False    # it runs the model over samples, with a bar
    data = Dataset.from_dict(pairs(train, s.negatives))
    n_pos = sum(data["label"])
    if n_pos == 0 or n_pos == len(data):
        raise ConfigError("training a reranker needs positive and negative windows; the mined data has "
                          f"{int(n_pos)} positives among {len(data)} pairs")
    dev_data = Dataset.from_dict(pairs(dev, s.negatives))
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor((len(data) - n_pos) / n_pos))
    evaluator = dev_evaluator(dev)
    before = evaluator(model)
    key = evaluator.primary_metric          # set by the first call
    with tempfile.TemporaryDirectory(prefix="ldr-train-") as work:
        args = CrossEncoderTrainingArguments(**training_kwargs(s, len(data), f"eval_{key}", work, device, progress))
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, eval_dataset=dev_data, loss=loss,
                                      evaluator=evaluator)
        return {"kind": "reranker", "base_model": str(base_model), "settings": asdict(s), "rows": len(data),
                "positives": int(n_pos), "dev_rows": len(dev_data),
                **train_and_save(trainer, evaluator, key, before, out, len(dev))}
