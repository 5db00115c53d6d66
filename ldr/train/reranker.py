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
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError
from .dense import _warmup
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

    samples = [{"query": ex.query, "positive": ex.positives, "documents": ex.positives + ex.negatives}
               for ex in examples if ex.negatives]
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
    steps_per_epoch = max(1, -(-len(data) // s.batch_size))
    eval_steps = s.eval_steps or max(1, steps_per_epoch // 4)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ldr-train-") as work:
        args = CrossEncoderTrainingArguments(
            output_dir=work, num_train_epochs=s.epochs, max_steps=s.max_steps, per_device_train_batch_size=s.batch_size,
            per_device_eval_batch_size=s.batch_size, learning_rate=s.learning_rate, **_warmup(s.warmup_ratio),
            seed=s.seed, eval_strategy="steps", eval_steps=eval_steps, save_strategy="steps", save_steps=eval_steps,
            save_total_limit=2, load_best_model_at_end=True, metric_for_best_model=f"eval_{key}",
            greater_is_better=True, logging_steps=max(1, eval_steps // 2), report_to="none",
            disable_tqdm=not progress, use_cpu=(device or "cpu") == "cpu", dataloader_num_workers=0)
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, eval_dataset=dev_data, loss=loss,
                                      evaluator=evaluator)
        result = trainer.train()
        history = trainer.state.log_history
        best = trainer.state.best_model_checkpoint
    seconds = time.perf_counter() - t0
    after = evaluator(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    return {"kind": "reranker", "base_model": str(base_model), "settings": asdict(s), "rows": len(data),
            "positives": int(n_pos), "dev_rows": len(dev_data), "steps": result.global_step,
            "seconds": round(seconds, 1), "train_loss": round(result.training_loss, 5),
            "loss_curve": [{"step": h["step"], "loss": h["loss"]} for h in history if "loss" in h],
            "dev": {"metric": key, "queries": len(dev), "before": before.get(key), "after": after.get(key),
                    "best_checkpoint": best and Path(best).name}}
