"""The window stage's aspect evidence (ldr/search/aspects.py): a query's sentences are its aspects;
the document answering each of them somewhere beats documents answering one each, by the
documented mix; a query of one sentence gets none; the score is each aspect's best window counted
by hand; a sharded index scores it as one index does."""
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ldr
from ldr.search import aspects
from ldr.search.passages import WindowFeatures

FIRST = "the committee approved the battery supplier contract with a penalty clause"
SECOND = "marketing asked for fruit and vegetable logos in bright primary colours"
QUERY = f"{FIRST.capitalize()}. {SECOND.capitalize()}."
FILLER = "the meeting went over the schedule the minutes and the catering of the next gathering".split()


def _docs():
    rnd = random.Random(3)
    filler = lambda n: " ".join(rnd.choice(FILLER) for _ in range(n))
    scattered = lambda part: " ".join(f"{filler(60)} {w}" for w in part.split()[:3])
    # a sibling says one sentence twice over and a few of the other's words far apart: its best
    # windows and its whole text beat the document that says each sentence once
    docs = [{"id": "a-first", "text": f"{filler(300)} {' '.join([FIRST] * 2)} {scattered(SECOND)} {filler(300)}"},
            {"id": "b-second", "text": f"{filler(300)} {' '.join([SECOND] * 2)} {scattered(FIRST)} {filler(300)}"},
            {"id": "c-both", "text": f"{filler(300)} {FIRST} {filler(500)} {SECOND} {filler(300)}"}]
    docs += [{"id": f"other{i}", "text": filler(900)} for i in range(5)]
    return docs


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    return ldr.Index.build(_docs(), tmp_path_factory.mktemp("asp") / "idx", dense=None, sparse=None)


def test_sentences_are_merged_until_each_holds_enough_terms():
    analyse = lambda text: re.findall(r"\w+", text)
    assert aspects.split("a b c d e f. g h i j k l.", analyse) == [list("abcdef"), list("ghijkl")]
    # a short sentence joins the next; a short last one joins the one before
    assert aspects.split("Dr. a b c d e f; g h i j k l m; n", analyse) == \
        [["Dr"] + list("abcdef"), list("ghijklm") + ["n"]]
    assert aspects.split("one sentence of many many terms but only one", analyse) == []
    assert aspects.split("a b c. d e f.", analyse) == []           # together, one aspect
    assert aspects.split("一二三四五六。七八九十百千！", lambda t: re.findall(r"\w", t)) == [list("一二三四五六"), list("七八九十百千")]
    # a pasted document: neighbouring sentences share an aspect beyond MAX_ASPECTS, every term kept
    text = " ".join(f"w{i} x y z u v." for i in range(40))
    parts = aspects.split(text, analyse)
    assert len(parts) == aspects.MAX_ASPECTS and [t for p in parts for t in p] == analyse(text)
    assert [len(p) for p in parts] == [18] * 8 + [12] * 8


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab c.;!?\n\u00e9"), max_size=600))
def test_any_text_splits_into_none_or_aspects_of_enough_terms_holding_every_term_in_order(text):
    analyse = lambda t: re.findall(r"\w+", t)
    parts = aspects.split(text, analyse)
    assert parts == [] or (2 <= len(parts) <= aspects.MAX_ASPECTS and all(len(p) >= aspects.MIN_TERMS for p in parts))
    if parts:
        assert [t for p in parts for t in p] == analyse(text)


def test_each_aspect_s_best_window_is_counted_as_by_hand():
    rnd = np.random.default_rng(1)
    columns = list("abcdef")
    parts = [list("abc"), list("cde")]                     # an aspect's terms may be another's too
    feats, streams = {}, {}
    for d, n in enumerate((30, 95, 200, 41)):              # shorter than a window, and longer
        stream = rnd.integers(0, 9, n)                     # 6-8: terms that are not the query's
        at = np.flatnonzero(stream < 6)
        feats[d] = WindowFeatures(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 6)), {}, at.astype(np.int32),
                                  stream[at].astype(np.uint16), n)
        streams[d] = stream
    got = aspects.aspect_scores(feats, list(streams), parts, columns, 1.2, 0.75)
    size, step, want = aspects.SIZE, aspects.SIZE // 2, np.zeros(len(streams))
    for part in parts:
        cols = [columns.index(t) for t in part]
        windows = []                                       # (document, tf of the aspect's terms, length)
        for d, s in streams.items():
            starts = [0] if len(s) <= size else list(range(0, len(s) - size + step, step))
            for a in starts:
                w = s[a:a + size]
                if len(w):
                    windows.append((d, np.array([np.sum(w == c) for c in cols], float), len(w)))
        tf = np.array([t for _, t, _ in windows])
        lengths = np.array([n for _, _, n in windows], float)
        df = (tf > 0).sum(0)
        idf = np.log1p((len(windows) - df + 0.5) / (df + 0.5))
        norm = 1.2 * (1 - 0.75 + 0.75 * lengths / lengths.mean())
        score = (idf * tf / (tf + norm[:, None])).sum(1)
        for d in streams:
            want[d] += max(v for (o, _, _), v in zip(windows, score) if o == d)
    assert np.allclose([got[d] for d in streams], want)


def test_the_document_answering_every_sentence_wins_by_the_documented_mix(idx):
    off = idx.search(QUERY, k=8, aspect_weight=0, passages=0, relevance=False)
    assert off[0].id != "c-both"
    hits = idx.search(QUERY, k=8, passages=0, relevance=False)            # English's default: 0.4
    assert hits[0].id == "c-both"
    assert hits[0].scores["windows.aspects"] == max(h.scores["windows.aspects"] for h in hits)
    mm = lambda x: (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.ones(len(x))
    before = {h.id: h.score for h in off}
    got = np.array([h.score for h in hits])
    want = 0.6 * mm(np.array([before[h.id] for h in hits])) + 0.4 * mm(np.array([h.scores["windows.aspects"]
                                                                               for h in hits]))
    assert np.allclose(got, want)
    assert "aspects x0.4" in idx.plan(QUERY).explain()


def test_a_query_of_one_sentence_gets_no_aspect_evidence(idx):
    hits = idx.search(FIRST + " " + SECOND, k=3, passages=0)
    assert hits and all("windows.aspects" not in h.scores for h in hits)


def test_a_sharded_index_scores_the_aspects_as_one_index(idx, tmp_path):
    from ldr.sharded import ShardedIndex

    sharded = ShardedIndex.build(_docs(), tmp_path / "s", shards=2, dense=None, sparse=None)
    for q in (QUERY, QUERY + " The catering and the schedule of the next gathering."):
        a, b = idx.search(q, k=8, passages=1), sharded.search(q, k=8, passages=1)
        assert [(h.id, round(h.score, 9)) for h in a] == [(h.id, round(h.score, 9)) for h in b]
        assert [h.scores.get("windows.aspects") for h in a] == [h.scores.get("windows.aspects") for h in b]


def test_many_aspects_over_many_windows_score_as_the_dense_count_does(monkeypatch):
    from ldr.search import window_scales

    rnd = np.random.default_rng(4)
    columns = [f"t{j}" for j in range(30)]
    parts = [list(rnd.choice(columns, 7, replace=False)) for _ in range(12)]     # overlapping groups
    feats = {}
    for d, n in enumerate((5, 300, 2_000, 41)):
        stream = rnd.integers(0, 45, n)                    # 30-44: terms that are not the query's
        at = np.flatnonzero(stream < 30)
        feats[d] = WindowFeatures(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 30)), {}, at.astype(np.int32),
                                  stream[at].astype(np.uint16), n)
    dense = aspects.aspect_scores(feats, list(feats), parts, columns, 1.2, 0.75)
    monkeypatch.setattr(window_scales, "DENSE_CELLS", 10)  # the path a query of many sentences takes
    sparse = aspects.aspect_scores(feats, list(feats), parts, columns, 1.2, 0.75)
    assert np.allclose([dense[d] for d in feats], [sparse[d] for d in feats]) and dense[2] > 0
