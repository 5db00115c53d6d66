import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ldr
from conftest import manifest_of, newest_manifest, segment_dir
from ldr.errors import ConfigError, CorpusError, IndexFormatError


def build(*args, **kw):
    """BM25-only builds: these tests are about ingestion and BM25, not the dense encoder."""
    kw.setdefault("dense", None)
    kw.setdefault("sparse", None)
    return ldr.Index.build(*args, **kw)


def _docs(n, prefix="doc"):
    return [{"id": f"{prefix}{i}", "title": f"Title {i}", "text": f"document number {i} about topic{i % 7} and zebra{i}"}
            for i in range(n)]


def test_build_open_search_and_manifest(tmp_path):
    idx = build(_docs(50), tmp_path / "idx")
    assert len(idx) == 50
    hits = idx.search("zebra17", k=3, with_text=True)
    assert hits[0].id == "doc17" and hits[0].rank == 1 and hits[0].title == "Title 17"
    # a BM25-only index's default: BM25, then the window stage
    assert "zebra17" in hits[0].text and hits[0].scores["windows"] == hits[0].score and "bm25" in hits[0].scores
    m = manifest_of(tmp_path / "idx")
    assert m["format_version"] == 4 and m["generation"] == 1 and m["doc_count"] == 50 and len(m["checksum"]) == 64
    assert m["components"]["bm25"]["backend"] == "native"
    assert m["components"]["bm25"]["k1"] == 1.2 and m["components"]["bm25"]["b"] == 0.75
    assert "segments/seg-000001/docstore.parquet" in m["files"] and all(len(f["sha256"]) == 64 for f in m["files"].values())
    assert idx.document("doc3").title == "Title 3"
    # no temporary or old directories left beside the index
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_rebuild_replaces_index(tmp_path):
    build(_docs(5, "old"), tmp_path / "idx")
    idx = build(_docs(5, "new"), tmp_path / "idx", overwrite=True)
    assert idx.search("zebra2", k=1)[0].id == "new2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_failed_build_keeps_old_index(tmp_path):
    build(_docs(10), tmp_path / "idx")
    with pytest.raises(CorpusError, match="duplicate"):
        build(_docs(10) + _docs(1), tmp_path / "idx", overwrite=True)
    assert ldr.open(tmp_path / "idx").search("zebra4", k=1)[0].id == "doc4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_refuses_to_replace_a_non_index_directory(tmp_path):
    (tmp_path / "mydocs").mkdir()
    (tmp_path / "mydocs" / "precious.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not an ldr index"):
        build(_docs(3), tmp_path / "mydocs")
    assert (tmp_path / "mydocs" / "precious.txt").read_text() == "keep me"


def test_killed_build_leaves_old_index_intact(tmp_path):
    """SIGKILL a build of a new generation mid-way: the old one still opens and answers the same."""
    target = tmp_path / "idx"
    before = [(h.id, h.score) for h in build(_docs(30), target).search("topic3 zebra10", k=5)]
    marker = tmp_path / "halfway"
    script = textwrap.dedent(f"""
        import time, ldr
        def docs():
            for i in range(100000):
                if i == 2000:
                    open({str(marker)!r}, "w").close()
                    time.sleep(600)   # parked mid-build until killed
                yield ldr.Doc(f"new{{i}}", f"replacement text {{i}}")
        ldr.Index.build(docs(), {str(target)!r}, dense=None, sparse=None, overwrite=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        while not marker.exists():
            assert proc.poll() is None, "build exited before reaching the middle"
            assert time.time() < deadline
            time.sleep(0.05)
        # while it writes, readers open the committed generation
        assert [(h.id, h.score) for h in ldr.open(target).search("topic3 zebra10", k=5)] == before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    idx = ldr.open(target)
    assert [(h.id, h.score) for h in idx.search("topic3 zebra10", k=5)] == before
    assert len(idx) == 30 and idx.generation == 1
    leftovers = sorted((target / "segments").iterdir())
    assert len(leftovers) == 2, leftovers        # the committed segment + the dead build's
    # the next writer removes the dead build's leftovers; generation 1 stays while `idx` reads it
    build(_docs(3), target, overwrite=True)
    assert sorted(p.name for p in (target / "segments").iterdir()) == ["seg-000001", "seg-000002"]
    assert [(h.id, h.score) for h in idx.search("topic3 zebra10", k=5)] == before
    idx.close()
    build(_docs(4), target, overwrite=True)
    assert sorted(p.name for p in (target / "segments").iterdir()) == ["seg-000003"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["halfway", "idx"]


def test_corrupted_truncated_missing_and_newer_index(tmp_path):
    path = tmp_path / "idx"
    build(_docs(20), path)
    store = segment_dir(path) / "docstore.parquet"
    data = bytearray(store.read_bytes())

    data[len(data) // 2] ^= 0xFF
    store.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="docstore.parquet does not match its checksum"):
        ldr.open(path)

    store.write_bytes(bytes(data[:100]))
    with pytest.raises(IndexFormatError, match="truncated"):
        ldr.open(path, verify=False)

    store.unlink()
    with pytest.raises(IndexFormatError, match="docstore.parquet is missing"):
        ldr.open(path)

    shutil.rmtree(path)
    build(_docs(20), path)
    mpath = newest_manifest(path)
    m = json.loads(mpath.read_text())
    m["format_version"] = 99
    mpath.write_text(json.dumps(m))
    with pytest.raises(IndexFormatError, match="upgrade ldr or rebuild"):
        ldr.open(path)

    mpath.write_text("{ truncated")
    with pytest.raises(IndexFormatError, match="corrupted"):
        ldr.open(path)
    mpath.unlink()
    with pytest.raises(IndexFormatError, match="has no manifest"):
        ldr.open(path)
    with pytest.raises(IndexFormatError, match="no index at"):
        ldr.open(tmp_path / "nothing-here")


def test_api_input_validation(tmp_path):
    with pytest.raises(CorpusError, match="needs 'id'"):
        build([{"text": "no id"}], tmp_path / "a")
    empty = build([], tmp_path / "b")        # an empty index that `add` fills (issue 58)
    assert len(empty) == 0 and empty.search("anything") == []
    with pytest.raises(CorpusError, match="no indexable documents"):
        build([{"id": "e", "text": "   "}], tmp_path / "b2")
    idx = build(_docs(3), tmp_path / "c")
    with pytest.raises(ConfigError):
        idx.search("x", k=0)
    with pytest.raises(ConfigError, match="no 'dense' component|unknown search mode"):
        idx.search("x", mode="dense")
    assert idx.search("words that match nothing qqqq", k=5) == []
    assert not (tmp_path / "a").exists() and not (tmp_path / "b2").exists()


def test_reading_a_hit_reads_a_small_row_group(tmp_path):
    """Row groups hold at most 64 documents / ~4 MB of text, so one hit's text costs a small read."""
    import pyarrow.parquet as pq
    docs = [{"id": f"d{i}", "text": f"doc {i} " + "words " * 2000} for i in range(300)]
    idx = build(docs, tmp_path / "idx")
    md = pq.ParquetFile(segment_dir(tmp_path / "idx") / "docstore.parquet").metadata
    assert md.num_row_groups >= 5 and max(md.row_group(g).num_rows for g in range(md.num_row_groups)) <= 64
    assert idx.search("doc 123", k=1, with_text=False)[0].text is None


def test_every_component_provides_its_protocol(tmp_path):
    from ldr.components.analysis import Analyzer
    from ldr.components.bm25_store.base import open_searcher, open_writer
    from ldr.components.faiss_store import DenseSearcher, DenseWriter
    from ldr.index.docstore import DocstoreWriter
    from ldr.components.base import ComponentWriter, Retriever
    from ldr.components.bm25_store.native_backend import NativeSearcher, NativeWriter
    from ldr.components.bm25 import UidRetriever
    from ldr.components.dense import MultiDense
    from ldr.components.sparse import MultiSparse
    from ldr.components.sparse_store import SparseWriter

    for cls in (DenseWriter, SparseWriter, DocstoreWriter, NativeWriter):
        assert all(callable(getattr(cls, m, None)) for m in ("add", "close", "abort")), cls
    for cls in (DenseSearcher, MultiDense, MultiSparse, UidRetriever, NativeSearcher):
        assert callable(getattr(cls, "search_rep", None)), cls
    for cls in (DenseSearcher, MultiDense, MultiSparse):       # a reader of vectors holds no model (issue 79)
        assert not hasattr(cls, "encode") and not hasattr(cls, "encoder"), cls
    w = open_writer("tantivy", tmp_path / "tantivy", Analyzer())
    assert isinstance(w, ComponentWriter)
    w.add(0, ldr.Doc("a", "some text"))
    w.close()
    assert isinstance(open_searcher("tantivy", tmp_path / "tantivy", Analyzer(), 1.2, 0.75, 1), Retriever)
    w = NativeWriter(tmp_path / "native", Analyzer())
    assert isinstance(w, ComponentWriter)
    w.add(0, ldr.Doc("a", "some text"))
    w.close()
    assert isinstance(NativeSearcher([(tmp_path / "native", 0, np.zeros(1, bool))], Analyzer(), 1.2, 0.75), Retriever)


def test_the_api_refuses_to_replace_an_index_as_the_cli_does(tmp_path):
    """Issue 57 item 15: `ldr.Index.build(corpus, "idx")` over an index replaced it silently where
    `ldr index` refuses; now it refuses the same, and `overwrite=True` replaces it."""
    idx = build(_docs(5, "old"), tmp_path / "idx")
    idx.add([ldr.Doc("added", "a document added later")])
    with pytest.raises(ConfigError, match="is an index already.*overwrite=True"):
        build(_docs(3, "new"), tmp_path / "idx")
    assert len(ldr.open(tmp_path / "idx")) == 6
    assert len(build(_docs(3, "new"), tmp_path / "idx", overwrite=True)) == 3
