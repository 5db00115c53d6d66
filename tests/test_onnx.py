"""ONNX Runtime backend: same outputs as PyTorch on the packaged models, the export cache, the
backend choice and its errors, and an index that records its backend and searches without torch."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ldr.encode import onnx_export, runtime
from ldr.encode.dense import DenseEncoder, DenseSettings, OnnxDenseEncoder, load_dense
from ldr.encode.sparse import OnnxSparseEncoder, SparseEncoder, SparseSettings, load_sparse
from ldr.errors import ConfigError, ModelError
from conftest import search_in_child

pytest.importorskip("onnxruntime")

TEXTS = ["The committee agreed to move the budget vote to Thursday after a long discussion about the "
         "remote control design and its battery life. " * 30,
         "short note", ""]


def _cos(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True).clip(1e-12)
    b = b / np.linalg.norm(b, axis=1, keepdims=True).clip(1e-12)
    return (a * b).sum(1)


@pytest.mark.parametrize("strategy", ["maxp", "pcw", "truncate"])
def test_onnx_dense_matches_torch(strategy):
    torch_enc = DenseEncoder(DenseSettings(strategy=strategy, max_length=128, device="cpu"))
    ort_enc = load_dense(DenseSettings(strategy=strategy, max_length=128, backend="onnx"))
    assert isinstance(ort_enc, OnnxDenseEncoder) and ort_enc.settings.backend == "onnx"
    v1, o1, s1 = torch_enc.encode_documents(TEXTS, spans=True)
    v2, o2, s2 = ort_enc.encode_documents(TEXTS, spans=True)
    assert (o1 == o2).all() and (s1 == s2).all()
    assert _cos(v1, v2).min() >= 0.9999
    q = ["what did the committee decide about the budget"]
    assert _cos(torch_enc.encode_queries(q), ort_enc.encode_queries(q)).min() >= 0.9999
    assert ort_enc.window == torch_enc.window and ort_enc.dim == torch_enc.dim
    # the token embedding table is beside the graph, read memory-mapped (the graph: the layers only)
    m = ort_enc.model
    assert m.inputs[0] == "inputs_embeds" and isinstance(m.embeddings, np.memmap)
    assert (m.folder / "model.onnx").stat().st_size < (m.folder / "word_embeddings.npy").stat().st_size


def test_onnx_int8_is_close_and_recorded():
    ref = DenseEncoder(DenseSettings(strategy="maxp", device="cpu")).encode_documents(TEXTS)[0]
    enc = load_dense(DenseSettings(backend="onnx-int8"))
    assert _cos(ref, enc.encode_documents(TEXTS)[0]).min() > 0.98
    q = enc.describe()["backend"]["int8"]
    assert q["isa"] == runtime.quantization_config()["isa"] and q["per_channel"] is True
    # the first layer's MatMuls stay fp32 (int8 there lost passkeys), every later one is int8
    import onnx
    nodes = onnx.load(str(enc.model.folder / "model.onnx")).graph.node
    fp32 = {n.name for n in nodes if n.op_type == "MatMul" and "/layer." in n.name}
    assert q["fp32_layers"] == [0] and fp32 and all("/layer.0/" in n for n in fp32)
    assert any(n.op_type == "MatMulInteger" for n in nodes)
    # activations are quantised per input tensor: rows run alone, so a text's vector does not
    # depend on what it is batched with (an add gives what a fresh build gives)
    alone = enc.encode_documents(TEXTS[:1])[0]
    assert enc.model.per_row and np.array_equal(alone, enc.encode_documents(TEXTS)[0][:len(alone)])
    assert np.array_equal(enc.encode_queries(["budget"]), enc.encode_queries(["budget", TEXTS[0]])[:1])


def test_int8_quantises_the_cached_fp32_export(tmp_path, monkeypatch):
    """An int8 export is the fp32 export's graph quantised: from a cached fp32 export, no torch
    and no second trace (the graph is byte for byte the one a direct int8 export writes: checked by
    hand for MiniLM and SPLADE, bench/README.md)."""
    import shutil

    import onnx

    from ldr.encode.models import resolve
    path = resolve("splade-tiny")[0]
    fp32 = onnx_export.exported("splade", path)                 # the suite's cache
    monkeypatch.setenv("LDR_CACHE_DIR", str(tmp_path / "cache"))
    shutil.copytree(fp32, tmp_path / "cache" / "onnx" / fp32.name)
    calls = []
    real = onnx_export.isolated
    monkeypatch.setattr(onnx_export, "isolated", lambda *a: calls.append(a[-1]) or real(*a))
    q = onnx_export.exported("splade", path, int8=True)
    assert calls == [tmp_path / "cache" / "onnx" / fp32.name]   # one child, quantising the fp32 export
    a, b = (json.loads((f / "meta.json").read_text()) for f in (fp32, q))
    assert b.pop("export")["int8"] == runtime.quantization_config() and a.pop("export")["int8"] is None and a == b
    assert all((fp32 / f).read_bytes() == (q / f).read_bytes() for f in ("tokenizer.json", "head_weight.npy"))
    assert any(n.op_type == "MatMulInteger" for n in onnx.load(str(q / "model.onnx")).graph.node)
    ref = load_sparse(SparseSettings(top_k=None, backend="onnx")).encode_documents(TEXTS).toarray()
    got = load_sparse(SparseSettings(top_k=None, backend="onnx-int8")).encode_documents(TEXTS).toarray()
    assert _cos(ref[:2], got[:2]).min() > 0.95 and calls == calls[:1]      # loaded from the cache


def test_onnx_splade_matches_torch():
    t = SparseEncoder(SparseSettings(device="cpu", top_k=None))
    o = load_sparse(SparseSettings(top_k=None, backend="onnx"))     # auto is bf16 on AMX CPUs
    assert isinstance(o, OnnxSparseEncoder)
    a, b = t.encode_documents(TEXTS).toarray(), o.encode_documents(TEXTS).toarray()
    assert np.abs(a - b).max() < 1e-4 and ((a > 0) == (b > 0)).all()
    assert o.vocabulary() == t.vocabulary()
    q = ["budget vote"]
    assert np.abs(t.encode_queries(q).toarray() - o.encode_queries(q).toarray()).max() < 1e-4


def test_tokenizer_without_transformers_gives_the_same_ids():
    t = DenseEncoder(DenseSettings(device="cpu"))
    o = load_dense(DenseSettings())
    for text in TEXTS + ["Ünïcödé, CAPS and   spaces\n\ttabs 1,234.5"]:
        assert t.tokenizer(text, add_special_tokens=False)["input_ids"] == \
            o.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert o.tokenizer.pad_token_id == t.tokenizer.pad_token_id


def test_the_export_runs_in_a_child_into_a_relative_cache_and_is_reused(tmp_path, monkeypatch):
    """torch and the optimizer's copies of the graph leave with the child (the build's process
    never imports torch for a cold cache); a relative LDR_CACHE_DIR holds (the export's fusion step
    changes directory); two processes that load it at once export it once (the other waits for
    it); the next load reuses the export and writes nothing."""
    script = (
        "import sys, json; from ldr.encode.sparse import load_sparse, SparseSettings; "
        "enc = load_sparse(SparseSettings(backend='onnx')); "
        "print(json.dumps({'torch': 'torch' in sys.modules, 'vocab': enc.vocab_size}))")
    env = dict(os.environ, LDR_CACHE_DIR="cache")
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    for out, _ in outs:
        assert json.loads(out.strip().splitlines()[-1]) == {"torch": False, "vocab": 30522}
    # one export: the other process waited for it, or found it done
    assert sum(err.count("to ONNX Runtime once") for _, err in outs) == 1, [err[-2000:] for _, err in outs]
    first, = (tmp_path / "cache" / "onnx").glob("splade-*")
    assert (first / "model.onnx").is_file() and not list((tmp_path / "cache" / "onnx").glob(".*"))  # none half-written

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LDR_CACHE_DIR", "cache")
    from ldr.encode.models import resolve
    path = resolve("splade-tiny")[0]
    stamp = (first / "model.onnx").stat().st_mtime_ns
    calls = []
    monkeypatch.setattr(onnx_export, "_export", lambda *a: calls.append(a))
    monkeypatch.setattr(onnx_export, "isolated", lambda *a: calls.append(a))
    again = onnx_export.exported("splade", path)
    assert again.resolve() == first.resolve() and not calls and (first / "model.onnx").stat().st_mtime_ns == stamp
    # int8 is another cache entry, keyed by the quantisation settings
    assert onnx_export.export_key("splade", Path(path), True)[0] != onnx_export.export_key("splade", Path(path), False)[0]


def test_the_exports_of_a_process_fork_from_one_zygote(tmp_path, monkeypatch):
    """Each export is a child forked from one warm Python per process (export_zygote): a second
    export starts no Python of its own; a zygote whose parent closes the pipe (exit, kill -9)
    leaves, and the next export starts another."""
    from tiny_models import make

    from ldr.encode import export_zygote

    if not export_zygote.FORK:
        pytest.skip("exports fork from a zygote on Linux only")
    monkeypatch.setenv("LDR_CACHE_DIR", str(tmp_path / "cache"))
    first = onnx_export.exported("cross", make("bert-classifier", tmp_path / "a"))
    zygote = export_zygote._zygote
    assert zygote is not None and zygote.proc.poll() is None
    second = onnx_export.exported("cross", make("bert-classifier", tmp_path / "b", num_labels=2))
    assert export_zygote._zygote is zygote and second != first and (second / "model.onnx").is_file()
    # a variable read at import time replaces it; one read when used (ray.init sets this one) does not
    assert export_zygote._import_env({"PYTHONBREAKPOINT": "ray.util.rpdb._driver_set_trace", "PYTHONPATH": "p",
                                      "HOME": "/root"}) == {"PYTHONPATH": "p"}
    zygote.proc.stdin.close()
    assert zygote.proc.wait(timeout=30) == 0
    third = onnx_export.exported("cross", make("bert-classifier", tmp_path / "c", num_labels=3))
    assert (third / "model.onnx").is_file() and export_zygote._zygote is not zygote
    assert export_zygote._zygote.proc.poll() is None
    # where fork is not safe (macOS) or not there (Windows), each export is a fresh child
    monkeypatch.setattr(export_zygote, "FORK", False)
    monkeypatch.setattr(export_zygote, "_zygote", None)
    settings = json.dumps({"kind": "cross", "weights": "x", "int8": {"per_channel": True}})
    rc, err = export_zygote.run(["cross", str(tmp_path / "a"), str(tmp_path / "out"), settings, "0", "",
                                 str(tmp_path / "no-export")], dict(os.environ))
    assert rc == 1 and "no-export/meta.json" in err.splitlines()[-1] and export_zygote._zygote is None


def test_a_model_the_child_cannot_export_is_a_model_error(tmp_path):
    """A failed export names why, not a traceback."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (broken / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(onnx_export.ExportFailed, match="broken .splade. to ONNX failed: .*header") as failed:
        onnx_export.isolated("splade", broken, tmp_path / "out", {"int8": None}, False)
    # found before a child starts; a failure in the child itself comes back as its own last line
    (tmp_path / "out").mkdir()
    with pytest.raises(onnx_export.ExportFailed, match=r"broken \(splade\) to ONNX failed: .*meta.json"):
        onnx_export.isolated("splade", broken, tmp_path / "out", {"int8": None}, False, base=tmp_path / "no-export")
    # auto falls back to PyTorch on it; an explicit ONNX backend says what failed (the child's own
    # failure, raised again: another child would fail alike, seconds later)
    from ldr.encode.runtime import with_fallback

    def export(s, b):
        raise failed.value

    settings = SparseSettings(model=str(broken))
    with pytest.raises(ModelError, match="exporting .* failed .*use --backend torch"):
        settings.backend = "onnx"
        with_fallback(settings, "onnx", export, None)
    settings.backend = "auto"
    assert with_fallback(settings, "onnx", export, lambda s: "torch encoder") == "torch encoder"


def test_unwritable_cache_exports_to_a_temporary_folder(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LDR_CACHE_DIR", str(blocker / "cache"))   # cannot be created
    from ldr.encode.models import resolve
    folder = onnx_export.exported("splade", resolve("splade-tiny")[0])
    assert (folder / "model.onnx").is_file()
    assert "not writable" in caplog.text and "LDR_CACHE_DIR" in caplog.text


def test_backend_choice_and_errors(monkeypatch):
    assert runtime.choose("auto", "cpu", True, "x") == "onnx"
    assert runtime.choose("auto", "cpu", False, "x") == "torch"       # an extension strategy
    assert runtime.choose("onnx", "cuda", True, "x") == "torch"       # GPUs stay on PyTorch
    with pytest.raises(ConfigError, match="cannot run the gp strategy"):
        load_dense(DenseSettings(strategy="gp", backend="onnx", device="cpu"))
    assert isinstance(load_dense(DenseSettings(strategy="gp", device="cpu", target_length=1024)), DenseEncoder)
    with pytest.raises(ConfigError, match="unknown backend"):
        runtime.choose("tensorrt", "cpu", True, "x")
    monkeypatch.setattr(runtime, "onnxruntime_available", lambda: False)
    with pytest.raises(ModelError, match=r"ldr\[onnx\]"):
        load_dense(DenseSettings(backend="onnx"))
    assert runtime.choose("auto", "cpu", True, "x") == "torch"        # auto falls back quietly


def test_missing_onnxruntime_is_a_clear_cli_error(tmp_path, sample_corpus):
    # a real interpreter where `import onnxruntime` fails, as on a machine without the extra
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "onnxruntime.py").write_text("raise ImportError('No module named onnxruntime')\n")
    (shim / "sitecustomize.py").write_text(
        "import importlib.util, sys\n_f = importlib.util.find_spec\n"
        "def find_spec(name, *a, **k):\n    return None if name == 'onnxruntime' else _f(name, *a, **k)\n"
        "importlib.util.find_spec = find_spec\n")
    env = dict(os.environ, PYTHONPATH=f"{shim}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([sys.executable, "-m", "ldr.cli", "index", str(sample_corpus), "-o", str(tmp_path / "i"),
                        "--backend", "onnx", "-q"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "ldr[onnx]" in r.stderr and "Traceback" not in r.stderr


def test_index_records_backend_and_searches_without_torch(tmp_path, sample_corpus):
    import ldr
    idx = ldr.Index.build(sample_corpus, tmp_path / "i")
    m = json.loads(sorted((tmp_path / "i").glob("manifest-*.json"))[-1].read_text())
    # auto: ONNX fp32 for a corpus this small on every CPU (bf16 where the CPU has it in hardware and
    # the corpus pays for PyTorch's start, test_bf16.py); queries on ONNX either way
    assert m["components"]["dense"]["model"]["settings"]["backend"] == "onnx"
    assert m["components"]["sparse"]["model"]["backend"]["name"] == "onnx"
    assert {"feed", "encode", "tokenise", "wait"} <= set(m["settings"]["build"]["stages"])
    expected = [h.id for h in idx.search("termination of the agreement", k=3)]
    assert search_in_child(tmp_path / "i", "termination of the agreement") == expected
    # an index built on torch answers the same on onnx: the vectors agree
    torch_idx = ldr.Index.build(sample_corpus, tmp_path / "t", dense=DenseSettings(backend="torch"),
                                sparse=SparseSettings(backend="torch"))
    assert [h.id for h in torch_idx.search("termination of the agreement", k=3)] == expected


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads RSS from /proc")
def test_a_writer_hands_back_the_arena_of_its_largest_batch(tmp_path, sample_corpus, monkeypatch):
    """ONNX Runtime keeps a batch's activations in its arena for the session's life: after a write
    each ONNX encoder shrinks it (the model's weights stay)."""
    import ldr
    enc = load_dense(DenseSettings(backend="onnx"))
    ids = np.full((8, 512), 2000, dtype=np.int64)
    enc.encode_queries(["the session loaded"])     # (loaded on a thread)
    before = _rss_mb()
    enc.model.run(ids, np.ones_like(ids))
    grown = _rss_mb()
    enc.release_memory()
    assert grown - before > 100 and _rss_mb() < before + (grown - before) / 3, (before, grown, _rss_mb())
    assert enc.encode_queries(["still answers"]).shape == (1, 384)
    # a build asks each ONNX encoder once its part is written
    released = []
    monkeypatch.setattr(runtime.OrtModel, "release_memory", lambda self: released.append(self.meta["kind"]))
    ldr.Index.build([{"id": "a", "text": "the keeper relit the lamp"}], tmp_path / "i",
                    dense=DenseSettings(backend="onnx"), sparse=SparseSettings(backend="onnx"))
    assert sorted(set(released)) == ["dense", "splade"]


def test_an_index_without_a_recorded_backend_never_queries_int8(monkeypatch):
    # written by PyTorch before backends were recorded: queries must give the same vectors
    from ldr.encode.models import model_settings
    monkeypatch.setattr(runtime, "CPU_DEFAULT", "onnx-int8")
    comp = {"model": {"name": "m", "settings": {"model": "all-MiniLM-L6-v2", "strategy": "maxp"}}}
    s = model_settings(comp, DenseSettings, False, None)
    assert s.backend == runtime.EXACT
    assert runtime.choose(s.backend, "cpu", True, "x") == "onnx"
    assert runtime.choose("auto", "cpu", True, "x") == "onnx-int8"
    assert runtime.choose(s.backend, "cpu", False, "x") == "torch"
    assert runtime.for_queries(s, "dense").backend == runtime.EXACT


def test_a_dense_query_runs_int8_where_the_cpu_has_vnni_and_the_documents_were_encoded_on_it(monkeypatch):
    for recorded in ("auto", "bf16", "onnx", None):
        assert runtime.for_queries(DenseSettings(backend=recorded), "dense").backend == runtime.QUERY_INT8
    assert runtime.for_queries(DenseSettings(backend="torch"), "dense").backend == "torch"   # built on PyTorch
    assert runtime.for_queries(DenseSettings(backend="onnx-int8"), "dense").backend == "onnx-int8"
    assert runtime.for_queries(SparseSettings(backend="bf16"), "sparse").backend == runtime.EXACT   # measured: dense
    assert runtime.for_queries(SparseSettings(backend="onnx"), "sparse").backend == "onnx"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_vnni"})
    assert runtime.choose(runtime.QUERY_INT8, "cpu", True, "x") == "onnx-int8"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx_vnni"})
    assert runtime.choose(runtime.QUERY_INT8, "cpu", True, "x") == "onnx-int8"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f"})     # int8 without VNNI: fp32
    assert runtime.choose(runtime.QUERY_INT8, "cpu", True, "x") == "onnx"
    assert runtime.choose(runtime.QUERY_INT8, "cpu", False, "x") == "torch"    # a strategy that patches PyTorch
    assert runtime.choose(runtime.QUERY_INT8, "cuda", True, "x") == "torch"


def test_an_index_answers_its_queries_on_the_engine_its_cpu_gives(tmp_path):
    import ldr
    idx = ldr.Index.build([{"id": "a", "text": "the keeper relit the lamp at the harbour"},
                           {"id": "b", "text": "the bridge bearings were corroded"}], tmp_path / "i", sparse=None)
    enc = idx.query_side("dense").encoder
    assert isinstance(enc, OnnxDenseEncoder)
    assert enc.describe()["backend"]["name"] == ("onnx-int8" if runtime.vnni() else "onnx")
    assert [h.id for h in idx.search("lamp keeper", k=1, mode="dense")] == ["a"]
    # the build exported the graph its queries run on: the first search exports nothing
    key, _ = onnx_export.export_key("dense", Path(enc.path), runtime.vnni())
    assert (onnx_export.cache_root() / "onnx" / f"dense-{key}" / "model.onnx").is_file()


def test_ldr_query_int8_0_keeps_queries_fp32_on_every_cpu(tmp_path, monkeypatch):
    """The same query vectors with or without VNNI, for whoever compares runs across machines."""
    import ldr
    docs = [{"id": "a", "text": "the keeper relit the lamp at the harbour"}]
    ldr.Index.build(docs, tmp_path / "i", sparse=None, bm25=None)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_vnni"})
    assert ldr.open(tmp_path / "i").query_side("dense").encoder.describe()["backend"]["name"] == "onnx-int8"
    monkeypatch.setenv("LDR_QUERY_INT8", "0")
    enc = ldr.open(tmp_path / "i").query_side("dense").encoder
    assert enc.describe()["backend"]["name"] == "onnx"
    np.testing.assert_array_equal(enc.encode_queries(["lamp keeper"]),
                                  load_dense(DenseSettings(backend="onnx")).encode_queries(["lamp keeper"]))


def test_a_pre_exported_dense_folder_runs_as_it_is(tmp_path):
    """Models as data: ldr's own export of MiniLM copied to a folder of model.onnx, its token
    embedding table + tokenizer files (+ the sentence-transformers configs) loads without torch,
    giving the same vectors; without the table it is a clear error."""
    import shutil

    from ldr.encode.dense_prebuilt import PrebuiltDenseEncoder
    from ldr.encode.models import packaged_path

    ort_enc = load_dense(DenseSettings(strategy="maxp", max_length=128, backend="onnx"))
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(ort_enc.model.folder / "model.onnx", folder / "model.onnx")
    src = packaged_path("all-minilm-l6-v2")
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin")):
            shutil.copy(f, folder / f.name)
    shutil.copytree(src / "1_Pooling", folder / "1_Pooling")
    from ldr.errors import ConfigError, ModelError
    with pytest.raises(ModelError, match="takes token embeddings.*word_embeddings.npy.*copy it with model.onnx"):
        load_dense(DenseSettings(model=str(folder), strategy="maxp", max_length=128)).encode_documents(TEXTS)
    shutil.copy(ort_enc.model.folder / "word_embeddings.npy", folder / "word_embeddings.npy")
    pre = load_dense(DenseSettings(model=str(folder), strategy="maxp", max_length=128))
    assert isinstance(pre, PrebuiltDenseEncoder) and pre.pooling == "mean"
    v1, o1, _ = ort_enc.encode_documents(TEXTS, spans=True)
    v2, o2, _ = pre.encode_documents(TEXTS, spans=True)
    assert (o1 == o2).all() and _cos(v1, v2).min() >= 0.9999
    with pytest.raises(ConfigError, match="ONNX model folder"):
        load_dense(DenseSettings(model=str(folder), strategy="pi"))


def test_the_packaged_bge_small():
    from ldr.encode.models import packaged_path

    if packaged_path("bge-small") is None:
        pytest.skip("ldr[models] is not installed")
    enc = load_dense(DenseSettings(model="bge-small"))
    assert enc.pooling == "cls" and enc.query_prefix.startswith("Represent this sentence") and enc.dim == 384
    q = enc.encode_queries(["how many people live in berlin"])
    d = enc.encode_documents(["Berlin has a population of 3.5 million people.", "The tide comes in twice a day."])[0]
    sims = (q @ d.T)[0]
    assert sims[0] > sims[1] + 0.2


def test_a_killed_builds_work_folder_is_removed_by_the_next_build(tmp_path, monkeypatch):
    """Issue 57 item 11: a SIGKILLed export leaves its `.kind-key-XXXX` work folder (87 MB for
    MiniLM); the next build of that folder, holding its lock, removes it."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap

    from ldr.encode.cache import build_once

    monkeypatch.setenv("LDR_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "onnx" / "dense-k1"
    script = textwrap.dedent(f"""
        import os, signal, pathlib
        from ldr.encode.cache import build_once
        def build(work):
            (work / "model.onnx").write_bytes(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGKILL)        # killed mid-build
        build_once(pathlib.Path({str(folder)!r}), "meta.json", build, lambda e: None)
    """)
    env = {**os.environ, "LDR_CACHE_DIR": str(tmp_path / "cache")}
    assert subprocess.run([sys.executable, "-c", script], env=env).returncode == -signal.SIGKILL
    assert len(list(folder.parent.glob(".dense-k1-*"))) == 1
    build_once(folder, "meta.json", lambda work: (work / "meta.json").write_text("{}"), lambda e: None)
    assert (folder / "meta.json").is_file() and list(folder.parent.glob(".dense-k1-*")) == []


def test_auto_runs_on_pytorch_when_the_cache_cannot_be_written_and_says_so_once(tmp_path, monkeypatch, caplog):
    """Issue 57 item 11: with an unwritable cache, auto does not export per process (19 s and
    87 MB in $TMPDIR each time): it runs on PyTorch, warns once, and leaves nothing behind."""
    import glob
    import logging
    import tempfile

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LDR_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(onnx_export, "_SAID", set())
    caplog.set_level(logging.WARNING)
    recorded = DenseSettings(device="cpu", strategy="truncate", backend="onnx")
    recorded.from_index = True          # as an index's manifest gives it: not the user's request
    encoders = [load_dense(DenseSettings(device="cpu", strategy="truncate")), load_dense(recorded)]
    assert all(isinstance(e, DenseEncoder) for e in encoders)           # PyTorch
    assert caplog.text.count("not writable") == 1 and "PyTorch" in caplog.text
    assert "failed" not in caplog.text and not glob.glob(str(tmp_path / "tmp" / "ldr-onnx-*"))
    q = encoders[0].encode_queries(["bridge bearings"])
    assert q.shape == (1, 384)
