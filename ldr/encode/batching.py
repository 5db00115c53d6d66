"""Shared by the encoders: special tokens, token-budget batches, padding."""
from __future__ import annotations

from typing import Iterator

import numpy as np


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text ([CLS] … [SEP], <s> … </s>, or a final EOS)."""
    bare = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i], full[i + len(bare):]
    return [], []


class SerialEncoder:
    """One encode call at a time per encoder: HF fast tokenizers fail ("Already borrowed") when one
    instance is used from two threads; torch uses every core within a call anyway. Subclasses
    implement _encode_queries and _encode_documents."""

    def __init__(self):
        import threading
        self._lock = threading.Lock()

    def encode_queries(self, texts: list[str]):
        with self._lock:
            return self._encode_queries(texts)

    def encode_documents(self, texts: list[str], *args, **kwargs):
        with self._lock:
            return self._encode_documents(texts, *args, **kwargs)

    def prepare_documents(self, texts: list[str], **kwargs):
        """Tokenise a batch (the part that needs the tokenizer, so the lock); finish_documents
        runs the model on it and may run on another thread while the next batch is prepared."""
        with self._lock:
            return self._prepare_documents(texts, **kwargs)

    def finish_documents(self, job, progress=None):
        return self._finish_documents(job, progress)  # the model alone: torch and ORT runs are thread-safe

    def release_memory(self) -> None:
        """Give back what the engine keeps from its largest batch, after a write (runtime.OrtModel)."""
        release = getattr(getattr(self, "model", None), "release_memory", None)
        if release is not None:
            release()


LONG_TEXT = 1 << 20   # characters tokenised per call for long documents


def token_ids(tokenizer, texts: list[str], spans: bool = False) -> list:
    """Token ids (no special tokens) of each text as an int32 array; with `spans`, (ids, (n, 2)
    int64 character offsets of each token) per text, or (ids, None) when the tokenizer cannot
    say where its tokens come from (a slow tokenizer).

    Arrays, not lists of Python ints (28 bytes per id): a 100 MB document is ~25M ids. Texts over
    LONG_TEXT characters are tokenised a piece at a time, cut at whitespace, where every tokenizer
    we use (WordPiece, BPE, Unigram with whitespace pre-tokenisation) splits anyway.
    """
    from ..corpus.text import text_chunks

    spans = spans and getattr(tokenizer, "is_fast", False)
    kw = {"add_special_tokens": False, "truncation": False, "verbose": False}
    if spans:
        kw["return_offsets_mapping"] = True

    def encode(batch: list[str]) -> list:
        enc = tokenizer(batch, **kw)
        if not spans:
            return [(np.asarray(ids, dtype=np.int32), None) for ids in enc["input_ids"]]
        return [(np.asarray(ids, dtype=np.int32), np.asarray(off, dtype=np.int64).reshape(-1, 2))
                for ids, off in zip(enc["input_ids"], enc["offset_mapping"])]

    short = [i for i, t in enumerate(texts) if len(t) <= LONG_TEXT]
    out: list = [None] * len(texts)
    if short:
        for i, r in zip(short, encode([texts[i] for i in short])):
            out[i] = r
    for i, t in enumerate(texts):
        if out[i] is None:
            ids, offs, base = [], [], 0
            for c in text_chunks(t, LONG_TEXT):      # contiguous pieces: offsets shift by their start
                a, o = encode([c])[0]
                ids.append(a)
                if o is not None:
                    offs.append(o + base)
                base += len(c)
            out[i] = (np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32),
                      (np.concatenate(offs) if offs else np.zeros((0, 2), np.int64)) if spans else None)
    return out if spans else [ids for ids, _ in out]


def with_specials(head: list[int], piece, tail: list[int]) -> np.ndarray:
    """head + piece + tail as one int32 array (piece: a list or an array slice)."""
    return np.concatenate([np.asarray(head, dtype=np.int32), np.asarray(piece, dtype=np.int32),
                           np.asarray(tail, dtype=np.int32)])


# tokens per forward pass when a model's settings leave it open: on a CPU a bigger batch is no
# faster and its activations set the build's peak (bench/README.md, "Speed and footprint"); a GPU
# wants big ones
CPU_BATCH_TOKENS, GPU_BATCH_TOKENS = 4096, 16384


def batch_budget(asked: int | None, device: str) -> int:
    return asked or (GPU_BATCH_TOKENS if str(device).startswith("cuda") else CPU_BATCH_TOKENS)


def budget_batches(lengths: list[int], budget: int) -> Iterator[np.ndarray]:
    """Row indices in batches, longest first, each batch's padded size (rows × longest) ≤ budget.

    Sorting by length means rows of a batch have nearly equal length, so almost no padding is
    computed; a budget in tokens (not a fixed batch size) keeps memory flat across lengths.
    """
    order = np.argsort([-n for n in lengths], kind="stable")
    i = 0
    while i < len(order):
        longest = lengths[order[i]]
        size = max(1, budget // max(longest, 1))
        yield order[i:i + size]
        i += size


# rows per bf16 forward pass (fixed_shapes). MiniLM, 256-token windows, 4 qmsum transcripts: 8
# rows 2.3-2.4 s, 16 rows 2.3-2.9 s, 32 rows 6.0 s (another kernel), one row 5.0 s
BF16_ROWS = 8
# a shorter row is padded to a multiple of this many tokens, so rows of nearby lengths share a pass
# (and oneDNN's few cached kernels): alone, 1,500 passages of 20-80 words took 13.0 s in bf16
# against ONNX fp32's 7.9 (2026-11-30)
BF16_BUCKET = 32


def fixed_width(n: int, full: int, bucket: int = BF16_BUCKET) -> int:
    """The width a row of n tokens is padded to under fixed_shapes."""
    return full if n >= full else min(full, -(-n // bucket) * bucket)


def shape_groups(lengths: list[int], full: int, rows: int = BF16_ROWS,
                 bucket: int = BF16_BUCKET) -> Iterator[np.ndarray]:
    """Row indices in the passes fixed_shapes runs (one width, at most `rows` each), widest first,
    planned over all of a call's pieces. Planned a token-budget batch at a time (17 rows: passes of
    8 + 8 + 1), 2,000 passages of 150 words computed 1.32x their tokens in padding and copies; over
    the whole call, 1.08x. The vectors are the same either way: each pass has the shape its rows'
    width fixes."""
    by_width: dict[int, list[int]] = {}
    for i in np.argsort([-n for n in lengths], kind="stable"):
        by_width.setdefault(fixed_width(int(lengths[i]), full, bucket), []).append(int(i))
    for idx in by_width.values():
        for j in range(0, len(idx), rows):
            yield np.asarray(idx[j:j + rows], dtype=np.int64)


def fixed_shapes(batch: list, forward, full: int, rows: int = BF16_ROWS, bucket: int = BF16_BUCKET) -> np.ndarray:
    """forward(pieces, width) over `batch` so that every row's result depends on its own tokens alone.

    Under bf16 (oneDNN) a row's vector moves by ~5e-4 with the shape of its batch: the kernel is
    picked by the matrix sizes, erratically (a 30-token row alone, in 2-16 rows, in 32+ rows:
    three answers), and padding changes them too. So every call has a shape fixed by the row's
    length: a row of n tokens is padded to `fixed_width(n)` (the window's full length, or n rounded
    up to a multiple of `bucket`) and runs with the other rows of that width `rows` at a time, the
    last group filled with copies of its first row. The same text then gets the same vector in an
    add and a fresh build, alone or among any others. Callers that plan with shape_groups pass one
    full pass at a time."""
    out = None
    for g in shape_groups([len(x) for x in batch], full, rows, bucket):
        pieces = [batch[i] for i in g]
        got = forward(pieces + [pieces[0]] * (rows - len(g)), fixed_width(len(pieces[0]), full, bucket))
        if out is None:
            out = np.zeros((len(batch),) + got.shape[1:], dtype=got.dtype)
        out[g] = got[:len(g)]
    return out


def pad(pieces: list[list[int]], pad_id: int, device: str, width: int | None = None):
    """(input_ids, attention_mask) tensors, right-padded to `width` (default: the longest piece)."""
    import torch

    n = max([len(x) for x in pieces] + [width or 0])
    ids = torch.full((len(pieces), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(pieces), n), dtype=torch.long)
    for i, x in enumerate(pieces):
        ids[i, :len(x)] = torch.as_tensor(x, dtype=torch.long)
        mask[i, :len(x)] = 1
    return ids.to(device), mask.to(device)
