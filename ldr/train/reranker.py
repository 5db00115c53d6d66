"""`ldr train reranker`: a cross-encoder trained on (query, window) pairs from your qrels.

Initialised from the packaged MiniLM weights (a new one-logit head), trained with
sentence-transformers' CrossEncoderTrainer on:
- positives: the relevant document's best windows for the query (mining.py);
- negatives: the best windows of the documents ldr's own search ranks highest that are not
  judged relevant (hard negatives).
Two losses: `mnrl` (default; listwise MultipleNegativesRankingLoss: each positive against its
query's hard negatives and one other query's positive, a softmax over them) and `bce` (pointwise
BinaryCrossEntropyLoss, positives and negatives weighted to count alike). A reranker only has to
order a query's candidates, which is what the listwise loss asks for; BCE asks for a calibrated
probability per window. On qmsum-train (fold 0 of bench/bench_train_cv.py) mnrl reached a dev
nDCG@10 of 70.8 in 40 steps, BCE 63.5 in 283 (a random order: 58.1).
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
    negatives: int = 3               # hard-negative windows per query
    loss: str = "mnrl"               # bce | mnrl
    in_batch: int = 1                # mnrl: other queries' positives added as negatives
    mini_batch: int | None = None    # mnrl: score a step's pairs this many at a time (GradCache: less memory)
    max_length: int = 384            # query + window tokens
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


def tuples(examples: list[Example], negatives: int) -> tuple[dict[str, list], int]:
    """(query, positive, negative_1..n) rows for the listwise loss: one per positive, the query's
    hard negatives cycled when it has fewer than n; a query without any negative cannot be
    ranked against anything and is counted, not used."""
    cols: dict[str, list] = {"query": [], "positive": [], **{f"negative_{i + 1}": [] for i in range(negatives)}}
    dropped = 0
    for ex in examples:
        if not ex.negatives:
            dropped += 1
            continue
        for p in ex.positives:
            cols["query"].append(ex.query)
            cols["positive"].append(p)
            for i in range(negatives):
                cols[f"negative_{i + 1}"].append(ex.negatives[i % len(ex.negatives)])
    return cols, dropped


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
    from sentence_transformers.cross_encoder.losses import (BinaryCrossEntropyLoss,
                                                            CachedMultipleNegativesRankingLoss,
                                                            MultipleNegativesRankingLoss)

    s = settings
    if s.loss not in ("bce", "mnrl"):
        raise ConfigError(f"unknown reranker loss {s.loss!r}: choose bce or mnrl")
    if s.negatives < 1:
        raise ConfigError("training a reranker needs at least one hard negative per query (--negatives)")
    if s.loss == "mnrl" and s.in_batch < 1:    # sentence-transformers samples at least one
        raise ConfigError("the mnrl loss takes at least one in-batch negative (in_batch >= 1)")
    if s.mini_batch is not None and (s.loss != "mnrl" or s.mini_batch < 1):
        raise ConfigError("--mini-batch-size takes a positive number and applies to the mnrl loss only")
    torch.manual_seed(s.seed)     # the new classification head starts from the same weights every run
    model = CrossEncoder(base_model, num_labels=1, max_length=s.max_length, device=device or "cpu",
                         local_files_only=True)
    model.model_card_data.generate_widget_examples = False    # it runs the model over samples, with a bar
    dropped = 0
    if s.loss == "bce":
        data = Dataset.from_dict(pairs(train, s.negatives))
        n_pos = sum(data["label"])
        if n_pos == 0 or n_pos == len(data):
            raise ConfigError("training a reranker needs positive and negative windows; the mined data has "
                              f"{int(n_pos)} positives among {len(data)} pairs")
        dev_data = Dataset.from_dict(pairs(dev, s.negatives))
        loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor((len(data) - n_pos) / n_pos))
    else:
        cols, dropped = tuples(train, s.negatives)
        if not cols["query"]:
            raise ConfigError("training a reranker needs queries with hard negatives; none of the "
                              f"{len(train)} training queries has one")
        data, n_pos = Dataset.from_dict(cols), len(cols["query"])
        dev_data = Dataset.from_dict(tuples(dev, s.negatives)[0])
        # every pair of a step goes through the model at once, holding its activations for the
        # backward pass (~17 GB at batch 16 x 5 pairs x 384 tokens); the cached loss scores them a
        # mini-batch at a time without gradients, then recomputes each chunk's gradient: the same
        # update for a second forward pass
        loss = (MultipleNegativesRankingLoss(model, num_negatives=s.in_batch) if s.mini_batch is None else
                CachedMultipleNegativesRankingLoss(model, num_negatives=s.in_batch, mini_batch_size=s.mini_batch))
    evaluator = dev_evaluator(dev)
    before = evaluator(model)
    key = evaluator.primary_metric          # set by the first call
    with tempfile.TemporaryDirectory(prefix="ldr-train-") as work:
        args = CrossEncoderTrainingArguments(**training_kwargs(s, len(data), f"eval_{key}", work, device, progress))
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, eval_dataset=dev_data, loss=loss,
                                      evaluator=evaluator)
        return {"kind": "reranker", "base_model": str(base_model), "settings": asdict(s), "rows": len(data),
                "positives": int(n_pos), "dev_rows": len(dev_data),
                "queries_without_negatives": dropped,
                **train_and_save(trainer, evaluator, key, before, out, len(dev))}
