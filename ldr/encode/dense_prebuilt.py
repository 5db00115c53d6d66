"""A dense model given as a pre-exported ONNX folder (model.onnx + tokenizer.json, no PyTorch
weights): the packaged int8 bge-small, or a user's own export. ONNX Runtime runs the graph as
it is; pooling and prefixes come from the folder (sentence-transformers' `1_Pooling/config.json`
and `config_sentence_transformers.json` prompts) or, for a packaged model, from its card."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import ModelError
from .dense_core import _DenseCore
from .models import model_revision
from .runtime import OrtModel, pad_np

# what a packaged folder does not say about itself (from the models' cards)
PACKAGED_FACTS = {
    "bge-small": {"pooling": "cls",
                  "prompts": {"query": "Represent this sentence for searching relevant passages: "}},
}
POOLINGS = ("cls", "mean")


def folder_facts(path: Path) -> dict:
    """Pooling and prompts of a sentence-transformers style folder (mean pooling, no prompts
    when it says nothing)."""
    facts: dict = {"pooling": "mean", "prompts": {}}
    pool = path / "1_Pooling" / "config.json"
    st = path / "config_sentence_transformers.json"
    try:
        if pool.is_file():
            cfg = json.loads(pool.read_text())
            facts["pooling"] = "cls" if cfg.get("pooling_mode_cls_token") else "mean"
        if st.is_file():
            facts["prompts"] = dict(json.loads(st.read_text()).get("prompts") or {})
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: unreadable sentence-transformers config ({e})") from None
    return facts


class PrebuiltDenseEncoder(_DenseCore):
    def __init__(self, settings, path: str, key: str | None):
        from .batching import SerialEncoder

        self.settings = settings
        SerialEncoder.__init__(self)
        self.device, self.path = "cpu", path
        self.model = OrtModel(Path(path))
        self.tokenizer = self.model.tokenizer
        facts = PACKAGED_FACTS.get(key) or folder_facts(Path(path))
        self.pooling = facts["pooling"]
        m = self.model.meta
        self.kind, self.trained, self.ext_info = "ape", m["max_position_embeddings"], None
        settings.backend = "onnx"
        self._setup(self.trained, facts["prompts"], self._width())

    def _width(self) -> int:
        ids, mask = pad_np([[0, 0]], 0)
        return int(self.model.run(ids, mask).shape[-1])

    def describe(self) -> dict:
        return {"name": self.settings.model, "path": self.path, "revision": model_revision(self.path),
                "architecture": self.model.meta.get("model_type"), "positions": self.kind,
                "trained_length": self.trained, "window": self.window, "dim": self.dim,
                "query_prefix": self.query_prefix, "doc_prefix": self.doc_prefix, "pooling": self.pooling,
                "extension": None, "settings": self.settings.to_dict(),
                "backend": {"name": "onnx", "int8": None, "prebuilt": True}}

    def _forward(self, batch) -> np.ndarray:
        ids, mask = pad_np(batch, self.tokenizer.pad_token_id or 0)
        h = self.model.run(ids, mask)
        if h.ndim == 3:           # token vectors: pool them as the model was trained to
            if self.pooling == "cls":
                h = h[:, 0]
            else:
                m = mask[:, :, None].astype(np.float32)
                h = (h * m).sum(1) / np.clip(m.sum(1), 1, None)
        if self.settings.dim:
            h = h[:, : self.settings.dim]
        return (h / np.linalg.norm(h, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)
