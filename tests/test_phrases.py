"""The window stage's phrase evidence (ldr/search/phrases.py): of two documents holding the same
words, the one holding the query's neighbouring terms side by side wins, by the documented mix;
a short query gets none; a sharded index scores it as one index does."""
import random

import numpy as np
import pytest

import ldr
from ldr.search.passages import WindowFeatures
from ldr.search.phrases import MIN_TERMS, pair_scores, query_pairs

PHRASE = "the committee approved the new remote control budget for the battery supplier contract penalty clause"
QUERY = "committee approved new remote control budget battery supplier contract penalty clause"
FILLER = "the meeting went over the schedule the minutes and the catering of the next gathering".split()


def _docs():
    rnd = random.Random(7)
    words = PHRASE.split()
    scrambled = words[:]
    while any(a + " " + b in PHRASE for a, b in zip(scrambled, scrambled[1:])):
        rnd.shuffle(scrambled)
    body = lambda inner: " ".join(FILLER * 20 + inner + FILLER * 20)
    docs = [{"id": "a-scrambled", "text": body(scrambled)}, {"id": "b-ordered", "text": body(words)}]
    docs += [{"id": f"other{i}", "text": body(rnd.sample(words, 4))} for i in range(6)]
    return docs


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    return ldr.Index.build(_docs(), tmp_path_factory.mktemp("phr") / "idx", dense=None, sparse=None)


def test_pairs_are_counted_as_a_brute_force_count_gives():
    rnd = np.random.default_rng(0)
    columns = ["a", "b", "c", "d"]
    sequence = ["a", "b", "c", "a", "b", "d"]
    pairs = query_pairs(sequence, columns)
    assert pairs == {0 * 4 + 1: 2, 1 * 4 + 2: 1, 2 * 4 + 0: 1, 1 * 4 + 3: 1}
    feats, streams = {}, {}
    for d in range(5):
        stream = rnd.integers(0, 6, 400)           # 4 and 5: terms that are not the query's
        at = np.flatnonzero(stream < 4)
        feats[d] = WindowFeatures(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 4)), {}, at.astype(np.int32),
                                  stream[at].astype(np.uint16), len(stream))
        streams[d] = stream
    got = pair_scores(feats, list(range(5)), pairs, 4, 1.2, 0.75)
    tf = np.array([[sum(1 for x, y in zip(s, s[1:]) if x < 4 and y < 4 and x * 4 + y == c) for c in pairs]
                   for s in streams.values()])
    df = (tf > 0).sum(0)
    idf = np.log1p((5 - df + 0.5) / (df + 0.5))
    norm = 1.2 * (1 - 0.75 + 0.75 * 400 / 400)
    want = (np.array(list(pairs.values())) * idf * tf * 2.2 / (tf + norm)).sum(1)
    assert np.allclose([got[d] for d in range(5)], want)


def test_a_pair_never_spans_two_candidates():
    """Every candidate's occurrences are read together: one ending at position 5 and the next
    starting at 6 hold no pair between them."""
    one = lambda at, col: WindowFeatures(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2)), {},
                                         np.array(at, np.int32), np.array(col, np.uint16), 10)
    feats = {0: one([5], [0]), 1: one([6], [1]), 2: one([2, 3], [0, 1])}
    got = pair_scores(feats, [0, 1, 2], {0 * 2 + 1: 1}, 2, 1.2, 0.75)
    assert got[0] == got[1] == 0.0 and got[2] > 0


def test_the_document_holding_the_querys_phrases_wins_by_the_documented_mix(idx):
    assert len(idx.query_side("bm25").encode(QUERY).split()) >= MIN_TERMS
    off = idx.search(QUERY, k=8, phrase_weight=0, passages=0, relevance=False)
    assert off[0].id == "a-scrambled" and off[0].score == off[1].score     # the same words: a tie, by id
    hits = idx.search(QUERY, k=8, passages=0, relevance=False)             # English's default: 0.3
    assert hits[0].id == "b-ordered" and hits[0].scores["windows.phrases"] > hits[1].scores["windows.phrases"]
    mm = lambda x: (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.ones(len(x))
    before = {h.id: h.score for h in off}
    got = np.array([h.score for h in hits])
    want = 0.7 * mm(np.array([before[h.id] for h in hits])) + 0.3 * mm(np.array([h.scores["windows.phrases"]
                                                                               for h in hits]))
    assert np.allclose(got, want)
    assert "phrases x0.3" in idx.plan(QUERY).explain()


def test_a_short_query_gets_no_phrase_evidence(idx):
    hits = idx.search("remote control budget", k=3, passages=0)
    assert all("windows.phrases" not in h.scores for h in hits)


def test_a_sharded_index_scores_the_phrases_as_one_index(idx, tmp_path):
    from ldr.sharded import ShardedIndex

    sharded = ShardedIndex.build(_docs(), tmp_path / "s", shards=2, dense=None, sparse=None)
    for q in (QUERY, QUERY + " catering schedule minutes"):
        a, b = idx.search(q, k=8, passages=1), sharded.search(q, k=8, passages=1)
        assert [(h.id, round(h.score, 9)) for h in a] == [(h.id, round(h.score, 9)) for h in b]
        assert [h.scores.get("windows.phrases") for h in a] == [h.scores.get("windows.phrases") for h in b]
