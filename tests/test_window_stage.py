"""The window stage: the fused list's top candidates rescored by the BM25 of their best window
(ldr/search/stages/windows.py), so that a long document answering the query in one place
beats one that mentions its words thinly everywhere."""
import numpy as np
import pytest

import ldr
from ldr.errors import QueryError

FILLER = ("the quarterly meeting went over many routine matters such as the schedule the minutes "
          "and the catering for the next gathering of the group ").split()


def _long(words: int, inserts: dict[int, str]) -> str:
    out = [FILLER[i % len(FILLER)] for i in range(words)]
    for at, text in sorted(inserts.items(), reverse=True):
        out[at:at] = text.split()
    return " ".join(out)


QUERY = "battery supplier contract penalty"
DOCS = [
    # every query word once, thousands of words apart: whole-document BM25 likes it as much
    {"id": "thin", "text": _long(6000, {100: "battery", 2000: "supplier", 4000: "contract", 5900: "penalty"})},
    # the same words once each, together in one paragraph
    {"id": "focused", "text": _long(6000, {3000: "the battery supplier contract carries a late penalty"})},
] + [{"id": f"other{i}", "text": _long(800 + 100 * i, {50: "battery"} if i % 2 else {})} for i in range(6)]


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    return ldr.Index.build(DOCS, tmp_path_factory.mktemp("win") / "idx", bm25="native", dense=None, sparse=None)


def test_the_focused_document_wins_and_the_scores_are_the_stage_mix(idx):
    off = idx.search(QUERY, k=8, window_weight=0)
    assert {h.id for h in off[:2]} == {"thin", "focused"} and "windows.best" not in off[0].scores
    hits = idx.search(QUERY, k=8, window_depth=5, window_weight=0.5, window_scales="passages")
    assert hits[0].id == "focused" and "windows" in hits.timings_ms
    head = hits[:5]
    first = np.array([h.scores["bm25"] for h in head])
    window = np.array([h.scores["windows.best"] for h in head])
    mm = lambda x: (x - x.min()) / (x.max() - x.min())
    assert np.allclose([h.score for h in head], 0.5 * mm(first) + 0.5 * mm(window))
    assert hits[0].scores["windows.best"] > next(h for h in hits if h.id == "thin").scores["windows.best"]
    # below the depth: the first stage's order, on the same scale and under every rescored row
    tail = hits[5:]
    assert all("windows.best" not in h.scores for h in tail) and all(h.score <= 0 for h in tail)
    assert [h.id for h in tail] == [h.id for h in off if h.id not in {x.id for x in head}][:len(tail)]
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_windows_of_fixed_sizes_are_the_english_default_and_mix_by_their_shares(idx):
    hits = idx.search(QUERY, k=8, window_depth=5)                # English: 200:0.6,40:0.4 at 0.5
    assert hits[0].id == "focused"
    head = hits[:5]
    mm = lambda x: (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros(len(x))
    col = lambda k: np.array([h.scores[k] for h in head])
    evidence = (0.6 * mm(col("windows.t200")) + 0.4 * mm(col("windows.t40"))) / 1.0
    assert np.allclose([h.score for h in head], 0.5 * mm(col("bm25")) + 0.5 * evidence)
    assert "windows of 200 terms x0.6, 40 terms x0.4" in idx.plan(QUERY).explain()
    for bad in ("1:0.5", "120:0", "x:1", "120:0.5,,", "120:2"):
        with pytest.raises(QueryError, match="window_scales"):
            idx.search(QUERY, window_scales=bad)


def test_a_window_of_fixed_size_counts_what_a_brute_force_count_does():
    from ldr.search.window_scales import _windows

    rng = np.random.default_rng(0)
    for n, size in [(1, 40), (39, 40), (40, 40), (41, 40), (500, 120), (997, 41), (300, 3)]:
        pos = np.sort(rng.choice(n, size=min(n, 25), replace=False))
        cols = rng.integers(0, 3, len(pos)).astype(np.uint16)
        tf, lengths = _windows(n, pos.astype(np.int32), cols, size, 3)
        step = max(1, size // 2)
        starts = [0] if n <= size else list(range(0, n - size + 1, step))
        if n > size and starts[-1] + size < n:
            starts.append(starts[-1] + step)
        assert len(tf) == len(starts), (n, size)
        for j, a in enumerate(starts):
            want = np.zeros(3)
            for p, c in zip(pos, cols):
                want[c] += a <= p < a + size
            assert (tf[j] == want).all() and lengths[j] == max(1, min(size, n - a)), (n, size, j)
        assert (starts[-1] + size >= n)


def test_weights_and_modes(idx):
    alone = idx.search(QUERY, k=3, window_weight=1.0)
    assert alone[0].id == "focused" and alone[0].score == 1.0
    # a single retriever asked for by name is its own ranking unless the stage is asked for too
    assert "windows.best" not in idx.search(QUERY, k=3, mode="bm25")[0].scores
    assert idx.search(QUERY, k=3, mode="bm25", window_weight=0.5)[0].id == "focused"
    for bad in ({"window_weight": 1.5}, {"window_depth": 0}, {"window_weight": "x"}):
        with pytest.raises(QueryError):
            idx.search(QUERY, **bad)


def test_a_gpu_runs_the_second_stage_its_language_measured(monkeypatch):
    """No GPU runs here: the machine's answer to "is there a CUDA device" is set by hand."""
    from ldr import language_defaults
    from ldr.encode.models import packaged_path
    from ldr.search import options as o

    comps = {"bm25": {}, "dense": {}}
    stage = {"rerank_model": "ms-marco-minilm-l12", "rerank_depth": 20, "rerank_windows": 4, "rerank_weight": 0.15}
    measured = {"family": "en", "settings": {}, "gpu_second_stage": stage}

    def model(request, recorded={}, device=None, profile=measured):
        return o.resolve(request, recorded, comps, device, profile)[0].rerank_model

    plain = o.QueryOptions.of()
    monkeypatch.setattr(o, "_CUDA", True)
    opts, sources = o.resolve(plain, {}, comps, None, measured)
    want = stage["rerank_model"] if packaged_path(stage["rerank_model"]) is not None else None
    assert opts.rerank_model == want and sources["rerank_model"] == ("gpu" if want else "ldr")
    if want:       # the measured depth, passages and weight, unless the request sets them
        assert (opts.rerank_depth, opts.rerank_windows, opts.rerank_weight) == (20, 4, 0.15)
        asked = o.resolve(o.QueryOptions.of(rerank_depth=50), {}, comps, None, measured)[0]
        assert asked.rerank_depth == 50 and asked.rerank_windows == 4
    assert model(plain, device="cpu") is None                                  # a CPU asked for
    assert model(o.QueryOptions.of(rerank=False)) is None                       # the user's choice
    assert model(o.QueryOptions.of(mode="bm25")) is None
    assert model(plain, {"rerank_model": "my/reranker"}) == "my/reranker"
    assert model(plain, profile={"family": "de", "settings": {}, "gpu_second_stage": None}) is None
    assert model(plain, profile=None) is None                 # no language's measurement: no default
    # the packaged table: the cross-encoder is English; German measured none
    assert language_defaults.profile("de", {"dense": {"model": {"name": "e5-small-multilingual"}}}
                                     )["gpu_second_stage"] is None
    monkeypatch.setattr(o, "_CUDA", False)
    assert model(plain) is None
    assert model(plain, device="cuda:0") == want


@pytest.mark.parametrize("language", ["en", "de", "zh"])
def test_a_windows_terms_by_its_words_are_the_analyzers_terms(language):
    """The window stage analyses each whitespace-separated word once and remembers it: the terms
    of a text put together word by word are the analyzer's terms of the whole text, whatever the
    punctuation, Unicode spaces, long tokens, stopwords or script."""
    from ldr.components.analysis import Analyzer
    from ldr.search.passages import WindowTerms

    texts = {
        "en": "The  running-dogs ran,\tfaster\u3000than e-mail's foo_bar\xa0x " + "a" * 45 + " (and) the END.\n\nIt's 3.5%!",
        "de": "Die Häuser\u2009wurden gebaut; Straßenbahn-Haltestelle, über 1.000 Bäume — und „Gänsefüßchen“.",
        "zh": "东京都的天气很好。 Tokyo 的人口  很多，北京\u3000大学",
    }
    wt = WindowTerms(Analyzer(language=language))
    for text in (texts[language], texts[language].upper()):
        ids, vocab = wt.word_ids(wt.words(text))
        names = {i: t for t, i in vocab.items()}
        assert [names[i] for got in ids for i in got] == wt.terms(text)


def test_the_window_caches_follow_the_live_index_under_churn(tmp_path, monkeypatch):
    """Add a long document of words of its own, search, delete it, many times (issue 57 item 7):
    the analysed windows and texts of deleted documents go at the next generation, and the
    vocabulary starts afresh once it is mostly theirs, so the caches stay the live index's size."""
    from ldr.search import window_terms

    monkeypatch.setattr(window_terms, "VOCAB_FLOOR", 1500)
    rng = np.random.default_rng(0)
    idx = ldr.Index.build([{"id": f"d{i}", "text": f"bridge report {i} on bearing corrosion"} for i in range(20)],
                          tmp_path / "idx", dense=None, sparse=None)
    sizes = []
    for i in range(8):
        words = " ".join(f"w{i}x{rng.integers(10 ** 9)}" for _ in range(600))
        idx.add([{"id": "churn", "text": f"bridge {words}"}])
        assert idx.search("bridge bearing", k=5)
        idx.delete(["churn"])
        files = idx._set.files              # the shard's caches (shard.ShardFiles)
        (cache,) = files.window_terms.values()
        live = set(idx.docstore.uids[idx.docstore.live].tolist())
        assert {k[0] for k in cache._docs} <= live and set(cache.lengths) <= live
        assert set(files.texts._by_uid) <= live
        sizes.append(len(cache.vocab))
    assert max(sizes) <= 1500 + 700 and min(sizes) < 700        # started afresh; never past the floor and one document


def test_a_cold_search_scores_windows_as_a_warm_one(tmp_path):
    """The documents' windows are analysed during the first search that reads them: a query term
    first seen in a document analysed after others counts there as it does once every text is cached."""
    docs = [{"id": "a", "text": "alpha alpha alpha alpha beta"}, {"id": "b", "text": "alpha alpha alpha gamma"},
            {"id": "c", "text": _long(3000, {1500: "omega alpha"})}] + \
           [{"id": f"f{i}", "text": _long(200 + i, {})} for i in range(4)]
    idx = ldr.Index.build(docs, tmp_path / "idx", bm25="native", dense=None, sparse=None)
    first = [h.id for h in idx.search("alpha omega", k=3, window_weight=0)]
    assert first.index("c") > 0                   # "omega" enters the vocabulary after another document
    idx = ldr.open(tmp_path / "idx")
    keys = ("windows.best", "windows.t200", "windows.t40")
    cold = {h.id: [h.scores[k] for k in keys] for h in idx.search("alpha omega", k=3)}
    warm = {h.id: [h.scores[k] for k in keys] for h in idx.search("alpha omega", k=3)}
    assert cold == warm


def test_window_scales_score_alike_counted_in_a_table_or_by_sorting(monkeypatch):
    """A long query over long documents is counted by sorting its occurrences (memory follows them,
    not windows × terms); both ways give the same best windows."""
    from ldr.search import window_scales
    from ldr.search.passages import WindowFeatures

    rng = np.random.default_rng(1)
    feats = {}
    for d in range(6):
        n = int(rng.integers(50, 3000))
        pos = np.sort(rng.choice(n, size=min(n, 200), replace=False)).astype(np.int32)
        feats[d] = WindowFeatures(np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros((0, 9), np.uint16), {},
                                  pos, rng.integers(0, 9, len(pos)).astype(np.uint16), n)
    monkeypatch.setattr(window_scales, "DENSE_RATIO", 10**9)       # the table, however empty
    table = window_scales.best_at(feats, list(feats), 40, 9, 1.2, 0.75)
    monkeypatch.setattr(window_scales, "DENSE_CELLS", 0)            # the sorted cells
    assert window_scales.best_at(feats, list(feats), 40, 9, 1.2, 0.75) == table


def test_window_scales_place_every_document_at_once_as_one_at_a_time():
    """best_at places all candidates' windows in one pass; the same counts, windows and scores as
    placing each document's windows alone (`_placed`, checked against a brute-force count above)."""
    from ldr.search import window_scales
    from ldr.search.passages import WindowFeatures

    rng = np.random.default_rng(2)
    for size in (40, 41, 200, 3):
        feats = {}
        for d in range(9):
            n = int(rng.integers(0, 2500)) if d else 0          # an empty document too
            pos = np.sort(rng.choice(max(n, 1), size=min(n, int(rng.integers(0, 300))), replace=False)).astype(np.int32)
            feats[d] = WindowFeatures(np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros((0, 7), np.uint16),
                                      {}, pos, rng.integers(0, 7, len(pos)).astype(np.uint16), n)
        docs = [d for d in feats if feats[d].n_terms]
        cells, lens, starts, at = [], [], [], 0
        for d in docs:
            j, c, lengths = window_scales._placed(feats[d].n_terms, feats[d].at, feats[d].at_col, size)
            cells.append((j + at) * 7 + c), lens.append(lengths), starts.append(at)
            at += len(lengths)
        counts = np.bincount(np.concatenate(cells), minlength=at * 7)
        nz = np.flatnonzero(counts)
        tf, win, col = counts[nz].astype(np.float64), nz // 7, nz % 7
        lengths = np.concatenate(lens)
        df = np.bincount(col, minlength=7)
        idf = np.log1p((at - df + 0.5) / (df + 0.5))
        norm = 1.2 * (1 - 0.75 + 0.75 * lengths / max(lengths.mean(), 1.0))
        best = np.maximum.reduceat(np.bincount(win, weights=idf[col] * tf / (tf + norm[win]), minlength=at), starts)
        want = {d: 0.0 for d in feats} | dict(zip(docs, best.tolist()))
        assert window_scales.best_at(feats, list(feats), size, 7, 1.2, 0.75) == want, size


def test_window_features_cross_processes_as_one_buffer_and_come_back_whole():
    """A shard's {docno: WindowFeatures} (FeatureMap) pickles as one buffer, not six arrays a
    document, and comes back equal to the bit: every dtype and shape (empty documents, counts past
    uint16, vector kinds with nan), as writable arrays."""
    import pickle

    from hypothesis import given, settings, strategies as st

    from ldr.search.window_features import FeatureMap, WindowFeatures

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.booleans(), st.lists(st.sampled_from(["dense", "colbert"]), unique=True),
                              st.integers(0, 9)), max_size=8), st.integers(0, 2 ** 31))
    def check(docs, seed):
        rng = np.random.default_rng(seed)
        made = FeatureMap()
        for d, (m, terms, wide, kinds, n_at) in enumerate(docs):
            made[d * 3] = WindowFeatures(rng.integers(0, 10 ** 6, (m, 2)), rng.integers(1, 300, m),
                                         rng.integers(0, 70000 if wide else 60000, (m, terms)).astype(np.uint32 if wide else np.uint16),
                                         {k: np.where(rng.random(m) < 0.3, np.nan, rng.random(m)) for k in kinds},
                                         rng.integers(0, 10 ** 5, n_at).astype(np.int32), rng.integers(0, terms + 1, n_at).astype(np.uint16), 7 * d)
        back = pickle.loads(pickle.dumps(made))
        assert type(back) is FeatureMap and list(back) == list(made)
        for d, f in made.items():
            g = back[d]
            assert f.n_terms == g.n_terms and list(f.vec) == list(g.vec)
            for a, b in zip(f.arrays(), g.arrays()):
                assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                assert b.flags.writeable
    check()


def _features_one_at_a_time(indptr, ids, stream, vocab, terms):
    """The window features of one document as they were counted before postings: every term read
    (a lookup table of the query's terms over its windows' term ids and its stream)."""
    table = np.full(len(vocab) + 1, -1, dtype=np.int32)
    for j, t in enumerate(terms):
        if t in vocab:
            table[vocab[t]] = j
    m = len(indptr) - 1
    got = np.take(table, ids, mode="clip")
    hit = np.flatnonzero(got >= 0)
    rows = np.searchsorted(indptr, hit, side="right") - 1
    tf = np.bincount(rows * len(terms) + got[hit], minlength=m * len(terms)).reshape(m, len(terms))
    got = np.take(table, stream, mode="clip")
    pos = np.flatnonzero(got >= 0)
    return tf, pos, got[pos]


@pytest.mark.parametrize("packed", [None, (20, 16)])     # (20, 16): positions past 15 sorted the other way
def test_window_features_looked_up_in_postings_equal_every_term_read(packed, monkeypatch):
    """A query's terms are looked up in every candidate's postings at once (window_counts.py): the
    same counts a window, places in the stream and columns as reading each document's every term,
    for documents of any length (none, empty windows, one term repeated), terms absent from them
    or from the vocabulary, any order of columns; positions past what one number sorts (in_order's
    other way) too."""
    from hypothesis import given, settings, strategies as st

    from ldr.search import window_counts as counting
    from ldr.search.window_counts import Postings, in_order, occurrences, window_counts

    if packed:
        monkeypatch.setattr(counting, "PACKED", packed)
    words = st.integers(0, 12)

    @settings(max_examples=80, deadline=None)
    @given(st.lists(st.tuples(st.lists(st.lists(words, max_size=9), max_size=6), st.lists(words, max_size=40)),
                    min_size=1, max_size=6),
           st.lists(st.integers(0, 15), max_size=8, unique=True))
    def check(docs, asked):
        vocab = {f"t{i}": i for i in range(13)}
        terms = sorted(f"t{i}" for i in asked)          # t13..t15: not in the vocabulary
        indptrs, windows, streams = [], [], []
        for wins, stream in docs:
            indptrs.append(np.r_[0, np.cumsum([len(w) for w in wins])].astype(np.int64))
            windows.append(np.array([t for w in wins for t in w], dtype=np.int32))
            streams.append(np.array(stream, dtype=np.int32))
        cols = [j for j, t in enumerate(terms) if t in vocab]
        ids, cols = np.array([vocab[terms[j]] for j in cols], dtype=np.int64), np.array(cols, dtype=np.int64)
        table, rows = window_counts([len(ip) - 1 for ip in indptrs], *occurrences(
            [Postings.of_windows(w, ip) for w, ip in zip(windows, indptrs)], ids, cols), len(terms))
        places = in_order(len(docs), *occurrences([Postings.of(s) for s in streams], ids, cols)[:3])
        for k in range(len(docs)):
            tf, pos, col = _features_one_at_a_time(indptrs[k], windows[k], streams[k], vocab, terms)
            assert np.array_equal(table[rows[k]], tf) and table.dtype == np.uint32
            assert np.array_equal(places[k][0], pos) and places[k][0].dtype == np.int32
            assert np.array_equal(places[k][1], col) and places[k][1].dtype == np.uint16

    check()


def test_the_share_two_neighbouring_windows_hold_is_taken_for_all_candidates_at_once():
    """covers() of many documents at once equals each document's own (its windows sorted by their
    start, two neighbours OR-ed; one window alone), for windows in any order."""
    from hypothesis import given, settings, strategies as st

    from ldr.search.passages import WindowFeatures
    from ldr.search.window_counts import _cover, covers

    @settings(max_examples=80, deadline=None)
    @given(st.lists(st.lists(st.tuples(st.integers(0, 50), st.lists(st.integers(0, 2), min_size=3, max_size=3)),
                             max_size=5), max_size=6))
    def check(docs):
        feats = {}
        for d, wins in enumerate(docs):
            spans = np.array([[a, a + 10] for a, _ in wins], dtype=np.int64).reshape(-1, 2)
            tf = np.array([c for _, c in wins], dtype=np.uint16).reshape(-1, 3)
            feats[d] = WindowFeatures(spans, np.full(len(wins), 10, np.int64), tf, {})
        got = covers(feats, list(feats))
        assert got == {d: _cover(f) for d, f in feats.items() if len(f.spans)}

    check()


def test_window_features_are_each_documents_own_past_uint16_and_across_a_fresh_vocabulary():
    """The features of documents looked up together equal each one's alone: a window holding a
    term 70,000 times (its counts in uint32, the others' in uint16), and a vocabulary that starts
    afresh during the query (its documents looked up in two groups)."""
    from ldr.components.analysis import Analyzer
    from ldr.search.passages import PassageFinder, WindowTerms

    texts = {0: "bridge " * 70_000 + "bearing", 1: "bridge bearing corrosion",
             2: " ".join(f"w{i}" for i in range(400)) + " bridge", 3: "bearing bridge bearing"}

    class WholeDocument:            # a vector kind whose one window a document is the whole text
        def passage_scores(self, rep, docnos):
            return [(np.array([0.5]), np.array([[0, len(texts[d])]])) for d in docnos]

    def finder(max_terms=1_000_000):
        return PassageFinder(WindowTerms(Analyzer(), max_terms=max_terms), vectors={"dense": WholeDocument()})

    together = finder(max_terms=300)
    terms = together.term_list("bridge bearing")
    got = together.features({"dense": np.zeros(3)}, list(texts), texts.__getitem__, {d: 10 + d for d in texts}, terms)
    assert len({id(e.vocab) for e in together.cache._docs.values()}) == 1 and len(together.cache.vocab) < 10
    for d in texts:
        alone = finder().features({"dense": np.zeros(3)}, [d], texts.__getitem__, {d: 10 + d}, terms)[d]
        mine = got[d]
        for name in ("spans", "lengths", "tf", "at", "at_col"):
            assert np.array_equal(getattr(mine, name), getattr(alone, name)), (d, name)
            assert getattr(mine, name).dtype == getattr(alone, name).dtype, (d, name)
        assert mine.n_terms == alone.n_terms and np.array_equal(mine.vec["dense"], alone.vec["dense"])
    assert got[0].tf.dtype == np.uint32 and got[0].tf.max() == 70_000 and got[1].tf.dtype == np.uint16


def test_ranges_are_each_start_s_indices_one_after_another():
    from hypothesis import given, settings, strategies as st

    from ldr.arrays import ranges

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=12))
    def check(pairs):
        want = [i for s, c in pairs for i in range(s, s + c)]
        got = ranges(np.array([s for s, _ in pairs], dtype=np.int64), np.array([c for _, c in pairs], dtype=np.int64))
        assert got.dtype == np.int64 and got.tolist() == want

    check()
