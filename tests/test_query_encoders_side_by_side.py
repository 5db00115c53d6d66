"""A search's query models run side by side (search/searcher.py: the first on the searching thread,
the others on one worker) when the search runs alone, one after another when others run: the
answers are the same either way, each encoder's time is reported, and an encoder's error reaches
the caller and frees the worker."""
import os
import signal
import threading
import time

import pytest

import ldr
from ldr.encode.runtime import OrtModel
from ldr.errors import LdrError
from ldr.search import searcher


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    from conftest import SAMPLE
    return ldr.Index.build(SAMPLE, tmp_path_factory.mktemp("sbs") / "idx", progress=False)


def _watch(idx, kind, seen, fail=False, sleep=0.0):
    enc = idx.query_side(kind).encoder
    real = enc.encode_queries if kind == "dense" else enc.query_terms

    def spy(*a, **kw):
        seen.append((kind, threading.current_thread().name))
        if fail:
            raise LdrError(f"the {kind} encoder failed")
        time.sleep(sleep)
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


def test_an_encoder_beside_another_counts_the_time_the_search_waited_for_it(idx):
    """A search's timings add up to no more than it took: two encoders of 0.3 s side by side take
    ~0.3 s of it, so the one on the worker counts what the search waited for it, not its 0.3 s."""
    seen: list = []
    undo = [_watch(idx, "dense", seen, sleep=0.3), _watch(idx, "sparse", seen, sleep=0.3)]
    try:
        hits = idx.search("the lamp keeper of the harbour in the storm", k=3)
    finally:
        for u in undo:
            u()
    assert len({t for _, t in seen}) == 2                       # side by side
    t = hits.timings_ms
    assert t["encode.dense"] >= 300 and t["encode.sparse"] < 150, t
    assert hits.took_ms >= sum(t.values())


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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_forked_child_encodes_and_loads_models_on_threads_of_its_own(idx, tmp_path):
    """gunicorn --preload or multiprocessing's fork after a search: the child holds none of the
    parent's pool threads, and a query or a model handed to their pools would wait forever."""
    assert idx.search("harbour lamp keeper", k=2)                 # the parent's pools have threads
    folder = idx.query_side("dense").encoder.model.folder
    from ldr.sharded import ShardedIndex
    docs = [{"id": f"d{i}", "text": f"harbour lamp keeper {i} and the storm over the river"} for i in range(8)]
    two = ShardedIndex.build(docs, tmp_path / "two", shards=2, dense=None, sparse=None, progress=False)
    for q in ("lamp keeper", "storm", "river"):                    # its shards answer on the handle's pool
        assert two.search(q, k=3)
    pid = os.fork()
    if pid == 0:                                                  # the child: 60 s, then SIGALRM
        signal.alarm(60)
        ok = False
        try:
            ok = bool(idx.search("storm over the river flood", k=2)) and bool(two.search("river storm", k=3))
            ok = ok and OrtModel(folder).session is not None      # a model loaded on the loader's pool
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
