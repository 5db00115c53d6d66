"""The bf16 engines' BERT without transformers (encode/plain_bert.py): the dense vectors and
SPLADE weights, and the manifests, that transformers' BertModel / BertForMaskedLM and
sentence-transformers' pooling give, to the bit; folders of any other shape left to transformers;
and bf16 encodings that never import either."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ldr.encode import plain_bert
from ldr.encode.dense import DenseEncoder, DenseSettings
from ldr.encode.models import resolve
from ldr.encode.sparse import SparseEncoder, SparseSettings

# bf16 is emulated (slow) on CPUs without it in hardware: short texts, a short window
TEXTS = ["The committee agreed to move the budget vote to Thursday after a long discussion about the "
         "remote control design and its battery life. " * 3,
         "short note", "", "Dr. Smith paid $3.75 for 2 million naïve cafés — 中文 Ünïcödé\tand\ntabs",
         "A second document about the battery supplier and the launch date. " * 2]
MINILM = resolve("sentence-transformers/all-MiniLM-L6-v2")[0]


@pytest.fixture(scope="module")
def engines():
    settings = dict(device="cpu", max_length=48)
    plain = DenseEncoder(DenseSettings(**settings), bf16=True)
    old, plain_bert.plain_folder = plain_bert.plain_folder, lambda path: None
    try:
        through = DenseEncoder(DenseSettings(**settings), bf16=True)      # transformers' BertModel
    finally:
        plain_bert.plain_folder = old
    return plain, through


def test_the_same_vectors_and_manifest_as_transformers_to_the_bit(engines):
    plain, through = engines
    assert isinstance(plain.hf, plain_bert.PlainBert) and not isinstance(through.hf, plain_bert.PlainBert)
    for a, b in ((plain.encode_documents(TEXTS), through.encode_documents(TEXTS)),
                 (plain.encode_queries(TEXTS), through.encode_queries(TEXTS))):
        a, b = (x[0] if isinstance(x, tuple) else x for x in (a, b))
        assert a.shape == b.shape and a.shape[0] >= len(TEXTS) and np.array_equal(a, b)
    assert plain.describe() == through.describe()
    assert plain.window == through.window and plain.dim == through.dim and plain.specials == through.specials


def test_the_same_splade_weights_and_manifest_as_transformers_to_the_bit(monkeypatch):
    settings = dict(device="cpu", max_length=48)
    plain = SparseEncoder(SparseSettings(**settings), bf16=True)
    monkeypatch.setattr(plain_bert, "plain_mlm", lambda path: None)
    through = SparseEncoder(SparseSettings(**settings), bf16=True)
    assert isinstance(plain.model, plain_bert.PlainMlm) and not isinstance(through.model, plain_bert.PlainMlm)
    for a, b in ((plain.encode_documents(TEXTS), through.encode_documents(TEXTS)),
                 (plain.encode_queries(TEXTS), through.encode_queries(TEXTS))):
        a, b = a.tocsr(), b.tocsr()
        assert a.shape == b.shape and a.nnz > 0
        assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("indptr", "indices", "data"))
    assert plain.describe() == through.describe()
    assert (plain.window, plain._special, plain._head_ids, plain._tail_ids, plain.vocab_size) == \
           (through.window, through._special, through._head_ids, through._tail_ids, through.vocab_size)
    assert np.array_equal(plain._head[0].float().numpy(), through._head[0].float().numpy())
    assert np.array_equal(plain._head[1].numpy(), through._head[1].numpy())


def test_a_masked_lm_of_another_shape_is_left_to_transformers(tmp_path):
    splade = resolve(SparseSettings().model)[0]
    assert plain_bert.plain_mlm(splade) is not None and plain_bert.plain_mlm(MINILM) is None   # a BertModel
    for change in (_edit("config.json", model_type="distilbert"), _edit("config.json", hidden_act="relu"),
                   lambda f: (f / "tokenizer.json").unlink(), lambda f: (f / "config.json").write_text("[]")):
        assert plain_bert.plain_mlm(_copy(tmp_path, change, splade)) is None


def _copy(tmp_path, change, model=MINILM):
    folder = tmp_path / "model"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(model, folder)
    change(folder)
    return folder


def _edit(name, **values):
    def change(folder):
        f = folder / name
        f.write_text(json.dumps({**json.loads(f.read_text()), **values}))
    return change


@pytest.mark.parametrize("change", [
    _edit("config.json", model_type="roberta"),
    _edit("config.json", architectures=["BertForMaskedLM"]),
    _edit("config.json", position_embedding_type="relative_key"),
    _edit("config.json", hidden_act="gelu_new"),
    _edit("1_Pooling/config.json", pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True),
    _edit("1_Pooling/config.json", pooling_mode_cls_token=True),        # two modes at once
    _edit("1_Pooling/config.json", include_prompt=False),
    _edit("sentence_bert_config.json", do_lower_case=True),
    _edit("sentence_bert_config.json", config_args={"hidden_dropout_prob": 0.5}),
    _edit("sentence_bert_config.json", max_seq_length=None, processing_kwargs={"text": {"max_length": 128}}),
    lambda f: (f / "modules.json").write_text(json.dumps(
        json.loads((f / "modules.json").read_text())[:2] + [{"idx": 2, "name": "2", "path": "2_Dense",
                                                             "type": "sentence_transformers.models.Dense"}])),
    lambda f: (f / "model.safetensors").unlink(),
    lambda f: (f / "config.json").write_text("{not json"),
    lambda f: (f / "modules.json").write_text("[1, 2]"),
    lambda f: (f / "modules.json").write_text(json.dumps([1] + json.loads((f / "modules.json").read_text()))),
    lambda f: (f / "1_Pooling" / "config.json").write_text("[true]"),
    lambda f: (f / "sentence_bert_config.json").write_text("256"),
], ids=["roberta", "mlm", "relative", "gelu_new", "max", "two-modes", "no-prompt", "lower", "config-args",
        "processing", "dense", "no-weights", "bad-json", "odd-modules", "shifted-modules", "pooling-list", "config-number"])
def test_a_folder_of_another_shape_is_left_to_transformers(tmp_path, change):
    assert plain_bert.plain_folder(MINILM) is not None
    assert plain_bert.plain_folder(_copy(tmp_path, change)) is None


def test_a_cls_folder_pools_its_first_token(tmp_path):
    folder = _copy(tmp_path, _edit("1_Pooling/config.json", pooling_mode_cls_token=True, pooling_mode_mean_tokens=False))
    facts = plain_bert.plain_folder(folder)
    assert facts["pooling"] == "cls"
    import torch
    x = torch.randn(2, 5, 4)
    out = plain_bert.Pooling("cls", 4)({"token_embeddings": x, "attention_mask": torch.ones(2, 5, dtype=torch.long)})
    assert torch.equal(out["sentence_embedding"], x[:, 0])


def test_a_bf16_encoding_imports_neither_transformers_nor_sentence_transformers():
    code = ("import sys; from ldr.encode.dense import DenseEncoder, DenseSettings\n"
            "from ldr.encode.sparse import SparseEncoder, SparseSettings\n"
            "e = DenseEncoder(DenseSettings(device='cpu', max_length=32), bf16=True)\n"
            "v, _ = e.encode_documents(['a short text to encode'])\n"
            "assert v.shape == (1, 384), v.shape\n"
            "w = SparseEncoder(SparseSettings(device='cpu', max_length=32), bf16=True).encode_documents(['a text'])\n"
            "assert w.nnz > 0\n"
            "print(sorted(m for m in ('transformers', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_weights_in_another_dtype_are_left_to_transformers(tmp_path):
    from safetensors.torch import load_file, save_file

    def half(folder):
        f = folder / "model.safetensors"
        save_file({k: v.half() for k, v in load_file(str(f)).items()}, str(f))
    assert plain_bert.plain_folder(_copy(tmp_path, half)) is None


@pytest.mark.parametrize("sizes", [{"num_hidden_layers": 7}, {"num_hidden_layers": 10 ** 9}, {"num_hidden_layers": 1},
                                   {"hidden_size": 1 << 20, "num_attention_heads": 1 << 10},
                                   {"intermediate_size": 1 << 24}, {"vocab_size": 100}])
def test_a_config_the_weights_do_not_match_fails_before_allocating(tmp_path, sizes):
    """Sizes in config.json that model.safetensors does not hold: a clear error, read from the
    file's header before a tensor is allocated (transformers would initialise a missing layer at
    random, or allocate what the config says)."""
    folder = _copy(tmp_path, _edit("config.json", **sizes))
    facts = plain_bert.plain_folder(folder)
    with pytest.raises((KeyError, ValueError), match="model.safetensors"):
        plain_bert.load(folder, facts)
    splade = _copy(tmp_path, _edit("config.json", **sizes), resolve(SparseSettings().model)[0])
    with pytest.raises((KeyError, ValueError), match="model.safetensors"):
        plain_bert.load_mlm(splade, plain_bert.plain_mlm(splade))


def _whitened(tmp_path, seed=0):
    from ldr.train.whitening import write_model

    rng = np.random.default_rng(seed)
    matrix = (np.eye(384) + 0.3 * rng.normal(size=(384, 384)) / np.sqrt(384)).astype(np.float32)
    mean = (0.05 * rng.normal(size=384)).astype(np.float32)
    write_model(Path(MINILM), tmp_path / "white", mean, matrix, {"base_name": "all-MiniLM-L6-v2"})
    return tmp_path / "white", mean, matrix


def test_a_whitened_folder_runs_its_head_in_float32_on_the_plain_engine(engines, tmp_path):
    """`ldr train whitening`'s layout (Pooling, Normalize, Dense, Normalize) is encoded without
    transformers: the base model's vectors through (v - mean) @ matrix in float32."""
    folder, mean, matrix = _whitened(tmp_path)
    facts = plain_bert.plain_folder(folder)
    assert facts is not None and facts["head"]["out"] == 384 and facts["dim"] == 384
    white = DenseEncoder(DenseSettings(model=str(folder), device="cpu", max_length=48, context=0), bf16=True)
    assert isinstance(white.hf, plain_bert.PlainBert)
    base, _ = engines[0].encode_documents(TEXTS)
    got, _ = white.encode_documents(TEXTS)
    want = (base.astype(np.float64) - mean) @ matrix
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert white.describe()["pooling"][-1]["dense"]["dtype"] == "float32"


@pytest.mark.parametrize("change", ["outside", "link", "tanh", "width", "bf16", "extra"])
def test_a_head_of_another_shape_is_left_to_sentence_transformers(tmp_path, change):
    import os

    from safetensors.numpy import load_file, save_file

    folder, _, _ = _whitened(tmp_path)
    dense = folder / "3_Dense"
    if change == "outside":
        modules = json.loads((folder / "modules.json").read_text())
        modules[3]["path"] = "../elsewhere"
        (folder / "modules.json").write_text(json.dumps(modules))
    elif change == "link":
        shutil.move(dense, tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", dense)
    elif change == "tanh":
        _edit("3_Dense/config.json", activation_function="torch.nn.modules.activation.Tanh")(folder)
    elif change == "width":
        _edit("3_Dense/config.json", in_features=768)(folder)
    else:
        w = load_file(str(dense / "model.safetensors"))
        if change == "bf16":
            import torch
            from safetensors.torch import save_file as save_torch
            save_torch({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in w.items()}, str(dense / "model.safetensors"))
        else:
            save_file({**w, "linear.extra": np.zeros(3, np.float32)}, str(dense / "model.safetensors"))
    assert plain_bert.plain_folder(folder) is None
