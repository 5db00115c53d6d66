"""bf16 documents (PyTorch under CPU autocast): what auto picks and where, vectors close to fp32,
the same text the same vector in any batch, and an index that records bf16, searches with fp32
queries without importing torch, and gives an add what a fresh build gives."""
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ldr
from ldr.encode import runtime
from ldr.encode.dense import DenseEncoder, DenseSettings, OnnxDenseEncoder, load_dense
from ldr.encode.models import model_settings
from ldr.encode.sparse import SparseSettings, load_sparse
from ldr.errors import ConfigError
from conftest import search_in_child

pytest.importorskip("onnxruntime")

# bf16 is emulated (slow: ~5 s a thousand tokens) on CPUs without it in hardware: the texts are as
# short as the properties allow (the first one spans two 64-token passages)
TEXTS = ["The committee agreed to move the budget vote to Thursday after a long discussion about the "
         "remote control design and its battery life. " * 4,
         "short note", "", "A second document about the battery supplier and the launch date. " * 5]


def _cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1).clip(1e-12) / np.linalg.norm(b, axis=1).clip(1e-12)


def test_auto_picks_bf16_only_where_measured(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512f", "amx_bf16", "amx_tile"})
    assert runtime.choose("auto", "cpu", True, "x", bf16=True, auto_bf16=True) == "bf16"
    assert runtime.choose("auto", "cpu", True, "x", bf16=True) == "onnx"          # a model without a measured bf16 win
    assert runtime.choose("auto", "cpu", False, "x", bf16=True, auto_bf16=True) == "torch"  # extension
    assert runtime.choose(runtime.EXACT, "cpu", True, "x", bf16=True, auto_bf16=True) == "onnx"
    assert runtime.choose("bf16", "cuda", True, "x", bf16=True) == "torch"        # a GPU runs fp16
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})  # measured: 1.5x
    assert runtime.choose("auto", "cpu", True, "x", bf16=True, auto_bf16=True) == "bf16"
    for flags in ({"avx2", "avx512f", "avx512_vnni"}, {"avx2"}):     # no bf16 in hardware: ONNX fp32
        monkeypatch.setattr(runtime, "cpu_flags", lambda flags=flags: flags)
        assert runtime.choose("auto", "cpu", True, "x", bf16=True, auto_bf16=True) == "onnx"
    assert runtime.choose("bf16", "cpu", True, "x", bf16=True) == "bf16"          # asked: any CPU
    with pytest.raises(ConfigError, match="bf16 cannot run"):
        runtime.choose("bf16", "cpu", True, "a cross-encoder")


def test_bf16_vectors_are_close_to_fp32_and_do_not_depend_on_the_batch():
    # 64-token passages: the first text spans several, and each emulated pass costs less
    enc = load_dense(DenseSettings(backend="bf16", device="cpu", max_length=64))
    assert isinstance(enc, DenseEncoder) and enc.settings.backend == "bf16"
    assert enc.describe()["backend"]["name"] == "bf16"
    ref = load_dense(DenseSettings(backend="onnx", max_length=64)).encode_documents(TEXTS)[0]
    vecs, owner = enc.encode_documents(TEXTS)
    assert vecs.shape == ref.shape and _cos(vecs, ref).min() >= 0.999
    # every forward pass has a shape fixed by its rows' length (batching.fixed_shapes)
    for i, t in enumerate(TEXTS):
        alone = enc.encode_documents([t])[0]
        assert np.array_equal(alone, vecs[owner == i]), i
    q = enc.encode_queries(["budget vote", TEXTS[0]])
    assert np.array_equal(q[:1], enc.encode_queries(["budget vote"]))


def test_bf16_splade_when_asked_and_by_auto_on_amx(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512f", "amx_bf16", "amx_tile"})
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert load_sparse(SparseSettings(device="cpu")).describe()["backend"]["name"] == "bf16"
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"     # bounded kernel cache (memory)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert load_sparse(SparseSettings(device="cpu")).describe()["backend"]["name"] == "onnx"
    enc = load_sparse(SparseSettings(backend="bf16", device="cpu"))
    ref = load_sparse(SparseSettings(backend="onnx")).encode_documents(TEXTS[:2]).toarray()
    out = enc.encode_documents(TEXTS[:2]).toarray()
    assert enc.describe()["backend"]["name"] == "bf16" and _cos(out, ref).min() >= 0.999


def test_a_bf16_index_queries_in_fp32_without_torch_and_adds_like_a_fresh_build(tmp_path):
    # three short files of different lengths (bf16 is emulated, slowly, on CPUs without it)
    texts = {"licence.md": "# Software licence\n\nEither party may terminate the agreement with thirty days "
                           "written notice. Termination of the agreement ends every licence granted. " * 4,
             "meeting.txt": "The product meeting reviewed the remote control design and the battery supplier. " * 2,
             "bridge.txt": "The bridge inspection found corrosion on the bearing plates of the north span."}
    part, rest, whole = tmp_path / "part", tmp_path / "rest", tmp_path / "whole"
    for folder in (part, rest, whole):
        folder.mkdir()
    for name, text in texts.items():
        (rest if name == "bridge.txt" else part).joinpath(name).write_text(text)
        (whole / name).write_text(text)
    dense = DenseSettings(backend="bf16")      # SPLADE left out: its bf16 path has a test of its own
    fresh = ldr.Index.build(whole, tmp_path / "fresh", dense=dense, sparse=None)
    m = json.loads(sorted((tmp_path / "fresh").glob("manifest-*.json"))[-1].read_text())
    comp = m["components"]["dense"]
    assert comp["model"]["settings"]["backend"] == "bf16" and comp["model"]["backend"]["name"] == "bf16"
    # queries: ONNX (int8 on a CPU with VNNI, else fp32), not bf16 and not torch
    assert runtime.for_queries(model_settings(comp, DenseSettings, False, None), "dense").backend == runtime.QUERY_INT8
    assert isinstance(fresh.query_side("dense").encoder, OnnxDenseEncoder)
    child = search_in_child(tmp_path / "fresh", "termination of the agreement", mode="dense", absent=("torch",))
    # incremental = fresh: the add encodes on the recorded bf16 engine, rows of one length
    grown = ldr.Index.build(part, tmp_path / "grown", dense=dense, sparse=None)
    grown.add(rest)
    for mode in ("dense", "hybrid"):
        a = [(h.id, round(h.score, 6)) for h in fresh.search("termination of the agreement", k=10, mode=mode)]
        b = [(h.id, round(h.score, 6)) for h in grown.search("termination of the agreement", k=10, mode=mode)]
        assert a == b, mode
    assert child == [h.id for h in fresh.search("termination of the agreement", k=3, mode="dense")]


def test_auto_keeps_a_small_corpus_on_fp32_where_bf16_would_not_pay(monkeypatch):
    """bf16 starts PyTorch (seconds): below the dense model's break-even (runtime.bf16_min_chars)
    `auto` stays fp32 (ONNX); the documents read ahead to decide are all indexed, in order."""
    from ldr.corpus import Doc
    from ldr.index.build import BuildConfig

    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    small = [Doc(id=f"d{i}", text="word " * 1000) for i in range(5)]
    config, docs = BuildConfig().small_corpus(iter(small))
    assert config.dense.backend == runtime.EXACT and config.sparse.backend == runtime.EXACT
    assert [d.id for d in docs] == [d.id for d in small]
    big = (Doc(id=f"b{i}", text="word " * 20_000) for i in range(10))      # 1M characters, streamed
    config, docs = BuildConfig().small_corpus(big)
    assert config.dense.backend == "auto" and len(list(docs)) == 10
    # a document the build will skip (over --max-doc-mb, or empty) is not text to encode
    skipped = [Doc(id="huge", text="x" * (1 << 20)), Doc(id="blank", text=" " * 500_000), *small]
    config, docs = BuildConfig(max_doc_mb=0.5).small_corpus(iter(skipped))
    assert config.dense.backend == runtime.EXACT and len(list(docs)) == 7
    config, _ = BuildConfig(dense=DenseSettings(backend="onnx")).small_corpus(iter(small))
    assert config.dense.backend == "onnx" and config.sparse.backend == runtime.EXACT   # asked: kept
    # decided once over the whole corpus: a sharded build's shards, each below the rule, encode as the
    # whole does (issue 79: 14 transcripts sharded 4 ways were fp32 where the whole was bf16)
    whole, _ = BuildConfig().small_corpus(Doc(id=f"b{i}", text="word " * 20_000) for i in range(10))
    shard, _ = whole.small_corpus(iter(small))
    assert shard.dense.backend == "auto" and shard.sparse.backend == "auto"
    held, _ = BuildConfig().small_corpus(iter(small))
    assert held.small_corpus(iter(small))[0].dense.backend == runtime.EXACT
    # the break-even is the dense model's: MiniLM's measured 100k, any other model's 400k
    mid = [Doc(id=f"m{i}", text="word " * 10_000) for i in range(4)]                  # 200k characters
    minilm, _ = BuildConfig(dense=DenseSettings(model="all-MiniLM-L6-v2")).small_corpus(iter(mid))
    e5, _ = BuildConfig(dense=DenseSettings(model="e5-small-multilingual")).small_corpus(iter(mid))
    assert minilm.dense.backend == "auto" and e5.dense.backend == runtime.EXACT
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2"})                  # no bf16: nothing to hold
    assert BuildConfig().small_corpus(iter(small))[0].dense.backend == "auto"
    assert runtime.choose(runtime.EXACT, "cpu", True, "x", bf16=True, auto_bf16=True) == "onnx"


def test_a_sharded_build_encodes_in_the_engine_a_plain_build_chooses(monkeypatch, tmp_path):
    """Issue 79: on a CPU with bf16 in hardware, the whole corpus passes the bf16 rule where each of
    its shards alone would not; the engine is decided once, so `--shards 4` and a plain build of the
    same documents give the same vectors and the same scores (the bf16 engine forced here, as an
    AVX-512 BF16 CPU would choose it)."""
    from ldr.components import ENCODERS
    from ldr.sharded import ShardedIndex

    # `auto` resolves when a model loads, and loaded models are kept per process by their settings:
    # the forced engine must not serve this worker's later tests
    ENCODERS.clear()
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    try:
        _sharded_as_plain(monkeypatch, tmp_path, ShardedIndex)
    finally:
        ENCODERS.clear()


def _sharded_as_plain(monkeypatch, tmp_path, ShardedIndex):
    topics = ["battery supplier contract", "harbour tides and the lighthouse lamp", "sourdough starter feeding",
              "bearing plate corrosion", "licence termination notice", "annual revenue growth",
              "remote control design review", "committee budget vote"]
    docs = [ldr.Doc(f"d{i}", f"Notes on {t}. " + f"The meeting discussed {t} at length, point by point. " * 3)
            for i, t in enumerate(topics)]
    chars = sum(len(d.text) for d in docs)
    monkeypatch.setattr(runtime, "bf16_min_chars", lambda model: chars // 2)   # the whole over the rule, a quarter under
    one = ldr.Index.build(docs, tmp_path / "one", sparse=None)
    four = ShardedIndex.build(docs, tmp_path / "four", shards=4, sparse=None)
    engines, shards = set(), [p.parent for p in (tmp_path / "four").glob("shards/*/manifest-*.json")]
    assert len(set(shards)) == 4
    for folder in [tmp_path / "one"] + sorted(set(shards)):
        m = json.loads(sorted(folder.glob("manifest-*.json"))[-1].read_text())
        engines.add(m["components"]["dense"]["model"]["backend"]["name"])
    assert engines == {"bf16"}
    for mode in ("dense", "hybrid"):
        for q in topics[:4]:
            a, b = one.search(q, k=8, mode=mode), four.search(q, k=8, mode=mode)
            assert [h.id for h in a] == [h.id for h in b], (mode, q)
            assert all(abs(x.score - y.score) < 1e-5 for x, y in zip(a, b)), (mode, q)


def test_ray_workers_encode_in_the_precision_the_driver_resolves(monkeypatch):
    """Issue 79: a Ray build's CPU workers get `auto` pinned to the driver's precision, so a node
    with bf16 in hardware and one without encode one index alike (a GPU worker picks its own)."""
    from ldr.index.ray_build import worker_settings

    encoders = {"dense": DenseSettings(), "sparse": SparseSettings(), "asked": DenseSettings(backend="onnx")}
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    got = worker_settings(encoders, gpus=0)
    assert (got["dense"]["backend"], got["sparse"]["backend"], got["asked"]["backend"]) == ("bf16", "bf16", "onnx")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f"})
    got = worker_settings(encoders, gpus=0)
    assert (got["dense"]["backend"], got["sparse"]["backend"]) == (runtime.EXACT, runtime.EXACT)
    assert load_dense(DenseSettings(**got["dense"])).describe()["backend"]["name"] == "onnx"   # fp32, never int8
    assert worker_settings(encoders, gpus=1)["dense"]["backend"] == "auto"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 64), max_size=40), st.integers(1, 5))
def test_fixed_shapes_gives_each_row_one_shape_whatever_its_company(lengths, rows):
    """A row's pass depends on its own length alone: every call holds `rows` rows padded to one width
    (the window's, or the length rounded up to the bucket), so the same row gets the same answer
    alone, in any batch, in any order."""
    from ldr.encode.batching import fixed_shapes

    full, bucket, calls = 64, 8, []

    def forward(pieces, width):
        assert len(pieces) == rows and all(len(p) <= width for p in pieces)
        calls.append(width)
        return np.array([[sum(p), len(p), width] for p in pieces], dtype=np.float64)

    batch = [list(range(n)) for n in lengths]
    got = fixed_shapes(batch, forward, full, rows, bucket)
    if not batch:
        assert got is None and not calls
        return
    for row, n in zip(got.tolist(), lengths):
        width = full if n >= full else min(full, -(-n // bucket) * bucket)
        assert row == [n * (n - 1) / 2, n, width]
        assert row == fixed_shapes([list(range(n))], forward, full, rows, bucket)[0].tolist()
    assert set(calls) <= {min(full, -(-n // bucket) * bucket) for n in lengths} | {full}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 80), max_size=60), st.integers(1, 5))
def test_shape_groups_plans_the_fewest_passes_over_a_whole_call(lengths, rows):
    """Every row in one pass of one width and at most `rows` rows; per width, only the last pass
    is part copies, so a call runs the fewest passes its widths allow."""
    from ldr.encode.batching import fixed_width, shape_groups

    full, bucket = 64, 8
    groups = [g.tolist() for g in shape_groups(lengths, full, rows, bucket)]
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    widths = {}
    for g in groups:
        assert 1 <= len(g) <= rows and len({fixed_width(lengths[i], full, bucket) for i in g}) == 1
        widths.setdefault(fixed_width(lengths[g[0]], full, bucket), []).append(len(g))
    for sizes in widths.values():
        assert all(n == rows for n in sizes[:-1])


def test_a_bf16_call_runs_its_passes_full_and_its_vectors_as_before():
    """Planned over the call (not a token budget's batch at a time): as few passes as the widths
    allow, each text's vector the one it gets alone."""
    from ldr.encode.batching import BF16_ROWS, fixed_width

    enc = load_dense(DenseSettings(backend="bf16", device="cpu", max_length=64))
    texts = [f"note {i}: " + "the battery supplier and the launch date " * (i % 7) for i in range(40)]
    widths, seen = [], enc._forward_padded

    def counted(pieces, width=None):
        widths.append(width)
        return seen(pieces, width)

    enc._forward_padded = counted
    vecs, owner = enc.encode_documents(texts)
    pieces = enc.prepare_documents(texts)[1]
    need = {}
    for p in pieces:
        w = fixed_width(len(p), enc.window)
        need[w] = need.get(w, 0) + 1
    assert sorted(widths) == sorted(w for w, n in need.items() for _ in range(-(-n // BF16_ROWS)))
    for i in (0, 3, 39):
        assert np.array_equal(enc.encode_documents([texts[i]])[0], vecs[owner == i])
