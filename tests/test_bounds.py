"""Memory any client can grow, bounded (issue 42 items 1, 2, 5): filter values are size-capped and
compiled into a bounded cache (the standard library's keeps 32,768 patterns of any size); the
window stage's vocabulary and the encoder cache start afresh past a bound; an integer too large
for a float compares exactly instead of poisoning its field."""
import fnmatch

import numpy as np
import pytest

import ldr
from ldr import components as registry
from ldr.components.base import Component
from ldr.errors import QueryError
from ldr.search import filters

DOCS = [{"id": f"d{i}", "text": f"bridge report {i} on bearing corrosion", "path": f"contracts/c{i}.txt",
         "n": (10 ** 400 if i == 3 else i)} for i in range(6)]


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    return ldr.Index.build(DOCS, tmp_path_factory.mktemp("bounds") / "idx", bm25="native", dense=None, sparse=None)


def test_filter_values_are_capped_and_globs_compiled_in_a_bounded_cache(idx):
    before = fnmatch._compile_pattern.cache_info().currsize
    for i in range(filters._GLOBS_MAX + 200):
        idx.search("bridge", k=1, filters={"path": f"contracts/c{i % 7}*{i}*"})
    assert len(filters._GLOBS) <= filters._GLOBS_MAX
    assert fnmatch._compile_pattern.cache_info().currsize == before     # the unbounded cache is not used
    with pytest.raises(QueryError, match="at most 1024"):
        idx.search("bridge", filters={"path": "x" * 200_000 + "*"})
    with pytest.raises(QueryError, match="at most 256"):
        idx.search("bridge", filters={"n": list(range(300))})
    assert {h.id for h in idx.search("bridge", k=10, filters={"path": "contracts/c[12]*"})} == {"d1", "d2"}


def test_an_integer_beyond_a_float_compares_exactly(idx):
    assert [h.id for h in idx.search("bridge", k=10, filters={"n": {">": 10 ** 300}})] == ["d3"]
    assert {h.id for h in idx.search("bridge", k=10, filters={"n": {"<": 3}})} == {"d0", "d1", "d2"}
    assert [h.id for h in idx.search("bridge", k=10, filters={"n": 10 ** 400})] == ["d3"]
    assert [h.id for h in idx.search("bridge", k=10, filters={"n": str(10 ** 400)})] == ["d3"]


def test_the_window_vocabulary_starts_afresh_past_its_bound():
    from ldr.components.analysis import Analyzer
    from ldr.search.passages import PassageFinder, WindowTerms

    terms = WindowTerms(Analyzer(), max_terms=500)
    finder = PassageFinder(terms)
    rng = np.random.default_rng(0)
    for round_ in range(200):          # documents come and go, each with words of its own
        words = [f"w{round_}x{j}" for j in rng.integers(0, 10 ** 6, 40)]
        text = "the bridge bearing " + " ".join(words)
        finder.best_window("bridge bearing", {}, [0], lambda d: text, {0: 10_000 + round_})
        assert len(terms.vocab) <= 500 + 60 and len(terms.lengths) <= 502
    docs = {0: "bridge bearing corrosion " * 5, 1: "harbour lamp " * 20 + " bridge", 2: "orchard apples " * 30}
    fresh = PassageFinder(WindowTerms(Analyzer())).best_window("bridge bearing", {}, [0, 1, 2], docs.__getitem__,
                                                               {d: d for d in docs})
    assert finder.best_window("bridge bearing", {}, [0, 1, 2], docs.__getitem__, {d: d for d in docs}) == fresh
    # the words whose terms are remembered have a bound of their own (the vocabulary stays)
    terms = WindowTerms(Analyzer(), max_words=300)
    finder = PassageFinder(terms)
    for round_ in range(50):
        text = "the bridge bearing " + " ".join(f"w{round_}x{j}" for j in rng.integers(0, 10 ** 6, 40))
        finder.best_window("bridge bearing", {}, [0], lambda d: text, {0: 10_000 + round_})
        assert len(terms._words) <= 300 + 43
    assert finder.best_window("bridge bearing", {}, [0, 1, 2], docs.__getitem__, {d: d for d in docs}) == fresh


class _Toy(Component):
    name = "toyenc"

    def load_encoder(self, settings):
        return object()


def test_the_encoder_cache_keeps_a_bounded_number_of_models():
    registry.register(_Toy())
    try:
        cache = registry.EncoderCache(max_models=3)
        first = cache.get("toyenc", {"n": 0})
        for n in range(1, 20):
            cache.get("toyenc", {"n": n})
            assert len(cache.loaded()) <= 3
        assert cache.get("toyenc", {"n": 19}) is cache.get("toyenc", {"n": 19})       # kept while in use
        assert cache.get("toyenc", {"n": 0}) is not first                            # dropped, loaded again
    finally:
        registry.unregister("toyenc")


def test_the_server_refuses_hostile_filters_and_takes_huge_integers(idx, tmp_path):
    pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from test_serve import Server

    path = tmp_path / "srv"
    ldr.Index.build(DOCS, path, bm25="native", dense=None, sparse=None)
    server = Server(path)
    try:
        for i in range(20):
            r = server.http.post("/search", json={"query": "bridge", "filters": {"path": "x" * 200_000 + f"{i}*"}})
            assert r.status_code == 400 and "at most 1024" in r.json()["error"]
        big = {"id": "big", "text": "bridge inspection of the big one", "n": 10 ** 400}
        assert server.http.post("/documents", json={"documents": [big]}).status_code == 200
        r = server.http.post("/search", json={"query": "bridge", "k": 10, "filters": {"n": {">": 10 ** 300}}})
        assert r.status_code == 200 and {h["id"] for h in r.json()["hits"]} == {"d3", "big"}
    finally:
        server.stop()


def test_filter_masks_are_kept_for_at_most_64_filters(idx):
    """A mask is one byte per document: 64 of them bound what distinct filters keep."""
    for i in range(150):
        idx.search("bridge", k=1, filters={"n": {">": i}})
    assert len(idx.docstore._masks) <= 64
