"""A search's query models run side by side (search/searcher.py: the first on the searching thread,
the others on one worker) when the search runs alone, one after another when others run: the
answers are the same either way, each encoder's time is reported, and an encoder's error reaches
the caller and frees the worker."""
import threading

import pytest

import ldr
from ldr.errors import LdrError
from ldr.search import searcher


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    from conftest import SAMPLE
    return ldr.Index.build(SAMPLE, tmp_path_factory.mktemp("sbs") / "idx", progress=False)


def _watch(idx, kind, seen, fail=False):
    enc = idx.query_side(kind).encoder
    real = enc.encode_queries if kind == "dense" else enc.query_terms

    def spy(*a, **kw):
        seen.append((kind, threading.current_thread().name))
        if fail:
            raise LdrError(f"the {kind} encoder failed")
        return real(*a, **kw)
    setattr(enc, "encode_queries" if kind == "dense" else "query_terms", spy)
    return lambda: delattr(enc, "encode_queries" if kind == "dense" else "query_terms")


def _answer(hits):
    return [(h.id, h.score, sorted(h.scores.items()), [(p.start, p.end, p.score) for p in h.passages]) for h in hits]


def test_a_lone_search_encodes_side_by_side_and_answers_as_one_after_another(idx):
    seen: list = []
    undo = [_watch(idx, "dense", seen), _watch(idx, "sparse", seen)]
    try:
        alone = idx.search("bearing corrosion on the bridge", k=5)
        assert sorted(seen) == [("dense", threading.current_thread().name), ("sparse", "ldr-query-encoder_0")]
        assert {"encode.dense", "encode.sparse"} <= set(alone.timings_ms)
        assert not searcher._SIDE_BY_SIDE.locked() and searcher._SEARCHING[0] == 0
        seen.clear()
        searcher._SEARCHING[0] = 1          # another search is running in this process
        try:
            crowded = idx.search("corrosion on the bridge bearing", k=5)
        finally:
            searcher._SEARCHING[0] = 0
        assert {t for _, t in seen} == {threading.current_thread().name}
        assert {"encode.dense", "encode.sparse"} <= set(crowded.timings_ms)
        seen.clear()
        again = idx.search("corrosion on the bridge bearing", k=5)    # a recent query: not encoded again
        assert seen == [] and _answer(again) == _answer(crowded)
        fresh = idx.search("the bridge bearing corrosion", k=5)
        with searcher._SIDE_BY_SIDE:                     # held: one after another
            serial = ldr.open(idx.path).search("the bridge bearing corrosion", k=5)
        assert _answer(fresh) == _answer(serial) and fresh
    finally:
        for u in undo:
            u()


def test_an_encoder_error_on_the_worker_reaches_the_caller_and_frees_it(idx):
    seen: list = []
    undo = _watch(idx, "sparse", seen, fail=True)
    try:
        with pytest.raises(LdrError, match="the sparse encoder failed"):
            idx.search("lamp keeper storm", k=3)
    finally:
        undo()
    assert seen == [("sparse", "ldr-query-encoder_0")]
    assert not searcher._SIDE_BY_SIDE.locked() and searcher._SEARCHING[0] == 0
    assert idx.search("lamp keeper storm", k=3)
