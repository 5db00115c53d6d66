"""Cross-encoder reranking with any Hugging Face sequence-classification model
(bge-reranker-v2-m3, mGTE reranker, ms-marco MiniLM cross-encoders, ...).

A long document is scored over windows of (query + window) that fit the model: in a search, the
document's best passages for the query (dense MaxP passages and BM25 windows, see
ldr/search/passages.py), so the middle and end of a long document are reranked too; without
a search context, the tokenizer's overflow windows, chosen by query-token overlap. At most
`max_windows` windows per document, all batched. Window scores are aggregated by max
(default) or the mean of the first k (in document order).
"""
from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..encode.models import loading, pick_device, resolve
from ..search.stages.rerank import Candidate, Query

AGGREGATES = ("max", "firstk")


@dataclass
class CrossEncoderSettings:
    model: str
    max_length: int | None = None     # default: the model's (capped at 512)
    stride: int = 64                  # tokens shared by consecutive windows
    max_windows: int = 8
    aggregate: str = "max"
    first_k: int = 3
    batch_size: int = 16
    trust_remote_code: bool = False
    device: str | None = None
    backend: str = "auto"             # auto (ONNX Runtime fp32 on a CPU) | torch | onnx | onnx-int8

    def __post_init__(self):
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"unknown window aggregate {self.aggregate!r}; choose one of {', '.join(AGGREGATES)}")

    def to_dict(self):
        d = asdict(self)
        d.pop("device")
        return d


def pick_windows(windows: list[list[int]], query_ids: list[int], special: set[int], n: int) -> list[int]:
    """Which of a document's windows to score, in document order: all when they fit in `n`;
    otherwise the first (openings carry titles and summaries) and the n - 1 that share the most
    query tokens, so a match in the middle or at the end of a long document is reranked."""
    if len(windows) <= n:
        return list(range(len(windows)))
    q = set(query_ids) - special
    overlap = [sum(1 for t in w if t in q) for w in windows]   # the query's tokens are counted too: equal in all
    rest = sorted(range(1, len(windows)), key=lambda i: (-overlap[i], i))[: n - 1]
    return [0] + sorted(rest)


def aggregate(window_scores: list[float], how: str = "max", first_k: int = 3) -> float:
    if not window_scores:
        return float("-inf")
    if how == "max":
        return float(max(window_scores))
    return float(np.mean(window_scores[:first_k]))


class CrossEncoderReranker:
    def __init__(self, settings: CrossEncoderSettings):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from ..encode.runtime import OrtModel, choose, onnx_folder

        hf_logging.disable_progress_bar()
        self.settings = s = settings
        self.name = f"cross-encoder:{s.model}"
        self._lock = threading.Lock()
        path, _ = resolve(s.model)
        prebuilt = onnx_folder(path)     # a packaged int8 graph or a user's export: run as it is
        if prebuilt and s.backend == "torch":
            raise ConfigError(f"{s.model} is an ONNX model folder (no PyTorch weights): use --backend onnx")
        s.backend = "onnx" if prebuilt else choose(s.backend, s.device, os.path.isdir(path),
                                                    "a cross-encoder that is not a local folder")
        self.device = "cpu" if s.backend.startswith("onnx") else pick_device(s.device)
        self.ort = self.model = None
        with loading(s.model, path):
            self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=s.trust_remote_code)
            if prebuilt:
                self.ort = OrtModel(Path(path))
                limit, model_type = self.ort.meta["max_position_embeddings"], self.ort.meta["model_type"]
            elif s.backend.startswith("onnx"):
                from ..encode import onnx_export
                # the graph runs the model; the tokenizer's pair and overflow handling stays as it is
                _, self.ort = onnx_export.load("cross", s, s.backend, s.trust_remote_code)
                limit, model_type = self.ort.meta["max_position_embeddings"], self.ort.meta["model_type"]
            else:
                self.model = AutoModelForSequenceClassification.from_pretrained(
                    path, trust_remote_code=s.trust_remote_code).to(self.device).eval()
                limit = int(getattr(self.model.config, "max_position_embeddings", 512))
                model_type = self.model.config.model_type
        if model_type in ("roberta", "xlm-roberta", "camembert"):
            limit -= 2
        self.max_length = min(s.max_length or limit, limit, 8192)

    def _windows(self, query: str, text: str, max_windows: int | None = None):
        q_ids = self.tokenizer(query, add_special_tokens=False)["input_ids"]
        if len(q_ids) > self.max_length // 2:  # a pasted page as query: keep its start, leave room for text
            query = self.tokenizer.decode(q_ids[:self.max_length // 2])
            q_ids = self.tokenizer(query, add_special_tokens=False)["input_ids"]
        room = self.max_length - len(q_ids) - 4  # pair special tokens
        if room < 8:
            raise ConfigError(f"the query is too long for a {self.max_length}-token cross-encoder window")
        enc = self.tokenizer(query, text, truncation="only_second", max_length=self.max_length,
                             stride=min(self.settings.stride, room // 2), return_overflowing_tokens=True,
                             padding=False)
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        chosen = pick_windows(enc["input_ids"], q_ids, set(self.tokenizer.all_special_ids),
                              max_windows or self.settings.max_windows)
        return [{k: enc[k][i] for k in keys} for i in chosen]

    def _logits(self, batch: list[dict]) -> np.ndarray:
        if self.ort is not None:
            p = self.tokenizer.pad(batch, return_tensors="np")
            logits = self.ort.run(p["input_ids"], p["attention_mask"], p.get("token_type_ids"))
        else:
            import torch

            padded = self.tokenizer.pad(batch, return_tensors="pt")
            with torch.inference_mode():
                logits = self.model(**{k: v.to(self.device) for k, v in padded.items()}).logits.float().cpu().numpy()
        if logits.shape[-1] == 1:
            return logits[:, 0]
        return logits[:, -1] - logits[:, 0]  # positive-class margin

    def _pair(self, query: str, passage: str) -> dict:
        """(query, passage) as one model input, the passage cut to what fits."""
        q_ids = self.tokenizer(query, add_special_tokens=False)["input_ids"]
        if len(q_ids) > self.max_length // 2:
            query = self.tokenizer.decode(q_ids[:self.max_length // 2])
        enc = self.tokenizer(query, passage, truncation="only_second", max_length=self.max_length, padding=False)
        return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}

    def score(self, query: str, texts: list[str], passages: list[list[str]] | None = None,
              max_windows: int | None = None) -> np.ndarray:
        """One score per text; `passages[d]`: the windows to score for text d (in document
        order), instead of the tokenizer's overflow windows; `max_windows`: at most this many
        per text (default: the settings')."""
        n = max_windows or self.settings.max_windows
        windows, owner = [], []
        for d, t in enumerate(texts):
            if passages is not None and passages[d]:
                w = [self._pair(query, p) for p in passages[d][:n]]
            else:
                w = self._windows(query, t, n)
            windows.extend(w)
            owner.extend([d] * len(w))
        per_doc: list[list[float]] = [[] for _ in texts]
        bs = self.settings.batch_size
        order = np.argsort([-len(w["input_ids"]) for w in windows], kind="stable")
        scores = np.zeros(len(windows))
        for i in range(0, len(order), bs):
            rows = order[i:i + bs]
            scores[rows] = self._logits([windows[r] for r in rows])
        for r, d in enumerate(owner):
            per_doc[d].append(float(scores[r]))  # windows kept in document order for first-k
        return np.array([aggregate(p, self.settings.aggregate, self.settings.first_k) for p in per_doc])

    reads_text = True      # the tokenizer's overflow windows when a candidate has no passages

    def passages_wanted(self, override: int | None) -> int:
        """The first stage's best passages per document it scores (a search's `rerank_windows`
        overrides the settings: they are shared by every search)."""
        return override or self.settings.max_windows

    def rescore(self, query: Query, candidates: list[Candidate]) -> tuple[np.ndarray, dict]:
        texts = [c.text or "" for c in candidates]
        n = self.passages_wanted(query.windows)
        with self._lock:   # one tokenizer instance: one thread at a time (see encode/dense.py)
            return self.score(query.text, texts, [c.passages for c in candidates], n), {}
