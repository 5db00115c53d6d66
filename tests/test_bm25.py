import random

import numpy as np

import pytest

import ldr
from ldr.errors import ConfigError
from ldr.components.analysis import cjk_pretokenize


def build(*args, **kw):
    """BM25-only builds: these tests are about ingestion and BM25, not the dense encoder."""
    kw.setdefault("dense", None)
    kw.setdefault("sparse", None)
    return ldr.Index.build(*args, **kw)

BACKENDS = ["tantivy", pytest.param("lucene", marks=pytest.mark.lucene)]


@pytest.fixture(scope="module")
def sample_indexes(tmp_path_factory, request):
    from conftest import SAMPLE
    base = tmp_path_factory.mktemp("sample")
    return {b: build(SAMPLE, base / b, bm25=b) for b in ("tantivy", "lucene")}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("query,expected", [
    ("corrosion of the bearing plates", "bridge-inspection-report.html"),
    ("the Licensee shall indemnify the Licensor", "software-license-agreement.md"),
    ("speech recognition chip for the remote control", "product-meeting-transcript.txt"),
    ("stretch and folds during bulk fermentation", "sourdough-guide"),
    ("relit the lamp before the ship reached the reef", "lighthouse-keeper-chapter-1"),
    ("common equity tier one ratio", "annual-report-2024"),
])
def test_phrase_ranks_its_document_first(sample_indexes, backend, query, expected):
    hits = sample_indexes[backend].search(query, k=3)
    assert hits[0].id == expected


def _synthetic_corpus(n=300, seed=7):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(2000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf-like, as in real text
    docs = []
    for i in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(30, 400))
        docs.append({"id": f"d{i}", "text": " ".join(words)})
    queries = [" ".join(rng.choices(vocab[20:400], k=rng.randint(2, 5))) for _ in range(40)]
    return docs, queries


@pytest.mark.lucene
def test_backends_agree(tmp_path):
    """Same corpus, same k1/b: tantivy and Lucene return the same top documents.

    The tokens are plain alphanumerics, so both analyzers see the same terms; the remaining
    differences are tantivy's quantised document lengths and floating point.
    """
    docs, queries = _synthetic_corpus()
    t = build(docs, tmp_path / "t", bm25="tantivy")
    lu = build(docs, tmp_path / "l", bm25="lucene", k1=1.2, b=0.75)
    top1 = overlap = 0
    for q in queries:
        a = [h.id for h in t.search(q, k=10, with_text=False)]
        b = [h.id for h in lu.search(q, k=10, with_text=False)]
        top1 += a[0] == b[0]
        overlap += len(set(a) & set(b))
    assert top1 >= 0.9 * len(queries)
    assert overlap >= 0.9 * 10 * len(queries)


@pytest.mark.lucene
def test_lucene_k1_b_are_settable_and_recorded(tmp_path):
    docs, queries = _synthetic_corpus(100)
    a = build(docs, tmp_path / "a", bm25="lucene")
    b = build(docs, tmp_path / "b", bm25="lucene", k1=2.0, b=1.0)
    assert (a.components["bm25"]["k1"], a.components["bm25"]["b"]) == (0.9, 0.4)
    assert (b.components["bm25"]["k1"], b.components["bm25"]["b"]) == (2.0, 1.0)
    sa = [h.score for h in a.search(queries[0], k=5)]
    sb = [h.score for h in b.search(queries[0], k=5)]
    assert sa != sb


def test_tantivy_rejects_parameters_it_cannot_honour(tmp_path):
    with pytest.raises(ConfigError, match="--bm25 native"):
        build([{"id": "a", "text": "x"}], tmp_path / "x", bm25="tantivy", k1=0.9)
    with pytest.raises(ConfigError, match="0 <= b <= 1"):
        build([{"id": "a", "text": "x"}], tmp_path / "x", bm25="lucene", b=3)


def test_english_analysis_stems_and_drops_stop_words(tmp_path):
    idx = build([{"id": "a", "text": "The runners were running quickly"},
                           {"id": "b", "text": "a completely unrelated sentence"}], tmp_path / "i")
    assert [h.id for h in idx.search("run", k=2)] == ["a"]
    assert idx.search("the and of", k=2) == []  # only stop words


def test_other_languages(tmp_path):
    de = build([{"id": "a", "text": "Die Häuser waren sehr schön"}, {"id": "b", "text": "Ein Auto fährt"}],
                         tmp_path / "de", language="de")
    assert de.search("Haus", k=1)[0].id == "a"
    zh = build([{"id": "a", "text": "北京大学是中国的一所大学"}, {"id": "b", "text": "上海是一个城市"}],
                         tmp_path / "zh", language="cjk")
    assert zh.search("北京", k=1)[0].id == "a"
    assert zh.search("城市", k=1)[0].id == "b"
    assert cjk_pretokenize("北京 ABC") == "北 京 北京 abc"
    with pytest.raises(ConfigError, match="unknown analyzer language"):
        build([{"id": "a", "text": "x"}], tmp_path / "xx", language="klingon")


@pytest.mark.lucene
def test_lucene_cjk(tmp_path):
    zh = build([{"id": "a", "text": "北京大学是中国的一所大学"}, {"id": "b", "text": "上海是一个城市"}],
                         tmp_path / "zh", language="cjk", bm25="lucene")
    assert zh.search("北京", k=1)[0].id == "a"


def _bm25_reference(docs_tokens, query_tokens, k1, b):
    """Lucene's BM25 straight from the formula, for every document."""
    import math
    from collections import Counter
    n = len(docs_tokens)
    avgdl = sum(len(d) for d in docs_tokens) / n
    df = Counter(t for d in docs_tokens for t in set(d))
    out = []
    for d in docs_tokens:
        tf = Counter(d)
        s = 0.0
        for t, qtf in Counter(query_tokens).items():
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += qtf * idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def test_native_backend_equals_the_formula_for_any_k1_b(tmp_path):
    docs, queries = _synthetic_corpus(120)
    idx = build(docs, tmp_path / "n", bm25="native", k1=1.5, b=0.75)
    assert (idx.components["bm25"]["k1"], idx.components["bm25"]["b"]) == (1.5, 0.75)
    searcher = idx.retriever("bm25")
    toks = [d["text"].split() for d in docs]          # w123 tokens pass the analyzer unchanged
    for q in queries[:10]:
        for k1, b in ((1.5, 0.75), (0.9, 0.4), (2.0, 1.0)):
            ref = _bm25_reference(toks, q.split(), k1, b)
            assert np.allclose(searcher.scores(q, k1, b), ref, rtol=1e-4, atol=1e-5)
        top = [h.id for h in idx.search(q, k=5, with_text=False, window_weight=0)]
        ref = _bm25_reference(toks, q.split(), 1.5, 0.75)
        best = sorted(range(len(docs)), key=lambda i: (-ref[i], i))[:5]
        assert top == [docs[i]["id"] for i in best]


@pytest.mark.lucene
def test_native_agrees_with_lucene(tmp_path):
    docs, queries = _synthetic_corpus()
    nat = build(docs, tmp_path / "n", bm25="native", k1=0.9, b=0.4)
    lu = build(docs, tmp_path / "l", bm25="lucene", k1=0.9, b=0.4)
    top1 = sum(nat.search(q, k=1)[0].id == lu.search(q, k=1)[0].id for q in queries)
    assert top1 >= 0.9 * len(queries)   # Lucene quantises document lengths: near-ties can flip


@pytest.mark.parametrize("backend", ["tantivy", "native", pytest.param("lucene", marks=pytest.mark.lucene)])
def test_language_none_means_the_same_analysis_in_every_backend(tmp_path, backend):
    if backend == "lucene":
        pytest.importorskip("pyserini")
    docs = [{"id": "a", "text": "running every morning"}, {"id": "b", "text": "the cat sat"}]
    plain = ldr.Index.build(docs, tmp_path / "none", bm25=backend, language="none", dense=None, sparse=None)
    assert plain.search("run", k=2) == []                       # no stemming
    assert [h.id for h in plain.search("the", k=2)] == ["b"]    # stop words kept
    english = ldr.Index.build(docs, tmp_path / "en", bm25=backend, language="en", dense=None, sparse=None)
    assert [h.id for h in english.search("run", k=2)] == ["a"]  # stemmed
    assert english.search("the", k=2) == []                     # stop word dropped


def test_the_native_vocabulary_finds_every_term_by_binary_search(tmp_path):
    """vocab.arrow + vocab_order.npy (not a JSON object parsed at open): every term of a mixed-script
    corpus is found at its id, absent terms are not, and a damaged order file is a clear error."""
    import numpy as np

    from ldr.components.bm25_store.vocabulary import ORDER, Vocabulary, write_vocabulary

    terms = ["zebra", "Äpfel", "äpfel", "straße", "遥控器", "a", "", "ab", "a b", "😀", "z\u00e9", "ze\u0301"]
    write_vocabulary(tmp_path, terms)
    v = Vocabulary(tmp_path)
    assert len(v) == len(terms) and dict(v.items()) == {t: i for i, t in enumerate(terms)}
    assert all(v.get(t) == i for i, t in enumerate(terms))
    assert v.get("zebras") is None and v.get("b") is None and v.get("\uffff") is None
    np.save(tmp_path / ORDER, np.arange(len(terms)) + 5)
    with pytest.raises(ValueError, match="does not index"):
        Vocabulary(tmp_path)
    # through an index: a native segment written now carries no vocab.json, and searches as before
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(["Äpfel und Birnen", "遥控器 的 成本", "straße 7"])]
    idx = ldr.Index.build(docs, tmp_path / "idx", dense=None, sparse=None, bm25="native")
    assert not list((tmp_path / "idx").rglob("vocab.json")) and list((tmp_path / "idx").rglob("vocab.arrow"))
    assert [h.id for h in idx.search("straße", k=1, mode="bm25")] == ["d2"]


from hypothesis import HealthCheck, given, settings, strategies as st

# terms as an analyzer gives them (no NUL), many sharing the prefix table's 16 bytes
_TERM = st.one_of(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=24),
                  st.text("ab\u00e9\u4e2d", min_size=14, max_size=20).map(lambda t: "x" * 14 + t),
                  st.text("abcdefgh", min_size=15, max_size=20))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=st.lists(_TERM, unique=True, max_size=80), asked=st.lists(_TERM, max_size=30))
def test_the_vocabulary_finds_any_batch_of_terms_as_a_dict_would(tmp_path_factory, terms, asked):
    """get_many (the sorted prefix table, then the terms that share a prefix) answers every batch
    of terms, present or not, as a dict of the same terms: any script, long terms with one prefix."""
    from ldr.components.bm25_store.vocabulary import Vocabulary, write_vocabulary

    folder = tmp_path_factory.mktemp("vocab")
    write_vocabulary(folder, terms)
    want = {t: i for i, t in enumerate(terms)}
    # and near misses: a term cut short or run on (the same first 16 bytes as a term, or its prefix)
    batch = asked + terms[::2] + [t[:-1] for t in terms[:20]] + [t + "b" for t in terms[:20]] + [t[:16] for t in terms]
    vocab = Vocabulary(folder)
    # the table itself: get_many makes a vocabulary this small a dict after its first batch
    assert vocab._search_many(batch) == [want.get(t) for t in batch]
    assert vocab.get_many(batch) == [want.get(t) for t in batch]
    # a vocabulary too large for a table: binary search over every term
    from ldr.components.bm25_store import vocabulary
    limit, vocabulary.TABLE_TERMS = vocabulary.TABLE_TERMS, -1
    try:
        assert Vocabulary(folder)._search_many(batch) == [want.get(t) for t in batch]
    finally:
        vocabulary.TABLE_TERMS = limit


@pytest.mark.lucene
def test_a_lucene_bm25_alone_refuses_min_score_saying_why(sample_indexes):
    """Issue 76: the README said the first estimate applies to a Lucene BM25; nothing was fitted on
    Lucene's scorer. A Lucene BM25 alone refuses min_score with a message naming it and the way out."""
    from ldr.errors import QueryError

    with pytest.raises(QueryError, match=r"bm25 \(lucene\).*Lucene BM25.*--bm25 native"):
        sample_indexes["lucene"].search("corrosion of the bearing plates", k=3, min_score=0.5, mode="bm25")
    assert sample_indexes["tantivy"].search("corrosion of the bearing plates", k=3, min_score=0.0, mode="bm25")


def test_accents_fold_in_english_and_an_older_index_reads_as_it_was(tmp_path):
    """Issue 76: "Strombergson" found "Strömbergson" only through the sparse leg. An English index
    folds accents in BM25 (documents and queries alike); --no-fold (fold=False) keeps them, as every
    index written before did (its analyzer has no `fold`)."""
    docs = [{"id": "a", "text": "Dr. Strömbergson opened the café by the harbour"},
            {"id": "b", "text": "the ferry timetable for the harbour in winter"}]
    folded = build(docs, tmp_path / "f", bm25="native")
    assert [h.id for h in folded.search("Strombergson cafe", k=2, mode="bm25")] == ["a"]
    assert [h.id for h in folded.search("Strömbergson", k=2, mode="bm25")] == ["a"]
    kept = build(docs, tmp_path / "k", bm25="native", fold=False)
    assert kept.search("Strombergson", k=2, mode="bm25") == [] or \
        [h.id for h in kept.search("Strombergson", k=2, mode="bm25")] == []
    assert "fold" not in kept.manifest["components"]["bm25"]["analyzer"] or \
        kept.manifest["components"]["bm25"]["analyzer"]["fold"] is False
