"""One Index searched from many threads answers exactly as it does sequentially."""
from concurrent.futures import ThreadPoolExecutor

import pytest

import ldr


def _run(index, queries, **kw):
    # texts and passages read under concurrency too
    return [[(h.id, h.score, h.text[:20], [(p.start, p.end, p.score) for p in h.passages])
             for h in index.search(q, k=5, with_text=True, passages=1, **kw)] for q in queries]


def _threads(index, queries, n=8, **kw):
    with ThreadPoolExecutor(n) as pool:
        chunks = [queries[i::n] for i in range(n)]
        parts = list(pool.map(lambda c: _run(index, c, **kw), chunks))
    out = [None] * len(queries)
    for i, part in enumerate(parts):
        for j, r in enumerate(part):
            out[i + j * n] = r
    return out


def test_eight_threads_bm25_and_texts(tmp_path, sample_corpus):
    # many row groups (16, of 64 rows) so threads read different ones at once
    docs = [{"id": f"d{i}", "text": f"record {i} about topic{i % 13} with extra words {'lamp ' * (i % 5)}"}
            for i in range(1000)]
    ldr.Index.build(docs, tmp_path / "idx", dense=None, sparse=None, bm25="native")
    queries = [f"topic{i % 13} lamp record {i * 3}" for i in range(160)]      # 8 threads x 20 queries
    seq = _run(ldr.open(tmp_path / "idx"), queries)
    index = ldr.open(tmp_path / "idx")      # fresh: components load lazily under concurrency
    assert _threads(index, queries) == seq


@pytest.mark.slow
def test_eight_threads_hybrid_with_models(tmp_path, sample_corpus):
    ldr.Index.build(sample_corpus, tmp_path / "idx")
    queries = [w for w in ("lamp keeper", "bearing corrosion", "sourdough starter", "river flood", "contract term",
                           "bridge inspection", "meeting notes", "storm")] * 5
    seq = _run(ldr.open(tmp_path / "idx"), queries, rerank="passage")
    index = ldr.open(tmp_path / "idx")
    results = _threads(index, queries, rerank="passage")
    assert [[h[0] for h in r] for r in results] == [[h[0] for h in r] for r in seq]
    for r, s in zip(results, seq):
        assert [h[1] for h in r] == pytest.approx([h[1] for h in s], abs=1e-5)


def test_arrays_load_from_many_threads_while_finalizers_run(tmp_path):
    """CPython 3.11 races np.load's header parse (ast.literal_eval) between threads when a garbage
    collection inside one parse runs a Python finalizer (a released generation's pin, here a
    stand-in): `SystemError: AST constructor recursion depth mismatch` made `ldr serve` of a sharded
    index answer 500 beside a writer (ldr/npy.py). ldr.npy.load parses again: no load fails."""
    import gc
    import sys
    import threading
    import time

    import numpy as np

    from ldr import npy

    path = tmp_path / "a.npy"
    np.save(path, np.arange(10))

    class Finalized:
        def __init__(self):
            self.me = self                      # a cycle: freed by the collector, finalizer and all

        def __del__(self):
            sum(range(50))                      # Python code: the GIL may pass to another thread here

    errors, loads, stop = [], [0], threading.Event()

    def run():
        while not stop.is_set():
            Finalized()
            try:
                assert npy.load(path, mmap_mode="r")[9] == 9
                with open(path, "rb") as fh:            # a docstore's text index is mapped this way
                    assert npy.header(fh)[0] == (10,) and fh.tell() == 128
                loads[0] += 1
            except SystemError as e:
                errors.append(str(e))

    old, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    threads = [threading.Thread(target=run) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(old)
        gc.set_threshold(*thresholds)
    assert loads[0] > 200 and errors == [], errors[:3]


def _blas_threads() -> list[int]:
    """numpy's own BLAS's threads (FAISS brings another, loaded later by the dense tests)."""
    from threadpoolctl import threadpool_info
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]


def test_a_search_runs_its_numpy_on_one_blas_thread_and_gives_the_rest_back(tmp_path, monkeypatch):
    """numpy's OpenBLAS workers busy-wait between a search's products and took a core from the
    next query (search/blas_threads.py): a search and a run on the main thread hold BLAS to one
    thread, nested holds share one limit, and the process's own setting comes back after (an
    application's numpy between searches is left as it was); a search on another thread changes
    nothing (OpenBLAS's setting is the process's)."""
    import threading

    import numpy as np

    from ldr.search import batch, blas_threads, searcher

    np.ones((64, 64)) @ np.ones((64, 64))           # numpy's BLAS loaded
    if not _blas_threads():
        pytest.skip("numpy runs no BLAS library that threadpoolctl knows")
    before = _blas_threads()
    with blas_threads.one_blas_thread():
        with blas_threads.one_blas_thread():
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {1}
    assert _blas_threads() == before

    seen = []
    for module, name in ((searcher, "_search"), (batch, "_search_batch")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, **k: seen.append(_blas_threads()) or _real(*a, **k))
    docs = [{"id": f"d{i}", "text": f"record {i} about topic{i % 7}"} for i in range(40)]
    index = ldr.Index.build(docs, tmp_path / "idx", dense=None, sparse=None, progress=False)
    want = [h.id for h in index.search("topic3 record", k=3)]
    assert dict(index.search_many({"a": "topic1", "b": "topic2"}, k=3, mode="bm25", relevance=False, passages=0))
    assert len(seen) == 2 and all(set(s) == {1} for s in seen)
    assert _blas_threads() == before

    got = []
    t = threading.Thread(target=lambda: got.append(([h.id for h in index.search("topic3 record", k=3)],
                                                     _blas_threads())))
    t.start()
    t.join()
    assert got == [(want, before)] and seen[-1] == before and _blas_threads() == before
