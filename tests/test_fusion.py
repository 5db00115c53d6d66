import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldr.search.fusion import fuse, fuse_runs, parse_weights
from ldr.search.normalise import minmax, normalise_dict, zscore

A = {"x": 3.0, "y": 2.0}
B = {"y": 5.0, "z": 1.0}


def test_rrf_by_hand():
    out = fuse({"a": A, "b": B}, "rrf", k=60)
    assert math.isclose(out["x"], 1 / 61)
    assert math.isclose(out["y"], 1 / 62 + 1 / 61)
    assert math.isclose(out["z"], 1 / 62)
    w = fuse({"a": A, "b": B}, "rrf", weights={"a": 2.0, "b": 0.5}, k=10)
    assert math.isclose(w["y"], 2 / 12 + 0.5 / 11)
    assert "z" in w and math.isclose(w["z"], 0.5 / 12)


def test_minmax_and_zscore_by_hand():
    mm = fuse({"a": A, "b": B}, "minmax")
    assert mm == {"x": 1.0, "y": 1.0, "z": 0.0}      # a missing doc scores 0 in that run
    # a run with a single result normalises it to 1; documents it did not return still get 0
    assert fuse({"a": {"x": 5.0}, "b": {"y": 2.0, "x": 1.0}}, "minmax") == {"x": 1.0, "y": 1.0}
    z = fuse({"a": A, "b": B}, "zscore")
    assert z == pytest.approx({"x": 0.0, "y": 0.0, "z": -2.0})
    zw = fuse({"a": A, "b": B}, "zscore", {"a": 1.0, "b": 3.0})
    assert zw == pytest.approx({"x": 1 - 3, "y": -1 + 3, "z": -1 - 3})


def test_one_rule_for_weights_a_run_does_not_name():
    """The plan gives every kind a weight; a pure fusion call that leaves one out is an error,
    never a silent 0 (the old fusion) or 1 (the old pipeline)."""
    with pytest.raises(ValueError, match="no fusion weight for b"):
        fuse({"a": A, "b": B}, "minmax", {"a": 1.0})


def test_one_policy_for_constant_input():
    """min-max: constant input is the top of the scale (1.0, a lone candidate is never 0);
    z-scores: the mean (0.0); the same in every stage that normalises."""
    assert normalise_dict({"a": 2.0, "b": 2.0}, "minmax") == {"a": 1.0, "b": 1.0}
    assert normalise_dict({"a": 2.0}, "zscore") == {"a": 0.0}
    assert normalise_dict({}, "minmax") == {}
    assert list(minmax([3.0])) == [1.0] and list(zscore([3.0, 3.0])) == [0.0, 0.0]
    # rrf ranks equal scores by the tie-break (here: the id as a string), not by arrival order
    assert fuse({"r": {"b": 1.0, "a": 1.0, "c": 2.0}}, "rrf", k=0) == {"b": 1 / 3, "a": 1 / 2, "c": 1.0}


def test_fuse_runs_and_weights_parsing():
    runs = {"bm25": {"q1": A, "q2": {"x": 1.0}}, "dense": {"q1": B}}
    out = fuse_runs(runs, "rrf")
    assert set(out) == {"q1", "q2"} and math.isclose(out["q2"]["x"], 1 / 61)
    assert fuse({"a": A}, "minmax") == {"x": 1.0, "y": 0.0}
    assert parse_weights("bm25=1, dense=0.5") == {"bm25": 1.0, "dense": 0.5}
    with pytest.raises(ValueError, match="name=number"):
        parse_weights("bm25")
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse({"a": A}, "borda")


def test_top_items_equals_a_full_sort_with_ties():
    import random
    from ldr.components.topk import top_k_dict as top_items
    rng = random.Random(0)
    scores = {d: float(rng.randint(0, 20)) for d in range(500)}       # many ties
    full = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    for k in (1, 7, 100, 500, 900):
        assert top_items(scores, k) == full[:k]
    assert top_items({}, 5) == []


def test_multi_vector_search_is_max_over_passages(tmp_path):
    """MaxP through FAISS equals brute force: document score = its best passage, top-k documents."""
    import faiss
    import numpy as np
    from ldr.components.faiss_store import DenseSearcher, FaissSettings, build_faiss
    rng = np.random.default_rng(0)
    owner = np.sort(rng.integers(0, 40, 300))
    vecs = rng.standard_normal((300, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    faiss.write_index(build_faiss(vecs, FaissSettings()), str(tmp_path / "faiss.index"))
    np.save(tmp_path / "owner.npy", owner)
    s = DenseSearcher(tmp_path, {"faiss": FaissSettings().to_dict(), "multi_vector": True})
    q = rng.standard_normal(16).astype(np.float32)
    sims = vecs @ q
    best = {int(d): float(sims[owner == d].max()) for d in np.unique(owner)}
    expected = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
    for k in (1, 5, 40, 100):
        got = s.search_vectors(q[None], k)[0]
        assert [d for d, _ in got] == [d for d, _ in expected[:k]]
        assert np.allclose([v for _, v in got], [v for _, v in expected[:k]], atol=1e-5)


@pytest.mark.slow
def test_partial_weights_merge_with_the_defaults(tmp_path):
    import ldr
    docs = [{"id": f"d{i}", "text": f"text {i} about gannets and {'kittiwakes ' * i}"} for i in range(6)]
    idx = ldr.Index.build(docs, tmp_path / "i", dense=None, sparse="splade-tiny")
    partial = idx.search("gannets kittiwakes", k=6, weights={"sparse": 0.5})
    full = idx.search("gannets kittiwakes", k=6, weights={"bm25": 1.0, "dense": 0.25, "sparse": 0.5})
    assert [(h.id, h.score) for h in partial] == [(h.id, h.score) for h in full]
    assert any(h.scores.get("bm25", 0) > 0 for h in partial) and partial[0].score > 0.5


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq", "rabitq"])
def test_every_faiss_type_serves_search_and_passage_rescoring(tmp_path, kind):
    """best_passage (the passage rescorer's dense feature) reads exact vectors: compressed parts
    from their vectors.f32, so their scores are exact too."""
    import numpy as np
    from ldr.components.faiss_store import DenseSearcher, FaissSettings, save_dense
    rng = np.random.default_rng(1)
    owner = np.sort(rng.integers(0, 300, 2048))
    vecs = rng.standard_normal((2048, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    (tmp_path / "d").mkdir()
    entry = save_dense(tmp_path / "d", vecs, owner, FaissSettings(index=kind), root=tmp_path)
    s = DenseSearcher(tmp_path / "d", {**entry, "dim": 16})
    q = vecs[7]
    hits = s.search_vectors(q[None], 5)[0]
    assert len(hits) == 5 and hits[0] == (int(owner[7]), pytest.approx(1.0, abs=1e-5))
    best = s.best_passage(q, [int(owner[7]), int(owner[100])])
    assert np.isfinite(best).all() and best[0] == pytest.approx(1.0, abs=1e-5)


def test_one_top_k_rule_across_stages():
    """BM25 (native), learned sparse and fusion cut and order ties the same way: score, then docno."""
    import numpy as np
    from ldr.components.topk import top_k_dense, top_k_dict
    scores = np.array([0.0, 2.0, 1.0, 2.0, 1.0, 0.0, 1.0])
    expected = [(1, 2.0), (3, 2.0), (2, 1.0), (4, 1.0)]
    assert top_k_dense(scores, 4) == expected
    assert top_k_dict({d: float(s) for d, s in enumerate(scores) if s}, 4) == expected
    rank = np.array([0, 6, 5, 4, 3, 2, 1])      # ids sorted in reverse docno order
    assert top_k_dense(scores, 3, rank) == [(3, 2.0), (1, 2.0), (6, 1.0)]


@settings(max_examples=300, deadline=None)
@given(st.tuples(
    st.lists(st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 7.25]), min_size=1, max_size=40), max_size=4),
    st.integers(0, 60), st.booleans()))
def test_a_block_is_ranked_as_each_of_its_rows_alone(case):
    """top_k_dense_block (one sort of a whole block of a BM25 run's scores) gives each row what
    top_k_dense_arrays gives it alone: the same docnos, scores and dtypes, equal scores by docno,
    zeros skipped; a block with a negative score or too many documents goes row by row."""
    from ldr.components import topk

    rows, k, wide = case
    n = max((len(r) for r in rows), default=1)
    block = np.array([r + [0.0] * (n - len(r)) for r in rows], dtype=np.float32).reshape(len(rows), n)
    if wide:    # the row-by-row path, and a block with a negative score
        block = np.concatenate([block, -block[:, :1]], axis=1) if n > 1 else block
    got = topk.top_k_dense_block(block, k)
    assert len(got) == len(block)
    for (docs, vals), row in zip(got, block):
        want_docs, want_vals = topk.top_k_dense_arrays(row, k)
        assert docs.dtype == want_docs.dtype and vals.dtype == want_vals.dtype
        assert docs.tolist() == want_docs.tolist() and vals.tolist() == want_vals.tolist()


def test_a_large_block_goes_row_by_row_as_a_small_one_sorts_whole():
    from ldr.components import topk

    rng = np.random.default_rng(7)
    for n in (topk.SORT_WHOLE_BLOCK, topk.SORT_WHOLE_BLOCK + 1):
        block = rng.integers(0, 5, (3, n)).astype(np.float32)
        for k in (1, 10, n):
            assert [(d.tolist(), v.tolist()) for d, v in topk.top_k_dense_block(block, k)] == \
                [(d.tolist(), v.tolist()) for d, v in (topk.top_k_dense_arrays(r, k) for r in block)]


def test_a_gathered_list_s_scores_read_as_a_dict():
    from ldr.search.stages.base import ListedScores

    rows = [(7, 2.0), (3, 1.5), (9, 1.5)]
    got = ListedScores(rows)
    assert got == dict(rows) and dict(rows) == got and dict(got) == dict(rows)
    assert list(got) == [7, 3, 9] and list(got.items()) == rows and list(got.values()) == [2.0, 1.5, 1.5]
    assert 3 in got and 4 not in got and got[9] == 1.5 and got.get(4, -1) == -1 and len(got) == 3
    with pytest.raises(KeyError):
        got[4]
    with pytest.raises(TypeError):
        got[4] = 1.0     # read-only: a stage that rescores writes a run of its own
