"""Opening an index reads only what a search needs: the keys file instead of the Parquet docstore's
row groups, no {id: row} table until an id is looked up, passage spans mapped. What was checked at
open before is still checked where it matters (a lookup, a write, `ldr check`)."""
from __future__ import annotations

import numpy as np
import pytest

import ldr
from ldr.index.check import check_index


def test_ids_are_looked_up_lazily_and_a_docstore_holding_an_id_twice_is_still_refused(tmp_path):
    """Opening an index builds no {id: row} table (a million ids cost 0.8 s of a cold search): a search
    needs none. A docstore that holds an id twice (never written by ldr: a foreign or damaged file,
    re-sealed) still fails at the first lookup by id, a write refuses it, and `ldr check` names it."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ldr.index.manifest import _self_checksum, file_digest

    idx = tmp_path / "idx"
    ldr.Index.build([{"id": f"d{i}", "text": f"herons in marsh {i}"} for i in range(5)], idx,
                    dense=None, sparse=None, bm25="native")
    index = ldr.open(idx)
    assert index.search("herons", k=2) and index.docstore._row_of is None
    assert index.document("d3").id == "d3" and index.docstore._row_of is not None
    mp = sorted(idx.glob("manifest-*.json"))[-1]
    m = json.loads(mp.read_text())
    rel = next(r for r in m["files"] if r.endswith("docstore.parquet"))
    table = pq.read_table(idx / rel)
    ids = table.column("id").to_pylist()
    ids[4] = "d1"
    table = table.set_column(table.schema.get_field_index("id"), "id", pa.array(ids))
    pq.write_table(table, idx / rel)
    from ldr.index.docstore import KEY_COLUMNS, KEYS, KEYS_SCHEMA
    keys = rel.replace("docstore.parquet", KEYS)
    with pa.OSFile(str(idx / keys), "wb") as sink, pa.ipc.new_file(sink, KEYS_SCHEMA) as w:
        w.write_table(table.select(KEY_COLUMNS))
    for r in (rel, keys):
        m["files"][r]["sha256"] = file_digest(idx / r)
        m["files"][r]["size"] = (idx / r).stat().st_size
    del m["checksum"]
    m["checksum"] = _self_checksum(m)
    mp.write_text(json.dumps(m))
    damaged = ldr.open(idx)
    assert {h.id for h in damaged.search("herons", k=5)} <= {f"d{i}" for i in range(4)}
    with pytest.raises(ldr.IndexFormatError, match="share an id|duplicate document ids"):
        damaged.document("d1")
    gen = damaged.generation
    with pytest.raises(ldr.IndexFormatError):
        damaged.add([{"id": "d1", "text": "egrets"}])
    assert ldr.open(idx).generation == gen
    assert any("share an id" in p or "duplicate document ids" in p for p in check_index(idx)[1])


def test_the_keys_a_segment_opens_with_match_its_docstore_and_older_segments_open_without_them(tmp_path):
    """A segment's ids, titles and lengths are read at open from docstore.keys.arrow (not the Parquet
    file's many row groups); a segment written before that file existed opens from the Parquet file
    alike, and `ldr check` names a keys file that disagrees with its docstore."""
    import json

    import pyarrow as pa

    from ldr.index.docstore import KEYS, KEYS_SCHEMA
    from ldr.index.manifest import _self_checksum, file_digest

    docs = [{"id": f"d{i}", "title": f"Heron {i}", "text": f"herons in marsh {i} " * (1 + i % 4)} for i in range(40)]
    idx = tmp_path / "idx"
    ldr.Index.build(docs, idx, dense=None, sparse=None, bm25="native")
    want = [(h.id, h.title, round(h.score, 6)) for h in ldr.open(idx).search("herons marsh 7", k=10)]
    mp = sorted(idx.glob("manifest-*.json"))[-1]
    m0 = json.loads(mp.read_text())
    rel = next(r for r in m0["files"] if r.endswith(KEYS))

    def reseal(change):
        m = json.loads(json.dumps(m0))
        change(m)
        del m["checksum"]
        m["checksum"] = _self_checksum(m)
        mp.write_text(json.dumps(m))

    # an older segment: no keys file, the same answers
    keys = (idx / rel).read_bytes()
    (idx / rel).unlink()
    reseal(lambda m: m["files"].pop(rel))
    assert [(h.id, h.title, round(h.score, 6)) for h in ldr.open(idx).search("herons marsh 7", k=10)] == want
    assert check_index(idx)[1] == []
    # a keys file that names another id than its docstore (re-sealed as a foreign tool would)
    table = pa.ipc.open_file(pa.BufferReader(keys)).read_all()
    ids = table.column("id").to_pylist()
    ids[3] = "d99"
    table = table.set_column(1, "id", pa.array(ids))
    with pa.OSFile(str(idx / rel), "wb") as sink, pa.ipc.new_file(sink, KEYS_SCHEMA) as w:
        w.write_table(table)
    reseal(lambda m: m["files"].__setitem__(rel, {**m0["files"][rel], "sha256": file_digest(idx / rel),
                                                  "size": (idx / rel).stat().st_size}))
    assert any(KEYS in p for p in check_index(idx)[1])


def test_passage_spans_are_mapped_at_open_and_checked_in_full_by_ldr_check(tmp_path):
    """spans.npy (10-50 rows per long document) is mapped, not read, when an index opens; spans out of
    order (a damaged file, re-sealed) do not stop a search, and `ldr check` names them."""
    import json

    import numpy as np

    from ldr.index.manifest import _self_checksum, file_digest

    idx = tmp_path / "idx"
    ldr.Index.build([{"id": f"d{i}", "text": f"herons wade in the marsh at dawn {i}. " * 40} for i in range(4)],
                    idx, sparse=None, bm25="native")
    index = ldr.open(idx)
    assert index.search("herons at dawn", k=2, passages=1)
    mp = sorted(idx.glob("manifest-*.json"))[-1]
    m = json.loads(mp.read_text())
    rel = next(r for r in m["files"] if r.endswith("spans.npy"))
    spans = np.load(idx / rel)
    spans[1] = spans[1][::-1] + [1, 0]            # start after end
    np.save(idx / rel, spans)
    m["files"][rel].update(sha256=file_digest(idx / rel), size=(idx / rel).stat().st_size)
    del m["checksum"]
    m["checksum"] = _self_checksum(m)
    mp.write_text(json.dumps(m))
    assert ldr.open(idx).search("herons at dawn", k=2)
    assert any("spans.npy" in p and "ordered offsets" in p for p in check_index(idx)[1])


def test_an_hnsw_graph_is_read_ahead_in_one_pass_and_a_bad_file_is_left_to_the_open(tmp_path):
    """prefetch_graph reads the graph part of faiss.index into the page cache before FAISS touches
    it page by page; it never fails an open itself (missing, short or odd files are the open's to
    report) and the index answers the same after it."""
    import faiss
    from ldr.components.faiss_store import DenseSearcher, FaissSettings, build_faiss, prefetch_graph
    rng = np.random.default_rng(2)
    vecs = rng.standard_normal((600, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    fs = FaissSettings(index="hnsw")
    faiss.write_index(build_faiss(vecs, fs), str(tmp_path / "faiss.index"))
    np.save(tmp_path / "owner.npy", np.arange(600))
    prefetch_graph(tmp_path / "faiss.index", 600, 16)
    prefetch_graph(tmp_path / "faiss.index", 10**9, 16)        # more vectors than the file holds
    prefetch_graph(tmp_path / "missing.index", 600, 16)
    comp = {"faiss": fs.to_dict(), "vectors": 600, "dim": 16}
    s = DenseSearcher(tmp_path, comp)
    assert s.search_vectors(vecs[[3, 77]], 1) == [[(3, pytest.approx(1.0, abs=1e-5))], [(77, pytest.approx(1.0, abs=1e-5))]]
