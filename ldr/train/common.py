"""What the dense and reranker trainers share: the training arguments and the figures they report."""
from __future__ import annotations

from pathlib import Path


def warmup(ratio: float) -> dict:
    """Transformers 5 takes the warm-up ratio as a float `warmup_steps`; 4 as `warmup_ratio`."""
    import transformers
    return {"warmup_steps": ratio} if int(transformers.__version__.split(".")[0]) >= 5 else {"warmup_ratio": ratio}


def training_kwargs(s, n_rows: int, metric: str, work: str, device: str | None, progress: bool) -> dict:
    """Arguments for the (SentenceTransformer|CrossEncoder)TrainingArguments: evaluate the dev
    split ~4 times per epoch, keep the best checkpoint by `metric`, log the loss in between."""
    steps_per_epoch = max(1, -(-n_rows // s.batch_size))
    eval_steps = s.eval_steps or max(1, steps_per_epoch // 4)
    return dict(output_dir=work, num_train_epochs=s.epochs, max_steps=s.max_steps,
                per_device_train_batch_size=s.batch_size, per_device_eval_batch_size=s.batch_size,
                learning_rate=s.learning_rate, **warmup(s.warmup_ratio), seed=s.seed, eval_strategy="steps",
                eval_steps=eval_steps, save_strategy="steps", save_steps=eval_steps, save_total_limit=2,
                save_only_model=True,   # the best checkpoint is loaded at the end; no resuming, so no optimizer state
                load_best_model_at_end=True, metric_for_best_model=metric, greater_is_better=True,
                logging_steps=max(1, eval_steps // 2), report_to="none", disable_tqdm=not progress,
                use_cpu=(device or "cpu") == "cpu", dataloader_num_workers=0)


def train_and_save(trainer, evaluator, key: str, before: dict, out: Path, n_dev: int) -> dict:
    """Train (the best dev checkpoint is loaded at the end), score the dev split again, save the
    model to `out`; returns steps, time, loss curve and the dev metric before/after, for the card."""
    import time

    t0 = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - t0
    after = evaluator(trainer.model)
    out.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(str(out))
    best = trainer.state.best_model_checkpoint
    return {"steps": result.global_step, "seconds": round(seconds, 1), "train_loss": round(result.training_loss, 5),
            "loss_curve": [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h],
            "dev": {"metric": key, "queries": n_dev, "before": before.get(key), "after": after.get(key),
                    "best_checkpoint": best and Path(best).name}}
