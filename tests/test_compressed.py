"""Compressed passage vectors (--faiss rabitq / ivfpq): codes in RAM, exact rescoring from the
vectors on disk, one codebook per index that merges reuse. Small data: the training minimum and
the auto thresholds are lowered so a few dozen documents exercise every path."""
import json
import subprocess
import sys

import numpy as np
import pytest

import ldr
from ldr.components import compressed, exact_vectors, faiss_store
from ldr.components.exact_vectors import files_of
from ldr.components.faiss_store import FaissSettings
from ldr.encode.dense import DenseSettings
from ldr.index.check import check_index

pytestmark = pytest.mark.slow

WORDS = "harbour storm lamp reef ship keeper budget remote control design market price bearing rust".split()
QUERIES = ("keeper relit the lamp", "remote control market price", "unique7 bearing rust", "a storm over the reef")
DENSE = dict(bm25=None, sparse=None, dense=DenseSettings(strategy="truncate", device="cpu"))


def _docs(n=60, seed=1, words=40):
    rng = np.random.default_rng(seed)
    return [ldr.Doc(f"d{i}", " ".join(rng.choice(WORDS, words)) + f" unique{i}") for i in range(n)]


class _Top(list):
    """(id, score) of the top hits; equal to another when the ids are and the scores within 1e-5
    (the rescored score is an einsum, the flat index's a BLAS product of the same vectors)."""

    def __eq__(self, other):
        return [i for i, _ in self] == [i for i, _ in other] and \
            all(abs(a - b) <= 1e-5 for (_, a), (_, b) in zip(self, other))


def _top(idx, q, k=8):
    return _Top((h.id, h.score) for h in idx.search(q, k=k))


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(compressed, "MIN_TRAIN", 32)
    monkeypatch.setattr(exact_vectors, "LINK_MIN", 2)
    trained = []
    real = compressed.train
    monkeypatch.setattr(compressed, "train", lambda root, v, *a, **k: trained.append(len(v)) or real(root, v, *a, **k))
    return trained


@pytest.mark.parametrize("codec,n", [("rabitq", 60), ("ivfpq", 300)])      # PQ trains on 256+ vectors
def test_scores_are_the_flat_index_s_and_a_merge_trains_nothing(small, tmp_path, codec, n):
    """Search on codes, scores from the exact vectors: the same ids and scores as the flat index
    after add, delete and merge; the merge copies codes (no training, the codebook file unchanged)
    and `ldr check` passes."""
    # one vector a document (truncate): PQ's 300 need no more words than its codes can tell apart
    docs, more = _docs(n, words=40 if n < 100 else 12), [ldr.Doc("new", "the keeper relit the lamp in the storm")]
    path = tmp_path / "c"
    idx = ldr.Index.build(docs, path, faiss=FaissSettings(index=codec, rescore=16), **DENSE)
    flat = ldr.Index.build(docs + more, tmp_path / "f", faiss=FaissSettings(index="flat"), **DENSE)
    seg = idx.manifest["segments"][0]["dense"]
    assert seg["faiss"]["index"] == codec and seg["codebook"] == idx.components["dense"]["codebook"]
    assert (path / seg["path"]).exists() is False and (path / seg["codebook"]["path"]).is_file()
    assert small == [n]
    book = (path / seg["codebook"]["path"]).read_bytes()
    idx.add(more)
    idx.delete(["d3"])
    flat.delete(["d3"])
    assert small == [n]                       # the new segment is encoded with the index's codebook
    idx.merge()
    idx = ldr.open(path)
    assert small == [n] and [s["dense"]["faiss"]["index"] for s in idx.manifest["segments"]] == [codec]
    assert (path / idx.manifest["segments"][0]["dense"]["codebook"]["path"]).read_bytes() == book
    assert sorted(p.name for p in (path / "codebooks").iterdir()) == [path.joinpath(seg["codebook"]["path"]).name]
    for q in QUERIES:
        assert _top(idx, q) == _top(flat, q)
    assert "d3" not in [h.id for h in idx.search("unique3", k=n)]
    assert check_index(path)[1] == []
    # a source that lost no row keeps its vector file: the merge links it and writes only the new rows
    seg = idx.manifest["segments"][0]
    whole = path / seg["path"] / "dense" / files_of(seg["dense"])[0][0]
    late = [ldr.Doc("late", "a late storm over the reef and the harbour")]
    idx.add(late)
    flat.add(late)
    idx.merge()
    idx = ldr.open(path)
    seg = idx.manifest["segments"][0]
    files = files_of(seg["dense"])
    assert [n for _, n in files] == [n, 1] and small == [n]
    assert (path / seg["path"] / "dense" / files[0][0]).stat().st_ino == whole.stat().st_ino
    for q in QUERIES:
        assert _top(idx, q) == _top(flat, q)
    assert check_index(path)[1] == []


def test_auto_goes_flat_hnsw_compressed_by_segment_size(small, tmp_path, monkeypatch):
    monkeypatch.setattr(faiss_store, "AUTO_HNSW_ABOVE", 20)
    monkeypatch.setattr(faiss_store, "AUTO_COMPRESSED_ABOVE", 45)
    path = tmp_path / "a"
    idx = ldr.Index.build(_docs(40), path, **DENSE)
    idx.add([ldr.Doc(f"e{i}", d.text) for i, d in enumerate(_docs(10, seed=2))])
    idx = ldr.open(path)
    assert [s["dense"]["faiss"]["index"] for s in idx.manifest["segments"]] == ["hnsw", "flat"]
    assert small == []
    idx.merge()                                # 50 vectors: past the threshold, the first codebook is trained
    idx = ldr.open(path)
    assert [s["dense"]["faiss"]["index"] for s in idx.manifest["segments"]] == ["rabitq"] and small == [50]
    exact = ldr.Index.build(_docs(40) + [ldr.Doc(f"e{i}", d.text) for i, d in enumerate(_docs(10, seed=2))], tmp_path / "f", faiss=FaissSettings(index="flat"),
                            **DENSE)
    for q in QUERIES:
        assert [h.id for h in idx.search(q, k=5)] == [h.id for h in exact.search(q, k=5)]
    info = json.loads(subprocess.run([sys.executable, "-m", "ldr.cli", "info", str(path), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    dense = info["components"]["dense"]
    assert dense["bytes"]["disk_per_vector"] > 384 * 4 and dense["bytes"]["ram_per_vector"] > 0
    assert dense["parts"] == ["rabitq"] and [s["index"] for s in dense["by_segment"]] == ["rabitq"]
    assert dense["by_segment"][0]["vectors"] == 50 and dense["by_segment"][0]["ram_per_vector"] < 384 * 4


def test_check_finds_a_flipped_code_byte_and_a_missing_codebook(small, tmp_path):
    path = tmp_path / "c"
    idx = ldr.Index.build(_docs(), path, faiss=FaissSettings(index="rabitq"), **DENSE)
    seg = idx.manifest["segments"][0]
    codes = path / seg["path"] / "dense" / "ivf.index"
    data = bytearray(codes.read_bytes())
    # the last bytes are the inverted lists' codes and ids
    data[-200] ^= 0x01
    codes.write_bytes(bytes(data))
    code, problems = check_index(path)
    assert problems and any("dense" in p for p in problems)
    data[-200] ^= 0x01
    codes.write_bytes(bytes(data))
    assert check_index(path)[1] == []
    book = path / seg["dense"]["codebook"]["path"]
    book.rename(book.with_suffix(".moved"))
    assert any("codebook" in p for p in check_index(path)[1])


def test_a_sharded_index_with_compressed_vectors_answers_as_one_index(small, tmp_path):
    from ldr.sharded import ShardedIndex

    docs = _docs(90)
    sharded = ShardedIndex.build(docs, tmp_path / "s", shards=2, faiss=FaissSettings(index="rabitq"), **DENSE)
    flat = ldr.Index.build(docs, tmp_path / "f", faiss=FaissSettings(index="flat"), **DENSE)
    for q in QUERIES:
        assert _top(sharded, q) == _top(flat, q)
    sharded.add([ldr.Doc("new", "the keeper relit the lamp in the storm")])
    flat.add([ldr.Doc("new", "the keeper relit the lamp in the storm")])
    assert _top(ldr.open(tmp_path / "s"), QUERIES[0]) == _top(flat, QUERIES[0])
    # a reshard copies the codes with their codebooks: nothing trained, the same answers
    trained = list(small)
    three = ldr.open(tmp_path / "s").reshard(tmp_path / "s3", 3)
    assert small == trained
    for q in QUERIES:
        assert _top(three, q) == _top(flat, q)
    for i in range(3):
        assert check_index(tmp_path / "s3" / "shards" / f"shard-{i:03d}")[1] == []


def test_an_index_converts_to_compressed_vectors_and_back_without_re_encoding(small, tmp_path):
    """`ldr merge --faiss rabitq` rewrites an existing index's dense part (a lone segment too), the
    answers stay the flat index's; later adds reuse the codebook; `--faiss flat` goes back."""
    from click.testing import CliRunner

    from ldr.cli import main

    path = tmp_path / "i"
    flat = ldr.Index.build(_docs(), path, **DENSE)
    before = {q: _top(flat, q) for q in QUERIES}
    r = CliRunner().invoke(main, ["merge", "-i", str(path), "--faiss", "rabitq"])
    assert r.exit_code == 0, r.output
    idx = ldr.open(path)
    assert [s["dense"]["faiss"]["index"] for s in idx.manifest["segments"]] == ["rabitq"] and small == [60]
    assert idx.components["dense"]["faiss"]["index"] == "rabitq" and idx.components["dense"]["codebook"]
    assert {q: _top(idx, q) for q in QUERIES} == before
    idx.add([ldr.Doc("new", "the keeper relit the lamp in the storm")])
    assert small == [60] and ldr.open(path).manifest["segments"][-1]["dense"]["faiss"]["index"] == "rabitq"
    r = CliRunner().invoke(main, ["merge", "-i", str(path), "--faiss", "nonsense"])
    assert r.exit_code != 0 and "unknown FAISS index type" in r.output and "Traceback" not in r.output
    idx.merge(faiss="flat")
    idx = ldr.open(path)
    assert [s["dense"]["faiss"]["index"] for s in idx.manifest["segments"]] == ["flat"]
    assert "codebook" not in json.dumps(idx.manifest)          # the collector may now remove it
    assert check_index(path)[1] == []


def test_a_codebook_is_reused_until_the_vectors_outgrow_or_drift_from_it(tmp_path):
    """Segments like the training sample reuse the codebook; 4x more vectors, or vectors of another
    kind (far from every cell), get a new one."""
    from ldr.components.faiss_store import save_dense

    rng = np.random.default_rng(0)

    def topic(n, centres):
        v = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, 32)).astype(np.float32) * 0.05
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    a, b = (rng.standard_normal((20, 32)).astype(np.float32) for _ in range(2))
    fs = FaissSettings(index="rabitq")

    def part(name, v, book=None):
        (tmp_path / name).mkdir()
        return save_dense(tmp_path / name, v, np.arange(len(v)), fs, root=tmp_path, codebook=book)["codebook"]

    book = part("first", topic(2000, a))
    assert part("like", topic(2000, a), book) == book
    assert part("other", topic(2000, b), book)["path"] != book["path"]          # drifted
    assert part("bigger", topic(9000, a), book)["path"] != book["path"]         # outgrew


def test_a_failed_write_leaves_the_index_as_it_was_and_its_codebook_is_collected(small, tmp_path, monkeypatch):
    path = tmp_path / "i"
    flat = ldr.Index.build(_docs(), path, **DENSE)
    before = {q: _top(flat, q) for q in QUERIES}

    def fail(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(compressed, "write_part", fail)
    with pytest.raises(Exception, match="space"):
        flat.merge(faiss="rabitq")
    assert [p.suffix for p in (path / "codebooks").iterdir()] == [".faiss"]     # trained, never committed
    idx = ldr.open(path)
    assert idx.components["dense"]["faiss"]["index"] == "auto" and {q: _top(idx, q) for q in QUERIES} == before
    monkeypatch.undo()
    monkeypatch.setattr(compressed, "MIN_TRAIN", 32)
    idx.delete(["d1"])                          # the next write collects what no commit names
    assert not (path / "codebooks").exists() or not list((path / "codebooks").iterdir())
