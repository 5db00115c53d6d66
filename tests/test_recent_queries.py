"""Recent query encodings (issue 80): a query asked again is not encoded again, a batch encodes
only what it has not seen, every caller gets its own copy, and the cache is bounded."""
import numpy as np

from ldr.components import recent_queries


class Counting:
    def __init__(self):
        self.asked = []

    def encode(self, qs):
        self.asked.append(list(qs))
        return [np.full(3, float(len(q)), dtype=np.float32) for q in qs]


def test_a_query_seen_recently_is_not_encoded_again(monkeypatch):
    enc = Counting()
    first = recent_queries.encode_many(enc, ["ab", "abc"], enc.encode)
    again = recent_queries.encode_many(enc, ["abc", "x", "ab", "x"], enc.encode)
    assert enc.asked == [["ab", "abc"], ["x"]]
    assert [v[0] for v in again] == [3.0, 1.0, 2.0, 1.0] and np.array_equal(first[0], again[2])
    again[0][:] = -1                                   # a caller's copy: the cache keeps its own
    assert recent_queries.encode_many(enc, ["abc"], enc.encode)[0][0] == 3.0
    monkeypatch.setattr(recent_queries, "SIZE", 2)
    recent_queries.encode_many(enc, ["p", "q", "r"], enc.encode)
    assert len(enc._ldr_recent.items) == 2 and list(enc._ldr_recent.items) == [(None, "q"), (None, "r")]
    sparse = recent_queries.encode_many(object(), ["a"], lambda qs: [(np.arange(2), np.ones(2))])
    assert isinstance(sparse[0], tuple)                # an encoder without attributes: no cache, no error


def test_an_index_encodes_a_repeated_query_once(tmp_path):
    import ldr

    docs = [{"id": f"d{i}", "text": f"topic {i} about budgets and remote controls"} for i in range(6)]
    idx = ldr.Index.build(docs, tmp_path / "idx", sparse=None, progress=False)
    enc = idx.query_side("dense").encoder
    calls = []
    real = enc.encode_queries
    enc.encode_queries = lambda qs: calls.append(list(qs)) or real(qs)
    try:
        a = [(h.id, h.score) for h in idx.search("remote control budget", k=3)]
        b = [(h.id, h.score) for h in idx.search("remote control budget", k=3)]
    finally:
        del enc.encode_queries
    assert a == b and calls == [["remote control budget"]]
