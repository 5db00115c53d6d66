"""A tokenizer without transformers, for the ONNX engines and the bf16 BERT engines."""
from __future__ import annotations

from pathlib import Path


class FastTokenizer:
    """The part of a Hugging Face fast tokenizer's interface ldr's encoders use, over the
    `tokenizers` library alone (importing transformers costs a cold search more than a second)."""

    is_fast = True

    def __init__(self, folder: Path, meta: dict):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        self._tok.no_truncation()
        self._tok.no_padding()
        self.pad_token_id = meta.get("pad_token_id")
        self.all_special_ids = list(meta.get("special_ids", []))
        self.model_input_names = list(meta.get("model_input_names", ["input_ids", "attention_mask"]))

    def __call__(self, texts, add_special_tokens: bool = True, return_offsets_mapping: bool = False, **_):
        single = isinstance(texts, str)
        encs = self._tok.encode_batch([texts] if single else list(texts), add_special_tokens=add_special_tokens)
        out = {"input_ids": [e.ids for e in encs]}
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets for e in encs]
        return {k: v[0] for k, v in out.items()} if single else out

    def get_vocab(self) -> dict:
        return self._tok.get_vocab(with_added_tokens=True)

    def decode(self, ids) -> str:
        return self._tok.decode(list(ids))
