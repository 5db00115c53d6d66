"""The living index: add, delete, replace and merge commit generations; readers stay pinned;
a killed writer leaves the last generation answering as before; one writer at a time."""
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import IndexFormatError, IndexLockedError
from ldr.index.writer import IndexWriter

from conftest import manifest_of

WORDS = ("harbour lamp storm reef gannet kittiwake contract clause tenant lease meeting budget "
         "river valley engine turbine orbit comet ledger audit whale tide").split()
QUERIES = ["storm reef lamp", "tenant lease clause", "budget meeting ledger audit", "whale tide harbour",
           "engine turbine", "comet orbit valley river"]


def make_doc(i: int, version: int = 0) -> dict:
    rng = random.Random(i * 7919 + version)
    n = rng.randint(20, 120)
    words = [rng.choice(WORDS) for _ in range(n)]
    return {"id": f"d{i:03d}", "title": f"Doc {i}", "text": " ".join(words) + f" v{version}"}


def results(idx: ldr.Index, k: int = 10) -> dict:
    out = {}
    modes = [m for m in ("bm25", "dense", "sparse") if m in idx.components] + ["hybrid"]
    for q in QUERIES:
        for mode in modes:
            hits = idx.search(q, k=k, mode=mode, rerank=None if mode == "hybrid" else False)
            out[(q, mode)] = [(h.id, h.score) for h in hits]
    return out


def assert_matches_fresh(got: dict, want: dict, exact: bool) -> None:
    """Every stage when the BM25 backend is exact; else the dense and sparse stages."""
    if exact:
        assert_same(got, want, tol=1e-5)
    else:
        for key in want:
            if key[1] in ("dense", "sparse"):
                assert_same({key: got[key]}, {key: want[key]}, tol=1e-5)


def assert_same(a: dict, b: dict, tol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        ids_a, ids_b = [i for i, _ in a[key]], [i for i, _ in b[key]]
        assert ids_a == ids_b, key
        np.testing.assert_allclose([s for _, s in a[key]], [s for _, s in b[key]], rtol=0, atol=tol, err_msg=str(key))


@pytest.fixture(scope="module")
def models():
    from ldr.encode.dense import DenseSettings
    return {"dense": DenseSettings(max_length=32, device="cpu"), "sparse": "splade-tiny"}


def _final_corpus(replaced, deleted):
    docs = {d["id"]: d for d in (make_doc(i) for i in range(40))}
    for i in replaced:
        docs[f"d{i:03d}"] = make_doc(i, version=1)
    for i in deleted:
        docs.pop(f"d{i:03d}")
    return list(docs.values())


@pytest.mark.slow
@pytest.mark.parametrize("bm25", ["native", "tantivy", "lucene"])
def test_incremental_equals_fresh(tmp_path, models, bm25):
    """build 30, add 10, replace 3, delete 5, merge: the same rankings and scores as a fresh build.
    The encoders beside the native backend only: their exactness does not depend on the BM25 backend."""
    replaced, deleted = [4, 17, 33], [1, 8, 22, 35, 17]
    models = models if bm25 == "native" else {"dense": None, "sparse": None}
    idx = ldr.Index.build([make_doc(i) for i in range(30)], tmp_path / "inc", bm25=bm25, **models)
    r = idx.add([make_doc(i) for i in range(30, 40)])
    assert r["added"] == 10 and r["replaced"] == [] and len(idx) == 40
    r = idx.add([make_doc(i, version=1) for i in replaced])
    assert r["added"] == 0 and r["replaced"] == ["d004", "d017", "d033"] and len(idx) == 40
    r = idx.delete([f"d{i:03d}" for i in deleted] + ["no-such-id"])
    assert r["deleted"] == sorted(f"d{i:03d}" for i in deleted) and r["missing"] == ["no-such-id"]
    assert len(idx) == 35 and idx.generation == 4 and len(idx.manifest["segments"]) == 3

    final = _final_corpus(replaced, deleted)
    fresh = ldr.Index.build(list(reversed(final)), tmp_path / "fresh", bm25=bm25, **models)
    assert len(fresh) == 35
    want = results(fresh)
    # tantivy and Lucene count deleted documents in their statistics until their own merges drop
    # them (their documented behaviour); ldr's native BM25, dense and sparse are exact
    exact = bm25 == "native"
    got = results(idx)
    assert_matches_fresh(got, want, exact)
    for key, hits in got.items():       # deleted documents never come back
        assert not {h for h, _ in hits} & {f"d{i:03d}" for i in deleted if i not in replaced}
    assert "d001" not in idx.docstore and "d004" in idx.docstore
    assert idx.document("d004").text.endswith("v1")
    with pytest.raises(KeyError):
        idx.document("d001")

    m = idx.merge()
    assert m["segments"] == 1 and idx.manifest["segments"][0]["docs"] == 35    # deleted rows dropped
    assert_matches_fresh(results(idx), want, exact)
    # the adds-only part is exact for tantivy and Lucene too: the same statistics as a fresh build
    if not exact:
        a = ldr.Index.build([make_doc(i) for i in range(20)], tmp_path / "a", bm25=bm25, dense=None, sparse=None)
        a.add([make_doc(i) for i in range(20, 40)])
        b = ldr.Index.build([make_doc(i) for i in range(40)], tmp_path / "b", bm25=bm25, dense=None, sparse=None)
        assert_same(results(a), results(b), tol=1e-6)


def test_add_replace_delete_counts_and_info(tmp_path):
    idx = ldr.Index.build([make_doc(i) for i in range(5)], tmp_path / "idx", dense=None, sparse=None)
    corpus = tmp_path / "more.jsonl"
    corpus.write_text("\n".join(json.dumps(make_doc(i, version=2)) for i in (3, 4, 5, 6)) + "\n")
    r = CliRunner()
    out = r.invoke(main, ["add", str(corpus), "-i", str(tmp_path / "idx"), "-q"])
    assert out.exit_code == 0, out.output
    assert "2 added, 2 replaced, 0 skipped (generation 2, 7 documents in 2 segments)" in out.output
    ids = tmp_path / "ids.txt"
    ids.write_text("d000\nd005\n\nnope\n")
    out = r.invoke(main, ["delete", "d006", "-i", str(tmp_path / "idx"), "--ids-file", str(ids)])
    assert out.exit_code == 0 and "3 deleted, 1 not found (generation 3, 4 documents)" in out.output
    assert "nope" in out.output
    info = json.loads(r.invoke(main, ["info", str(tmp_path / "idx"), "--json"]).output)
    assert info["documents"] == 4 and info["generation"] == 3
    assert [h["op"] for h in info["history"]] == ["index", "add", "delete"]
    text = r.invoke(main, ["info", str(tmp_path / "idx")]).output
    assert "generation  3, 2 segments (5 deleted rows until the next merge)" in text
    idx.refresh()
    assert len(idx) == 4 and sorted(h.id for h in idx.search("v2 v0", k=10)) == ["d001", "d002", "d003", "d004"]
    out = r.invoke(main, ["merge", "-i", str(tmp_path / "idx")])
    assert out.exit_code == 0 and "1 segments now (generation 4)" in out.output
    out = r.invoke(main, ["check", str(tmp_path / "idx"), "-q"])
    assert out.exit_code == 0 and "OK (4 documents" in out.output
    # errors are one line, no traceback
    out = r.invoke(main, ["delete", "-i", str(tmp_path / "idx")])
    assert out.exit_code == 2 and "give the ids" in out.output
    out = r.invoke(main, ["add", str(corpus), "-i", str(tmp_path / "missing")])
    assert out.exit_code == 2 and "no index at" in out.output and "Traceback" not in out.output


def test_automatic_merge_bounds_the_segment_count(tmp_path):
    idx = ldr.Index.build([make_doc(0)], tmp_path / "idx", dense=None, sparse=None, bm25="native")
    for i in range(1, 25):
        idx.add([make_doc(i)])
        assert len(idx.manifest["segments"]) <= 10
    assert len(idx) == 25
    fresh = ldr.Index.build([make_doc(i) for i in range(25)], tmp_path / "fresh", dense=None, sparse=None, bm25="native")
    assert_same(results(idx), results(fresh), tol=1e-5)


def test_a_deletes_file_is_checked(tmp_path):
    idx = ldr.Index.build([make_doc(i) for i in range(6)], tmp_path / "idx", dense=None, sparse=None)
    idx.delete(["d002"])
    idx.close()
    p = tmp_path / "idx" / manifest_of(tmp_path / "idx")["segments"][0]["deletes"]
    np.save(p, np.zeros(6, bool))          # "undelete" a document by editing the bitmap
    with pytest.raises(IndexFormatError, match="does not match its checksum"):
        ldr.open(tmp_path / "idx")


# -- readers are pinned -----------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, ldr
    idx = ldr.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        idx.add([ldr.Doc(f"m{i:03d}", f"marker note number {i}")])
""")


@pytest.mark.slow
def test_readers_are_pinned_while_another_process_commits(tmp_path):
    path = tmp_path / "idx"
    base = ldr.Index.build([make_doc(i) for i in range(30)], path, dense=None, sparse=None)
    held = ldr.open(path)                 # never refreshed: must keep answering the same
    held_answer = [(h.id, h.score) for h in held.search("storm reef", k=10)]
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "25"])   # 25 commits beside the readers
    failures, answers, seen = [], 0, set()
    try:
        while proc.poll() is None or answers < 5:
            try:
                idx = ldr.open(path)
                hits = idx.search("marker note", k=100)
                n = len(idx) - 30
                # one generation: BM25's hits are exactly the marker documents its docstore holds
                assert sorted(h.id for h in hits) == [f"m{i:03d}" for i in range(n)], (idx.generation, n)
                seen.add(idx.generation)
                assert [(h.id, h.score) for h in held.search("storm reef", k=10)] == held_answer
                answers += 1
            except AssertionError:
                raise
            except Exception as e:       # any failed search is a failure of pinning
                failures.append(repr(e))
            if proc.poll() is not None and answers >= 5:
                break
    finally:
        proc.wait(timeout=300)
    assert proc.returncode == 0
    assert failures == [] and answers >= 5 and len(seen) > 1
    held.refresh()
    assert len(held) == 55 and held.generation > 25
    assert base.generation == 1 and [(h.id, h.score) for h in base.search("storm reef", k=10)] == held_answer


def test_a_search_in_flight_keeps_its_generation(tmp_path):
    idx = ldr.Index.build([make_doc(i) for i in range(10)], tmp_path / "idx", dense=None, sparse=None)
    other = ldr.open(tmp_path / "idx")
    other.delete(["d003"])
    assert idx.generation == 1 and "d003" in [h.id for h in idx.search(make_doc(3)["text"][:60], k=10)]
    assert idx.refresh() and idx.generation == 2 and "d003" not in idx.docstore
    assert not idx.refresh()


# -- crash safety -------------------------------------------------------------------------------

CRASH_POINTS = ["add:segment-written", "add:before-publish", "add:after-publish",
                "delete:deletes-written", "delete:before-publish", "delete:after-publish",
                "merge:segment-written", "merge:before-publish", "merge:after-publish"]


@pytest.mark.slow
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_9_at_every_moment_of_a_write(tmp_path, point):
    path = tmp_path / "idx"
    op = point.split(":")[0]
    bm25 = "native" if op == "merge" else "tantivy"
    idx = ldr.Index.build([make_doc(i) for i in range(20)], path, dense=None, sparse=None, bm25=bm25)
    idx.add([make_doc(i) for i in range(20, 25)], )
    idx.close()
    before = results(ldr.open(path))
    gen = ldr.open(path).generation
    corpus = tmp_path / "new.jsonl"
    corpus.write_text("\n".join(json.dumps(make_doc(i, version=3)) for i in (2, 30, 31)) + "\n")
    args = {"add": ["add", str(corpus), "-i", str(path), "-q"],
            "delete": ["delete", "d001", "d021", "-i", str(path)],
            "merge": ["merge", "-i", str(path)]}[op]
    env = dict(os.environ, LDR_CRASH_AT=point)
    r = subprocess.run([sys.executable, "-m", "ldr.cli", *args], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == -9, r.stderr
    after = ldr.open(path)
    if point.endswith("after-publish"):
        assert after.generation == gen + 1      # committed: the new generation answers
    else:
        assert after.generation == gen
        assert results(after) == before          # the last committed generation, exactly as before
    after.close()
    # the next writer removes what the killed one left, and the index checks clean
    with IndexWriter(path):
        pass
    m = manifest_of(path)
    listed = {s["path"] for s in m["segments"]}
    assert {f"segments/{p.name}" for p in (path / "segments").iterdir()} == listed
    if bm25 == "tantivy":
        assert [p.name for p in (path / "bm25-generations").iterdir()] == [Path(m["components"]["bm25"]["path"]).name]
    assert not list(path.glob("*.part"))
    out = CliRunner().invoke(main, ["check", str(path), "-q"])
    assert out.exit_code == 0, out.output


# -- one writer at a time -------------------------------------------------------------------------

def test_two_writers_and_a_stale_lock(tmp_path):
    path = tmp_path / "idx"
    ldr.Index.build([make_doc(i) for i in range(5)], path, dense=None, sparse=None)
    w = IndexWriter(path)
    with pytest.raises(IndexLockedError, match=f"pid {os.getpid()}.*--wait"):
        IndexWriter(path)
    out = CliRunner().invoke(main, ["delete", "d001", "-i", str(path)])
    assert out.exit_code == 2 and "being written by another process" in out.output
    # --wait: blocks until the first writer is done
    proc = subprocess.Popen([sys.executable, "-m", "ldr.cli", "delete", "d001", "-i", str(path), "--wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.time() + 120
    while not any("waiting for it to finish" in x for x in lines) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert proc.poll() is None and f"pid {os.getpid()}" in "".join(lines)     # it says whom it waits for
    w.close()
    stdout = proc.stdout.read()
    proc.wait(timeout=120)
    reader.join()
    assert proc.returncode == 0 and "1 deleted" in stdout, lines
    # a lock file naming a writer that is gone (no flock held) is taken over
    (path / "write.lock").write_text("pid 999999 on elsewhere\n")
    with IndexWriter(path) as w2:
        assert w2.delete(["d002"])["deleted"] == ["d002"]
    assert (path / "write.lock").read_text() == ""


def test_index_over_an_index_is_a_new_generation(tmp_path):
    path = tmp_path / "idx"
    first = ldr.Index.build([make_doc(i) for i in range(5)], path, dense=None, sparse=None)
    second = ldr.Index.build([make_doc(i, version=9) for i in range(3)], path, dense=None, sparse=None,
                             overwrite=True)
    assert second.generation == 2 and len(second) == 3
    assert first.generation == 1 and len(first) == 5 and first.search("storm", k=10)   # still answers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


# -- indexes written by ldr 0.1 (format 2) ----------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("name", ["format2-tantivy", "format2-native"])
def test_format_2_indexes_open_as_generation_0(tmp_path, name):
    import shutil
    idx_path = shutil.copytree(FIXTURES / name, tmp_path / "idx")
    expected = json.loads((FIXTURES / "format2-expected.json").read_text())[name.replace("format2", "legacy")]
    idx = ldr.open(idx_path)
    assert idx.generation == 0 and len(idx) == 6
    for mode, hits in expected.items():
        # ldr 0.1's lists had no window stage
        got = [(h.id, h.score) for h in idx.search("heron3 topic1", k=4, mode=mode, window_weight=0)]
        assert [i for i, _ in got] == [i for i, _ in hits], mode
        np.testing.assert_allclose([s for _, s in got], [s for _, s in hits], atol=1e-5)
    assert CliRunner().invoke(main, ["check", str(idx_path), "-q"]).exit_code == 0
    out = CliRunner().invoke(main, ["delete", "d1", "-i", str(idx_path)])
    assert out.exit_code == 2 and "format 2 index" in out.output and "ldr index CORPUS" in out.output
    idx.close()
    # `ldr index` over it commits generation 1 in place and removes the old files
    new = ldr.Index.build([make_doc(i) for i in range(3)], idx_path, dense=None, sparse=None, overwrite=True)
    assert new.generation == 1 and len(new) == 3
    assert sorted(p.name for p in idx_path.iterdir()) == ["manifest-000001.json", "readers", "segments",
                                                         "write.lock"]


def test_unread_generations_are_collected(tmp_path):
    from ldr.index.build import BuildConfig
    path = tmp_path / "idx"
    with IndexWriter(path) as w:
        w.rebuild([ldr.Doc("a", "alpha text")], BuildConfig(dense=None, sparse=None, bm25="tantivy"), progress=False)
        w.add([ldr.Doc("b", "beta text")], progress=False)
        w.delete(["a"])
    # no reader ever held generations 1 and 2: only generation 3's files remain
    assert sorted(p.name for p in path.glob("manifest-*")) == ["manifest-000003.json"]
    assert [p.name for p in (path / "segments").iterdir()] == ["seg-000002"]
    assert [p.name for p in (path / "bm25-generations").iterdir()] == ["gen-000003"]
