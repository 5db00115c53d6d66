"""`--ray`: building and adding on a real local Ray cluster (ray.init(num_cpus=2)) gives the index a
local build gives; a worker killed mid-build is retried; a shard that keeps failing commits nothing."""
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import ray
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import IndexWriteError
from ldr.index.ray_build import RayOptions

from conftest import manifest_of
from test_living_index import assert_same, make_doc, results

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def cluster():
    """A real local Ray cluster for this module; ldr joins it instead of starting its own."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def config():
    from ldr.encode.dense import DenseSettings
    return ldr.BuildConfig(dense=DenseSettings(max_length=32, device="cpu"))


def corpus(n: int = 23) -> list[dict]:
    docs = [make_doc(i) for i in range(n)]
    # skipped as a local build skips them, and counted once across the workers
    docs.insert(5, {"id": "empty", "text": "   "})
    docs.insert(12, {"id": "big", "text": "x" * (1 << 20)})
    return docs


@pytest.fixture(scope="module")
def local(tmp_path_factory, config):
    path = tmp_path_factory.mktemp("local") / "idx"
    return path, ldr.Index.build(corpus(), path, config=_with(config, max_doc_mb=0.5))


def _with(config, **kw):
    import dataclasses
    return dataclasses.replace(config, **kw)


def doc_vectors(path: Path) -> dict:
    """{id: (dense vectors of its passages, {term: weight})} over the newest generation's segments."""
    import faiss

    from ldr.index.docstore import Docstore

    out = {}
    for seg in manifest_of(path)["segments"]:
        p = path / seg["path"]
        ids = Docstore(p, seg["docs"]).ids
        index = faiss.read_index(str(p / "dense" / "faiss.index"))
        vecs = index.reconstruct_n(0, index.ntotal)
        owner = np.load(p / "dense" / "owner.npy")
        ip, terms, weights = (np.load(p / "sparse" / f) for f in ("doc_indptr.npy", "doc_terms.npy", "doc_weights.npy"))
        for row, doc_id in enumerate(ids):
            out[doc_id] = (vecs[owner == row], dict(zip(terms[ip[row]:ip[row + 1]].tolist(),
                                                       weights[ip[row]:ip[row + 1]].tolist())))
    return out


def assert_same_index(a: Path, b: Path) -> None:
    va, vb = doc_vectors(a), doc_vectors(b)
    assert sorted(va) == sorted(vb)
    for doc_id in va:
        np.testing.assert_allclose(va[doc_id][0], vb[doc_id][0], atol=1e-5, err_msg=doc_id)
        assert va[doc_id][1].keys() == vb[doc_id][1].keys(), doc_id
        np.testing.assert_allclose(list(va[doc_id][1].values()), [vb[doc_id][1][t] for t in va[doc_id][1]],
                                   atol=1e-5, err_msg=doc_id)
    # BM25, dense, sparse and fused top-10 (tantivy is written by the driver from the same uids)
    assert_same(results(ldr.Index(b)), results(ldr.Index(a)), tol=1e-5)


def test_ray_build_equals_a_local_build(cluster, local, config, tmp_path):
    path = tmp_path / "idx"
    report = ldr.IngestReport()
    idx = ldr.Index.build(corpus(), path, config=_with(config, max_doc_mb=0.5), report=report,
                          ray=RayOptions(shard_docs=5))
    assert idx.report.indexed == 23 and dict(idx.report.skipped) == dict(local[1].report.skipped)
    assert idx.report.n_skipped == 2
    m = manifest_of(path)
    info = m["settings"]["build"]["ray"]
    assert info["shards"] == 5 and info["retried"] == [] and len(m["segments"]) == 5
    assert [s["docs"] for s in m["segments"]] == [5, 5, 5, 5, 3]
    assert m["ingest"] == manifest_of(local[0])["ingest"]
    assert m["components"]["dense"]["model"] == manifest_of(local[0])["components"]["dense"]["model"]
    assert not list((path / "segments").glob("ray-work-*"))      # the staging folder is gone
    assert_same_index(local[0], path)
    from ldr.index.check import check_index
    assert check_index(path)[1] == []


def test_a_killed_worker_is_retried_and_the_result_is_the_same(cluster, local, config, tmp_path):
    path = tmp_path / "idx"
    idx = ldr.Index.build(corpus(), path, config=_with(config, max_doc_mb=0.5),
                          ray=RayOptions(shard_docs=8, faults={"kill_shard": 1}))
    info = manifest_of(path)["settings"]["build"]["ray"]
    assert info["retried"] == [1]          # the worker process died (SIGKILL) on its first attempt
    assert idx.report.indexed == 23
    assert_same_index(local[0], path)


def test_a_failing_shard_leaves_the_previous_generation(cluster, local, config, tmp_path):
    import shutil
    path = tmp_path / "idx"
    shutil.copytree(local[0], path)
    before = results(ldr.Index(path))
    gen = ldr.Index(path).generation
    files = sorted(p.relative_to(path) for p in path.rglob("*") if "readers" not in p.parts)
    with pytest.raises(IndexWriteError, match=r"shard 1 \(documents 'n002' … 'n003'\).*injected failure"):
        ldr.Index(path).add([{"id": f"n{i:03d}", "text": f"new document {i} storm"} for i in range(6)],
                            ray=RayOptions(shard_docs=2, faults={"fail_shard": 1}))
    assert ldr.Index(path).generation == gen
    assert sorted(p.relative_to(path) for p in path.rglob("*") if "readers" not in p.parts) == files
    assert_same(results(ldr.Index(path)), before, tol=0)


def test_a_shard_that_kills_its_worker_every_time_fails_naming_it(cluster, local, config, tmp_path):
    import shutil
    path = tmp_path / "idx"
    shutil.copytree(local[0], path)
    gen = ldr.Index(path).generation
    with pytest.raises(IndexWriteError, match=r"shard 0 .* failed on 2 attempts \(its worker died each time\)"):
        ldr.Index(path).add([{"id": f"n{i:03d}", "text": f"new document {i}"} for i in range(3)],
                            ray=RayOptions(retries=1, faults={"kill_shard": 0, "kill_always": True}))
    assert ldr.Index(path).generation == gen
    assert not list((path / "segments").glob("ray-work-*"))


def test_cli_add_on_a_running_cluster_replaces_and_adds(cluster, local, tmp_path):
    import shutil
    path = tmp_path / "idx"
    shutil.copytree(local[0], path)
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps(d) + "\n" for d in
                           [make_doc(3, version=1), make_doc(40), {"id": "blank", "text": ""}]))
    r = CliRunner().invoke(main, ["add", str(new), "-i", str(path), "--ray", cluster, "--ray-workers", "2",
                                  "--ray-cpus-per-worker", "1", "--ray-shard-docs", "1", "-q"])
    assert r.exit_code == 0, r.output
    assert "encoded on Ray: 2 workers x 1 CPUs on 1 node, 2 shards" in r.output
    assert "1 added, 1 replaced, 1 skipped" in r.output
    idx = ldr.Index(path)
    assert len(idx) == 24
    assert idx.document("d003").text.endswith("v1") and idx.document("d040").id == "d040"
    hist = manifest_of(path)["history"][-1]
    assert hist["op"] == "add" and hist["ray"]["shards"] == 2


def test_ray_options_without_ray_flag_and_without_the_extra(tmp_path, sample_corpus):
    r = CliRunner().invoke(main, ["index", str(sample_corpus), "-o", str(tmp_path / "i"), "--ray-workers", "2"])
    assert r.exit_code != 0 and "--ray-workers only apply with --ray" in r.output
    # a real interpreter where `import ray` fails: a clear error naming the extra, no traceback
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(textwrap.dedent("""
        import builtins
        _real = builtins.__import__
        def _imp(name, *a, **k):
            if name == "ray" or name.startswith("ray."):
                raise ImportError("No module named 'ray'")
            return _real(name, *a, **k)
        builtins.__import__ = _imp
    """))
    env = {**os.environ, "PYTHONPATH": str(shim)}
    p = subprocess.run([sys.executable, "-m", "ldr.cli", "index", str(sample_corpus), "-o", str(tmp_path / "j"), "--ray",
                        "-q", "--dense", "none", "--sparse", "none"], capture_output=True, text=True, env=env)
    assert p.returncode != 0
    assert "pip install 'ldr[ray]'" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "j").exists()


def test_workers_import_the_drivers_ldr_whatever_folder_it_runs_from(tmp_path):
    """Ray puts the driver's working directory first on each worker's sys.path: run from a folder
    holding another `ldr` (an old clone), the workers must still import the driver's package."""
    (tmp_path / "ldr").mkdir()
    (tmp_path / "ldr" / "__init__.py").write_text("raise ImportError('the decoy ldr was imported')\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"d{i}.txt").write_text(f"document {i} about herons")
    script = Path(sys.executable).parent / "ldr"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    r = subprocess.run([str(script), "index", "corpus", "-o", "idx", "--dense", "none", "--sparse", "none", "--ray"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "decoy" not in r.stderr and len(ldr.open(tmp_path / "idx")) == 3


def test_a_colbert_index_built_on_ray_scores_as_a_local_build(cluster, tmp_path):
    """The colbert kind goes through the Ray build like the others (its settings travel to the
    workers as a dict); shards give the same MaxSim scores as one local segment."""
    from tiny_models import make
    from ldr.encode.colbert import ColbertSettings

    model = str(make("bert", tmp_path / "m"))
    docs = [{"id": f"d{i:02d}", "text": f"heron marsh tide {i} " * (3 + i % 7)} for i in range(12)]
    kw = dict(dense=None, sparse=None, components={"colbert": ColbertSettings(model=model)}, progress=False)
    local = ldr.Index.build(docs, tmp_path / "local", **kw)
    ray_idx = ldr.Index.build(docs, tmp_path / "ray", ray=RayOptions(shard_docs=4), **kw)
    assert len(manifest_of(tmp_path / "ray")["segments"]) == 3
    for q in ("heron marsh", "tide 7"):
        a = [(h.id, round(h.score, 4)) for h in local.search(q, k=12, mode="colbert")]
        b = [(h.id, round(h.score, 4)) for h in ray_idx.search(q, k=12, mode="colbert")]
        assert a == b


def test_the_shards_of_a_sharded_index_build_in_parallel_on_ray(cluster, config, tmp_path):
    """`ldr index --shards N --ray`: each shard a Ray task; the index answers as one built here."""
    from ldr.sharded import ShardedIndex

    docs = corpus()
    cfg = _with(config, bm25="native", dense=None, sparse=None)     # the tasks run the local build code
    on_ray = ShardedIndex.build(docs, tmp_path / "ray", shards=3, config=cfg,
                                ray=RayOptions())
    here = ShardedIndex.build(docs, tmp_path / "here", shards=3, config=cfg)
    assert on_ray.cluster["history"][-1]["ray"]["shards"] == 3 and len(on_ray) == len(here)
    for q in ("alpha report", "a note on rivers", "document 7"):
        assert [(h.id, round(h.score, 6)) for h in on_ray.search(q)] == [(h.id, round(h.score, 6)) for h in here.search(q)]


def test_ray_in_the_same_process_as_lucene_keeps_the_jvm_alive(tmp_path):
    """Ray's init and shutdown replace the fault handlers the JVM runs on (its compiled code faults on
    purpose): the next Lucene call used to kill the process (exit 139) when a safepoint fell in it. Run as
    a user would, in a child; that each Lucene call puts the JVM's handlers back is checked outright."""
    pytest.importorskip("pyserini")
    script = textwrap.dedent(f"""
        import logging, ray, ldr
        from ldr import crash_signals
        docs = [{{"id": f"d{{i}}", "text": " ".join(["heron marsh reed tide"] * 50) + f" w{{i}}"}} for i in range(300)]
        ldr.Index.build(docs, {str(tmp_path / 'a')!r}, bm25="lucene", dense=None, sparse=None)
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        ray.shutdown()
        print("replaced", not crash_signals.jvm_handlers_intact())
        idx = ldr.Index.build(docs, {str(tmp_path / 'b')!r}, bm25="lucene", dense=None, sparse=None)
        print("intact", crash_signals.jvm_handlers_intact(), idx.search("w7 heron", k=1, window_weight=0)[0].id)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "replaced True" in r.stdout and "intact True d7" in r.stdout
