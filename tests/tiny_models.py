"""Tiny randomly initialised models built from configs, for architectures we cannot download.

They reuse the packaged MiniLM tokenizer (vocab 30522) so that text goes through a real
tokenizer; weights are seeded, so outputs are deterministic.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _tokenizer_dir() -> Path:
    from ldr.encode.models import packaged_path
    return packaged_path("all-minilm-l6-v2")


def make(kind: str, path: Path, num_labels: int = 1) -> Path:
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, pad_token_id=0)
    if kind == "bert":
        model = tf.BertModel(tf.BertConfig(max_position_embeddings=64, **common))
    elif kind == "bert-classifier":
        model = tf.BertForSequenceClassification(tf.BertConfig(max_position_embeddings=64, num_labels=num_labels,
                                                               **common))
    elif kind == "modernbert":
        model = tf.ModernBertModel(tf.ModernBertConfig(max_position_embeddings=64, global_attn_every_n_layers=1,
                                                       local_attention=16, **common))
    elif kind == "qwen3":
        model = tf.Qwen3Model(tf.Qwen3Config(max_position_embeddings=64, num_key_value_heads=2, head_dim=16,
                                             **common))
    else:
        raise ValueError(kind)
    model.eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    src = _tokenizer_dir()
    for f in TOKENIZER_FILES:
        if (src / f).exists():
            shutil.copy(src / f, path / f)
    return path
