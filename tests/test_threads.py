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


def test_a_query_is_projected_on_one_blas_thread_whichever_thread_asks(monkeypatch):
    """The sparse query's projection is a search's one BLAS product: OpenBLAS's workers busy-waited
    after it and took a core from the next query (encode/blas_threads.py). It runs on one BLAS
    thread, set for the calling thread alone: the main thread and a server's worker thread project
    a query the same way (equal weights), and each gets its own setting back."""
    import threading

    import numpy as np

    from ldr.encode.sparse import SparseSettings, load_sparse

    np.ones((64, 64)) @ np.ones((64, 64))           # numpy's BLAS loaded
    before = _blas_threads()
    enc = load_sparse(SparseSettings(backend="onnx"))
    seen = []
    real = type(enc)._matrix
    monkeypatch.setattr(type(enc), "_matrix", lambda self, *a, **k: seen.append(_blas_threads()) or real(self, *a, **k))
    query = " ".join(f"meeting budget remote control design {w}" for w in range(60))   # a long query
    within = np.arange(0, enc.vocab_size, 3, dtype=np.int64)        # an index's terms: the narrowed product
    here = enc.query_terms([query], within)
    there = []
    t = threading.Thread(target=lambda: there.append((enc.query_terms([query], within), _blas_threads())))
    t.start()
    t.join()
    (ids, weights), = here
    (t_ids, t_weights), = there[0][0]
    assert np.array_equal(ids, t_ids) and np.array_equal(weights, t_weights) and len(ids)
    if before:      # numpy runs a BLAS that threadpoolctl knows
        assert seen == [[1], [1]]
        assert there[0][1] == before and _blas_threads() == before
