"""`--ray`: building and adding on a real local Ray cluster (two 1-CPU nodes) gives the index a
local build gives; a worker killed mid-build is retried; a shard that keeps failing commits nothing."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import IndexWriteError
from ldr.index.ray_build import RayOptions

from conftest import manifest_of
from test_living_index import assert_same, make_doc, results

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    """A real local Ray cluster (conftest: two 1-CPU nodes); ldr joins it instead of starting its own."""
    return ray_cluster


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


@pytest.fixture(scope="module")
def plain(tmp_path_factory, config):
    """The same corpus, BM25 only: a failing shard or a CLI add is about the writer, and workers that
    load no encoder start in a second instead of importing torch."""
    path = tmp_path_factory.mktemp("plain") / "idx"
    ldr.Index.build(corpus(), path, config=_with(config, max_doc_mb=0.5, dense=None, sparse=None))
    return path


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


def test_ray_build_equals_a_local_build_even_when_a_worker_is_killed(cluster, local, config, tmp_path, monkeypatch):
    """Five shards on Ray, the worker of shard 1 killed (SIGKILL) on its first attempt: it is retried and
    the index is the one a local build gives, vector for vector and hit for hit. The bar moves with
    what the workers report, a retried shard counted once."""
    from ldr.index import ray_worker
    polled, totals = [], ray_worker.progress_totals
    monkeypatch.setattr(ray_worker, "progress_totals", lambda staging: polled.append(totals(staging)) or polled[-1])
    path = tmp_path / "idx"
    report = ldr.IngestReport()
    idx = ldr.Index.build(corpus(), path, config=_with(config, max_doc_mb=0.5), report=report,
                          ray=RayOptions(shard_docs=5, faults={"kill_shard": 1}))
    assert idx.report.indexed == 23 and dict(idx.report.skipped) == dict(local[1].report.skipped)
    assert idx.report.n_skipped == 2
    assert any(d > 0 for d, _ in polled) and max(d for d, _ in polled) <= 23, polled
    m = manifest_of(path)
    info = m["settings"]["build"]["ray"]
    assert info["shards"] == 5 and info["retried"] == [1] and len(m["segments"]) == 5
    assert [s["docs"] for s in m["segments"]] == [5, 5, 5, 5, 3]
    assert m["ingest"] == manifest_of(local[0])["ingest"]
    assert m["components"]["dense"]["model"] == manifest_of(local[0])["components"]["dense"]["model"]
    assert not list((path / "segments").glob("ray-work-*"))      # the staging folder is gone
    assert_same_index(local[0], path)
    from ldr.index.check import check_index
    assert check_index(path)[1] == []


def test_a_failing_shard_leaves_the_previous_generation(cluster, plain, tmp_path):
    import shutil
    path = tmp_path / "idx"
    shutil.copytree(plain, path)
    before = results(ldr.Index(path))
    gen = ldr.Index(path).generation
    files = sorted(p.relative_to(path) for p in path.rglob("*") if "readers" not in p.parts)
    with pytest.raises(IndexWriteError, match=r"shard 1 \(documents 'n002' … 'n003'\).*injected failure"):
        ldr.Index(path).add([{"id": f"n{i:03d}", "text": f"new document {i} storm"} for i in range(6)],
                            ray=RayOptions(shard_docs=2, faults={"fail_shard": 1}))
    assert ldr.Index(path).generation == gen
    assert sorted(p.relative_to(path) for p in path.rglob("*") if "readers" not in p.parts) == files
    assert_same(results(ldr.Index(path)), before, tol=0)


def test_a_shard_that_kills_its_worker_every_time_fails_naming_it(cluster, plain, tmp_path):
    import shutil
    path = tmp_path / "idx"
    shutil.copytree(plain, path)
    gen = ldr.Index(path).generation
    with pytest.raises(IndexWriteError, match=r"shard 0 .* failed on 2 attempts \(its worker died each time\)"):
        ldr.Index(path).add([{"id": f"n{i:03d}", "text": f"new document {i}"} for i in range(3)],
                            ray=RayOptions(retries=1, faults={"kill_shard": 0, "kill_always": True}))
    assert ldr.Index(path).generation == gen
    assert not list((path / "segments").glob("ray-work-*"))


def test_cli_add_on_a_running_cluster_replaces_and_adds(cluster, plain, tmp_path):
    import shutil
    path = tmp_path / "idx"
    shutil.copytree(plain, path)
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps(d) + "\n" for d in
                           [make_doc(3, version=1), make_doc(40), {"id": "blank", "text": ""}]))
    r = CliRunner().invoke(main, ["add", str(new), "-i", str(path), "--ray", cluster, "--ray-workers", "2",
                                  "--ray-cpus-per-worker", "1", "--ray-shard-docs", "1", "-q"])
    assert r.exit_code == 0, r.output
    assert "encoded on Ray: 2 workers x 1 CPUs on 2 nodes, 2 shards" in r.output
    assert "1 added, 1 replaced, 1 skipped" in r.output
    idx = ldr.Index(path)
    assert len(idx) == 24
    assert idx.document("d003").text.endswith("v1") and idx.document("d040").id == "d040"
    hist = manifest_of(path)["history"][-1]
    assert hist["op"] == "add" and hist["ray"]["shards"] == 2


def test_a_colbert_index_built_on_ray_scores_as_a_local_build(cluster, tmp_path):
    """The colbert kind goes through the Ray build like the others (its settings travel to the
    workers as a dict); shards give the same MaxSim scores as one local segment."""
    from tiny_models import make
    from ldr.encode.colbert import ColbertSettings

    model = str(make("bert", tmp_path / "m"))
    docs = [{"id": f"d{i:02d}", "text": f"heron marsh tide {i} " * (3 + i % 7)} for i in range(12)]
    kw = dict(dense=None, sparse=None, components={"colbert": ColbertSettings(model=model)}, progress=False)
    local = ldr.Index.build(docs, tmp_path / "local", **kw)
    # one worker: three shards go through it, and one process imports PyTorch for ColBERT, not two
    ray_idx = ldr.Index.build(docs, tmp_path / "ray", ray=RayOptions(shard_docs=4, workers=1), **kw)
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
