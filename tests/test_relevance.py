"""Issue 45 items 1 and 2: a score a RAG application can cut on. `hit.relevance` estimates
P(relevant) from features of the query, the document and the index's statistics only, so a
document alone (through a filter, or in an index of one) gets the relevance it gets among others;
`min_score` cuts on it through the CLI, the API, the server and both adapters."""
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import QueryError

BRIDGE = "bridge-inspection-report.html"
QUERIES = ["corrosion of the bearing plates", "bridge inspection", "when is the next inspection due",
           "spalling concrete downstream", "weight restriction on the bridge"]
# documented tolerance (README, "What a score means"): a one-document index has other BM25
# statistics (idf), so its BM25 fraction moves a little
ONE_DOC_TOLERANCE = 0.1


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, request):
    from conftest import ROOT

    root = tmp_path_factory.mktemp("rel")
    full = ldr.Index.build(ROOT / "corpora" / "sample", root / "full")
    (root / "one-c").mkdir()
    shutil.copy(ROOT / "corpora" / "sample" / BRIDGE, root / "one-c" / BRIDGE)
    one = ldr.Index.build(root / "one-c", root / "one")
    return full, one


def test_a_lone_hit_has_the_relevance_it_has_among_others(hybrid):
    full, one = hybrid
    for q in QUERIES:
        among = next(h for h in full.search(q, k=10) if h.id == BRIDGE)
        alone = full.search(q, filters={"id": BRIDGE})
        single = one.search(q)
        assert len(alone) == 1 and alone[0].score == 1.0        # constant input normalises to the top, not 0
        assert 0 < among.relevance < 1 and alone[0].relevance == pytest.approx(among.relevance, abs=1e-9)
        assert single[0].relevance == pytest.approx(among.relevance, abs=ONE_DOC_TOLERANCE)
        assert single[0].scores["relevance.dense"] == pytest.approx(among.scores["relevance.dense"], abs=1e-5)


def test_min_score_cuts_on_relevance_in_the_api_and_the_cli(hybrid, tmp_path):
    full, _ = hybrid
    q = QUERIES[0]
    every = full.search(q, k=6)
    cut = sorted(h.relevance for h in every)[len(every) // 2]
    kept = full.search(q, k=6, min_score=cut)
    assert [h.id for h in kept] == [h.id for h in every if h.relevance >= cut] and 0 < len(kept) < len(every)
    out = CliRunner().invoke(main, ["search", q, "-i", str(full.path), "-k", "6", "--min-score", str(cut), "--json"])
    assert out.exit_code == 0, out.output
    hits = json.loads(out.stdout)["hits"]      # stderr: the small-index warning
    assert [h["id"] for h in hits] == [h.id for h in kept] and all(h["relevance"] >= cut for h in hits)
    assert "relevance" in full.plan(q, min_score=cut).explain()


def test_min_score_needs_a_calibration_for_the_models_searched(hybrid, tmp_path):
    from tiny_models import make

    from ldr.encode.dense import DenseSettings

    model = make("bert", tmp_path / "tiny-bert")       # a dense model no calibration was fitted for
    docs = [{"id": "a", "text": "bearing plates corrode"}, {"id": "b", "text": "the lamp was relit"}]
    idx = ldr.Index.build(docs, tmp_path / "idx", sparse=None, dense=DenseSettings(model=str(model), backend="torch"))
    with pytest.raises(QueryError, match="min_score needs a calibrated relevance"):
        idx.search("bearing", mode="dense", min_score=0.2)
    hits = idx.search("bearing", mode="dense")
    assert all(h.relevance is None and not any(k.startswith("relevance") for k in h.scores) for h in hits)
    assert idx.search("bearing", min_score=0.01)[0].id == "a"      # hybrid: the BM25 fit applies
    full, _ = hybrid
    with pytest.raises(QueryError, match="min_score"):
        full.search("bearing", min_score=1.5)


def test_a_bm25_only_index_has_a_relevance_too(tmp_path):
    from conftest import ROOT

    idx = ldr.Index.build(ROOT / "corpora" / "sample", tmp_path / "idx", dense=None, sparse=None)
    hits = idx.search("corrosion of the bearing plates", k=3)
    assert hits[0].id == BRIDGE and hits[0].relevance > hits[1].relevance and set(hits[0].scores) >= {"relevance.bm25"}


def test_both_adapters_take_min_score(hybrid):
    from ldr.integrations.langchain import LdrRetriever as LangChainRetriever
    from ldr.integrations.llamaindex import LdrRetriever as LlamaIndexRetriever

    full, _ = hybrid
    q = QUERIES[0]
    cut = full.search(q, k=1)[0].relevance - 1e-6     # only the top document passes (it is far ahead)
    assert sum(h.relevance >= cut for h in full.search(q, k=6)) == 1
    docs = LangChainRetriever(index=full, k=6, min_score=cut).invoke(q)
    assert {d.metadata["doc_id"] for d in docs} == {BRIDGE} and docs[0].metadata["relevance"] >= cut
    nodes = LlamaIndexRetriever(full, k=6, min_score=cut).retrieve(q)
    assert {n.node.metadata["doc_id"] for n in nodes} == {BRIDGE}


def _needle_docs():
    """Four documents of ~1k-8k tokens of filler (700-6,000 words), each with one made-up sentence
    somewhere inside."""
    import random

    from faker import Faker

    fake, rng = Faker("en_US"), random.Random(3)
    fake.seed_instance(3)
    docs, needles = [], []
    for i, words in enumerate((700, 2000, 4000, 6000)):
        body = []
        while len(body) < words:
            body += fake.paragraph(nb_sentences=8).split()
        needle = f"The {fake.color_name().lower()} ferry of {fake.city()} was sold to {fake.name()} for {100 + 37 * i} crowns."
        at = rng.randrange(len(body))
        docs.append({"id": f"n{i}", "text": " ".join(body[:at] + [needle] + body[at:])})
        needles.append(needle)
    return docs, needles


@pytest.mark.parametrize("kinds", ["default", "bm25"])
def test_a_quoted_sentence_makes_its_document_near_certain(tmp_path, kinds):
    """Issue 59: a query that quotes a sentence of one document (a needle in 1k-8k tokens) gives
    that document a relevance of at least 0.8, on the default index and on a BM25-only one."""
    docs, needles = _needle_docs()
    opts = {} if kinds == "default" else {"dense": None, "sparse": None}
    index = ldr.Index.build(docs, tmp_path / "i", **opts)
    for i, needle in enumerate(needles):
        top = index.search(needle, k=3)[0]
        assert top.id == f"n{i}" and top.relevance >= 0.8, (needle, top.id, top.relevance)


def test_ldr_info_names_the_relevance_fit(hybrid):
    """Issue 59: `ldr info` says which fit an index's relevance uses, on what data, and the
    exact-match floor: the query fit (native BM25, the default) fitted on five datasets, and the
    first fit (fitted on qmsum-train) for indexes of fewer than min_docs documents."""
    full, _ = hybrid
    info = full.info()["relevance"]
    assert sorted(info["reads"]) == ["bm25.best", "bm25.z", "cover"] and info["query_fit"] == "bm25"
    assert {"qmsum-train", "legal-case-reports-dev", "passage-retrieval-zh-dev"} <= set(info["fitted_on"])
    assert all(r["ece"] <= 0.05 for r in info["held_out"].values())
    small = info["smaller_indexes"]
    assert small["models"]["dense"] == "all-MiniLM-L6-v2" and small["fitted_on"] == "qmsum-train"
    assert info["exact"]["p"] >= 0.8 and info["exact"]["min_words"] == 6
    out = CliRunner().invoke(main, ["info", str(full.path)]).output
    assert "relevance   calibrated P(relevant) from bm25.best, bm25.z, cover (the query's scores over the index)" in out
    assert f"below {info['min_docs']} documents from bm25, dense, sparse, fitted on qmsum-train" in out


def test_ldr_info_warns_that_a_small_index_s_relevance_under_states(hybrid):
    """Issue 78: under the query fit's minimum the first estimate applies, and it under-states right
    answers there (measured on sub-corpora, calibration.json `small_indexes`); `ldr info` and
    `info()` say so with the figures, an index of min_docs documents or more does not."""
    from ldr.api import relevance_fit

    _, one = hybrid
    rel = one.info()["relevance"]
    small = rel["small_index"]
    assert small["documents"] == 1 and small["estimate"] == "first"
    sets = small["measured"]["sets"]
    assert {"qmsum-train", "legal-case-reports-dev"} <= set(sets)
    assert all(r["answered"]["mean_top1_relevance"] < r["answered"]["top1_accuracy"] for r in sets.values())
    out = CliRunner().invoke(main, ["info", str(one.path)]).output
    assert "WARNING: 1 document, under 50: the first estimate applies, and it under-states right answers" in out
    assert "ldr tune --relevance" in out
    assert relevance_fit(one.manifest, rel["min_docs"])["small_index"] is None


def test_min_score_on_a_small_index_says_once_that_it_drops_right_answers(hybrid, caplog):
    """Issue 78: a first-hour trial's --min-score 0.5 on 18 documents returned nothing for 5 of 10
    questions ldr had ranked right; the search says why, once, in the log every interface shows."""
    from ldr.search.stages import relevance as stage

    _, one = hybrid
    stage._WARNED.discard(1)
    with caplog.at_level("WARNING", logger="ldr"):
        one.search(QUERIES[0], min_score=0.5)
        one.search(QUERIES[1], min_score=0.5)
        one.search(QUERIES[2])
    said = [r.getMessage() for r in caplog.records if "min_score on an index of 1 document" in r.getMessage()]
    assert len(said) == 1 and "under-states right answers" in said[0] and "ldr tune --relevance" in said[0]


def _many_docs(n: int = 64) -> list[dict]:
    """`n` short documents of made-up prose (enough for the query fit: calibration.min_docs())."""
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(11)
    return [{"id": f"d{i:02d}", "text": " ".join(fake.paragraph(nb_sentences=6) for _ in range(3)),
             "part": "a" if i % 2 else "b"} for i in range(n)]


def test_the_query_fit_places_bm25_in_the_query_s_scores_over_the_whole_index(tmp_path):
    """Issue 59: on an index of min_docs documents or more, the relevance reads the document's BM25
    as a z-score in the query's BM25 scores over every document of the index and as a share of the
    index's best, whatever a filter leaves and however many shards hold the documents; a smaller
    index keeps the first fit (its features over the query's bound)."""
    from ldr.search import calibration
    from ldr.sharded import ShardedIndex

    docs = _many_docs()
    assert len(docs) >= calibration.min_docs() > 10
    one = ldr.Index.build(docs, tmp_path / "one", dense=None, sparse=None)
    four = ShardedIndex.build(docs, tmp_path / "four", shards=4, dense=None, sparse=None)
    small = ldr.Index.build(docs[:10], tmp_path / "small", dense=None, sparse=None)
    assert "bm25.z" in one.info()["relevance"]["reads"]
    for d in (docs[5], docs[40]):
        q = " ".join(d["text"].split()[3:9])
        hits = one.search(q, k=5)
        top = hits[0]
        every = one.search(q, k=len(one), mode="bm25", passages=0)
        s = np.array([h.scores["bm25"] for h in every] + [0.0] * (len(one) - len(every)))
        assert top.scores["relevance.bm25.z"] == pytest.approx((top.scores["bm25"] - s.mean()) / s.std(), rel=1e-5)
        assert top.scores["relevance.bm25.best"] == pytest.approx(top.scores["bm25"] / s.max(), rel=1e-6)
        assert 0 <= top.scores["relevance.cover"] <= 1 and "relevance.bm25" not in top.scores
        alone = one.search(q, filters={"id": top.id})
        assert alone[0].relevance == pytest.approx(top.relevance, abs=1e-9)
        # the other half of the documents through a filter: the same estimate for each
        other = {h.id: h.relevance for h in one.search(q, k=5, filters={"part": d["part"]})}
        assert all(other[h.id] == pytest.approx(h.relevance, abs=1e-9) for h in hits if h.id in other)
        sharded = four.search(q, k=5)
        assert [(h.id, round(h.relevance, 6)) for h in sharded] == [(h.id, round(h.relevance, 6)) for h in hits]
        first = small.search(q, k=3)[0]
        assert "relevance.bm25" in first.scores and "relevance.bm25.z" not in first.scores
    assert top.id == "d40" and top.relevance > 0.5
