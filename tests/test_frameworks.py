"""The frameworks' own tests for third-party integrations (issue 58): LangChain's standard
`RetrieversIntegrationTests` (langchain-tests) with 0, 1 and 2 passages per document and its
`VectorStoreIntegrationTests` on an index that starts empty (every test, sync and async, with
ldr's own encoders: the suite's fake embeddings are not used), and LlamaIndex's
`RetrieverEvaluator` scoring ldr by document ids."""
from __future__ import annotations

import asyncio

import pytest

import ldr

pytest.importorskip("langchain_tests")
from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests  # noqa: E402

from ldr.integrations.langchain import LdrRetriever, LdrVectorStore  # noqa: E402

TOPICS = ["bridge bearing corrosion", "harbour trawlers gale", "lighthouse lamp keeper", "council repainting budget",
          "railway granite ballast", "tenant boiler repairs", "rowing club treasurer", "pump pressure valve"]
_INDEX: dict = {}


def _docs():
    filler = "The committee went through the remaining items of the agenda without a vote. " * 10   # ~380 tokens
    for i, topic in enumerate(TOPICS):
        yield {"id": f"doc{i}", "title": topic.title(), "text": filler + f"The {topic} was discussed at length. " + filler,
               "n": i}


@pytest.fixture(scope="module", autouse=True)
def index(tmp_path_factory):
    # the default index, as a user builds it (a BM25-only one returns only documents that share a
    # term with the query, fewer than the k the suite asks for)
    _INDEX["path"] = str(tmp_path_factory.mktemp("frameworks") / "idx")
    idx = ldr.Index.build(list(_docs()), _INDEX["path"])
    yield idx
    idx.close()


class _Standard(RetrieversIntegrationTests):
    passages = 1

    @property
    def retriever_constructor(self):
        return LdrRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"index": _INDEX["path"], "passages": self.passages}

    @property
    def retriever_query_example(self) -> str:
        return "what was said about the bridge bearing corrosion?"


class TestLangChainStandardNoPassages(_Standard):
    passages = 0


class TestLangChainStandardOnePassage(_Standard):
    passages = 1


class TestLangChainStandardTwoPassages(_Standard):
    passages = 2


@pytest.fixture(scope="module")
def empty_template(tmp_path_factory):
    """One empty default index, copied for each test (creating one loads and describes every model)."""
    path = tmp_path_factory.mktemp("empty") / "idx"
    ldr.Index.create(path).close()
    return path


def _store_from(template, tmp_path):
    """A store over a copy of an empty index (the suite's tests each want a fresh one)."""
    import shutil

    shutil.copytree(template, tmp_path / "idx")
    store = LdrVectorStore(str(tmp_path / "idx"))
    yield store
    store.index.close()


class TestLangChainVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, empty_template, tmp_path):
        yield from _store_from(empty_template, tmp_path)


def test_the_vector_store_creates_its_index_and_filters(tmp_path):
    from langchain_core.documents import Document

    store = LdrVectorStore.from_texts(["the keeper relit the lamp", "granite ballast for the sidings"],
                                      metadatas=[{"lang": "en"}, {"lang": "de"}], ids=["lamp", "rail"],
                                      path=str(tmp_path / "new"), build_options={"sparse": None})
    assert "sparse" not in store.index.manifest["components"] and len(store.index) == 2
    assert store.similarity_search("lamp", k=2, filter={"lang": "de"}) == \
        [Document(page_content="granite ballast for the sidings", metadata={"lang": "de"}, id="rail")]
    scored = store.similarity_search_with_relevance_scores("who relit the lamp", k=1)
    assert scored[0][0].id == "lamp" and 0.0 <= scored[0][1] <= 1.0
    assert [d.id for d in store.as_retriever(search_kwargs={"k": 1}).invoke("ballast")] == ["rail"]
    assert LdrVectorStore(str(tmp_path / "new")).get_by_ids(["rail", "nope"])[0].metadata == {"lang": "de"}


def test_llamaindex_retriever_evaluator_scores_document_ids(index):
    """RetrieverEvaluator compares retrieved node ids with expected ids: with `per_document=True`
    those are the documents' ids, so finding the right document scores a hit."""
    from llama_index.core.evaluation import RetrieverEvaluator

    from ldr.integrations.llamaindex import LdrRetriever as LlamaRetriever

    retriever = LlamaRetriever(index, k=3, passages=2, per_document=True)
    evaluator = RetrieverEvaluator.from_metric_names(["hit_rate", "mrr"], retriever=retriever)
    queries = [(f"what about the {t}?", [f"doc{i}"]) for i, t in enumerate(TOPICS)]
    results = [evaluator.evaluate(q, expected_ids=ids) for q, ids in queries]
    assert all(r.metric_vals_dict["hit_rate"] == 1.0 for r in results)
    assert sum(r.metric_vals_dict["mrr"] for r in results) / len(results) == 1.0
    # its async path (aretrieve in a worker thread)
    got = asyncio.run(evaluator.aevaluate("lighthouse lamp keeper", expected_ids=["doc2"]))
    assert got.metric_vals_dict["hit_rate"] == 1.0
    nodes = retriever.retrieve("rowing club treasurer")
    assert nodes[0].node.node_id == "doc6" and nodes[0].score == index.search("rowing club treasurer", k=1)[0].score
    # by passage (the default), node ids are passage ids and their document is the SOURCE
    by_passage = LlamaRetriever(index, k=3, passages=2).retrieve("rowing club treasurer")
    assert by_passage[0].node.node_id.startswith("doc6#") and by_passage[0].node.source_node.node_id == "doc6"


def _beir_data():
    corpus = {f"doc{i}": {"title": t.title(), "text": d["text"]} for i, (t, d) in enumerate(zip(TOPICS, _docs()))}
    queries = {f"q{i}": f"what about the {t}?" for i, t in enumerate(TOPICS)}
    qrels = {f"q{i}": {f"doc{i}": 1} for i in range(len(TOPICS))}
    return corpus, queries, qrels


def test_beir_evaluates_an_index_the_user_built(index):
    """BEIR's own EvaluateRetrieval over LdrSearch: on the index built above (its documents checked
    against BEIR's corpus by id), and a corpus the index lacks is refused."""
    pytest.importorskip("beir")
    from beir.retrieval.evaluation import EvaluateRetrieval

    from ldr.errors import ConfigError
    from ldr.integrations.beir import LdrSearch

    corpus, queries, qrels = _beir_data()
    evaluator = EvaluateRetrieval(LdrSearch(index=_INDEX["path"]), k_values=[1, 3])
    results = evaluator.retrieve(corpus, queries)
    assert set(results) == set(queries) and all(len(r) == 3 for r in results.values())
    ndcg, _map, recall, _p = evaluator.evaluate(qrels, results, evaluator.k_values)
    assert ndcg["NDCG@1"] == 1.0 and recall["Recall@3"] == 1.0
    with pytest.raises(ConfigError, match="lacks 1 of"):
        LdrSearch(index=_INDEX["path"]).search({**corpus, "other": {"text": "x"}}, queries, 3)


def test_beir_builds_from_its_corpus(tmp_path):
    pytest.importorskip("beir")
    from ldr.integrations.beir import LdrSearch

    corpus, queries, _ = _beir_data()
    search = LdrSearch(path=str(tmp_path / "b"), build_options={"dense": None, "sparse": None}, mode="bm25")
    results = search.search(corpus, {"q2": queries["q2"]}, 2, "cos_sim")
    assert next(iter(sorted(results["q2"].items(), key=lambda kv: -kv[1])))[0] == "doc2"
    assert (tmp_path / "b").is_dir()


def test_pyterrier_experiment_runs_ldr(index):
    pt = pytest.importorskip("pyterrier")
    import pandas as pd

    from ldr.integrations.pyterrier import LdrRetrieve

    _, queries, qrels = _beir_data()
    topics = pd.DataFrame({"qid": list(queries), "query": [q.rstrip("?") for q in queries.values()]})
    qrels_df = pd.DataFrame([{"qid": q, "docno": d, "label": 1} for q, ds in qrels.items() for d in ds])
    retr = LdrRetrieve(index, k=5)
    ranked = retr.transform(topics.head(2))
    assert list(ranked.columns) == ["qid", "query", "docno", "score", "rank"] and ranked["rank"].min() == 0
    res = pt.Experiment([retr, retr % 1], topics, qrels_df, eval_metrics=["ndcg_cut_10", "recip_rank"],
                        names=["ldr", "ldr top 1"])
    assert res.set_index("name").loc["ldr", "recip_rank"] == 1.0
    with_text = LdrRetrieve(index, k=1, text=True).transform(topics.head(1))
    assert "bridge bearing corrosion" in with_text["text"][0]
    # issue 76: a text re-ranker's inputs: text_loader (PyTerrier's convention), title and passage columns
    loaded = pt.text.get_text(retr, ["text", "title"])(retr.transform(topics.head(1)))
    assert list(loaded["text"]) == [index.document(d).text for d in loaded["docno"]]
    rows = LdrRetrieve(index, k=2, title=True, passage=True).transform(topics.head(1))
    assert {"title", "passage", "passage_start", "passage_end"} <= set(rows.columns)
    doc = index.document(rows["docno"][0]).text
    assert doc[rows["passage_start"][0]:rows["passage_end"][0]] == rows["passage"][0] != ""


@pytest.fixture(scope="module")
def empty_bm25_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("empty-bm25") / "idx"
    ldr.Index.create(path, dense=None, sparse=None).close()
    return path


# These tests search "foo" over the documents "foo" and "bar" with k=2 and expect both back: an
# embedding ranks every document, so k is filled whatever the words. BM25 returns only documents
# holding a query term ("bar" holds none), as Lucene, tantivy and bm25s do; docs/rag.md says so.
_FILLS_K = ["test_add_documents", "test_deleting_documents", "test_deleting_bulk_documents",
            "test_add_documents_with_ids_is_idempotent", "test_add_documents_by_id_with_mutation"]


def _assumes_an_embedding(name: str):
    import inspect

    base = getattr(VectorStoreIntegrationTests, name)
    if inspect.iscoroutinefunction(base):
        async def test(self, vectorstore):
            await base(self, vectorstore)
    else:
        def test(self, vectorstore):
            base(self, vectorstore)
    test.__name__ = name
    return pytest.mark.xfail(strict=True, reason="assumes an embedding that fills k: BM25 returns only documents "
                                                 "holding a query term")(test)


class TestLangChainVectorStoreBM25(VectorStoreIntegrationTests):
    """Issue 76: LangChain's vector-store suite on a BM25-only store (no model at all): every test
    passes but the ten (_FILLS_K, sync and async) that assume an embedding fills k."""

    for _name in _FILLS_K:
        locals()[_name] = _assumes_an_embedding(_name)
        locals()[_name + "_async"] = _assumes_an_embedding(_name + "_async")
    del _name

    @pytest.fixture
    def vectorstore(self, empty_bm25_template, tmp_path):
        yield from _store_from(empty_bm25_template, tmp_path)


def test_the_vector_store_answers_mmr_scores_and_deletes_as_langchain_users_expect(tmp_path):
    """Issue 76: `as_retriever(search_type="mmr")` raised a bare NotImplementedError;
    `similarity_search_with_score` gave the top hit 1.0 whatever the query; `from_documents(docs,
    embedding=None)` did not name `path=`; `delete(None)` deleted nothing (LangChain: every one)."""
    from langchain_core.documents import Document

    from ldr.errors import ConfigError

    texts = ["the keeper relit the lamp at dusk", "the keeper relit the lamp at dusk again",
             "the lamp of the lighthouse was relit by its keeper", "granite ballast for the railway sidings"]
    with pytest.raises(ValueError, match="path="):
        LdrVectorStore.from_documents([Document(page_content=t) for t in texts], embedding=None)
    store = LdrVectorStore.from_texts(texts, ids=["a", "a2", "b", "rail"], path=str(tmp_path / "vs"),
                                      build_options={"sparse": None})
    plain = [d.id for d in store.similarity_search("keeper relit the lamp", k=2)]
    mmr = [d.id for d in store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4,
                                                                             "lambda_mult": 0.3})
           .invoke("keeper relit the lamp")]
    assert plain == ["a", "a2"] and mmr[0] == "a" and mmr[1] != "a2", (plain, mmr)   # the near-copy gives way
    scored = dict((d.id, s) for d, s in store.similarity_search_with_score("keeper relit the lamp", k=4))
    assert 0.0 <= min(scored.values()) and max(scored.values()) <= 1.0 and scored["a"] > scored["rail"]
    assert store.similarity_search_with_score("granite ballast", k=1)[0][1] != scored["a"]
    assert store.delete() is True and store.index.live_ids() == []
    bm25 = LdrVectorStore(str(tmp_path / "bm25"), build_options={"dense": None, "sparse": None})
    bm25.add_texts(texts)
    with pytest.raises(ConfigError, match="dense"):
        bm25.max_marginal_relevance_search("lamp", k=2)


def test_a_llamaindex_vector_store_takes_the_calls_a_llamaindex_user_makes(tmp_path):
    """Issue 76: no LlamaIndex vector store. VectorStoreIndex over ldr: from_vector_store,
    from_documents through a StorageContext, insert, as_retriever, filters, delete_ref_doc."""
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.vector_stores.types import ExactMatchFilter, MetadataFilters

    from ldr.integrations.llamaindex_store import NO_EMBEDDING, LdrVectorStore as LlamaStore

    store = LlamaStore(str(tmp_path / "li"), build_options={"sparse": None})
    docs = [Document(text="The keeper relit the lamp of the lighthouse at dusk.", metadata={"team": "red"},
                     doc_id="lamp"),
            Document(text="Granite ballast was laid for the railway sidings.", metadata={"team": "blue"}, doc_id="rail")]
    index = VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(vector_store=store),
                                            embed_model=NO_EMBEDDING)
    got = index.as_retriever(similarity_top_k=1).retrieve("who relit the lamp?")
    assert got[0].node.ref_doc_id == "lamp" and 0.0 <= got[0].score <= 1.0 and "keeper" in got[0].node.text
    index.insert(Document(text="Tide tables for the estuary in May.", metadata={"team": "red"}, doc_id="tide"))
    again = LlamaStore(str(tmp_path / "li")).as_index()
    red = again.as_retriever(similarity_top_k=5, filters=MetadataFilters(filters=[ExactMatchFilter(key="team",
                                                                                                 value="red")]))
    assert sorted(n.node.ref_doc_id for n in red.retrieve("lamp tide estuary")) == ["lamp", "tide"]
    again.delete_ref_doc("lamp")
    left = again.as_retriever(similarity_top_k=5).retrieve("lamp tide estuary railway")
    assert sorted(n.node.ref_doc_id for n in left) == ["rail", "tide"]
    assert {n.ref_doc_id for n in store.get_nodes()} >= {"rail", "tide"}


def test_mteb_evaluates_ldr_on_a_local_retrieval_task(tmp_path):
    """Issue 76: nothing for MTEB users. `mteb.evaluate` runs LdrSearchModel (an MTEB
    SearchProtocol) on a local retrieval task; its nDCG@10 is the one ldr's own metrics give the
    same index's run."""
    mteb = pytest.importorskip("mteb")
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    from ldr.eval.metrics import evaluate
    from ldr.integrations.mteb import LdrSearchModel

    docs = {f"d{i}": f"report {i} on the harbour lamp and the tides; bearing plates {i % 3} " * 3
            + ("granite quarry" if i % 4 == 0 else "") for i in range(12)}
    queries = {"q1": "granite quarry report", "q2": "bearing plates 2", "q3": "harbour lamp tides report 7",
               "q4": "tides of the harbour"}
    qrels = {"q1": {"d0": 1, "d4": 1, "d8": 1}, "q2": {"d2": 1, "d5": 1}, "q3": {"d7": 1}, "q4": {"d9": 1, "d1": 1}}

    class Local(AbsTaskRetrieval):
        metadata = TaskMetadata(name="LdrLocal", description="a local task", dataset={"path": "local", "revision": "0"},
                                type="Retrieval", category="t2t", eval_splits=["test"], eval_langs=["eng-Latn"],
                                main_score="ndcg_at_10")

        def load_data(self, **kwargs):
            self.dataset = {"default": {"test": {
                "corpus": Dataset.from_list([{"id": k, "title": "", "text": v} for k, v in docs.items()]),
                "queries": Dataset.from_list([{"id": k, "text": v} for k, v in queries.items()]),
                "relevant_docs": qrels, "top_ranked": None}}}
            self.data_loaded = True

    model = LdrSearchModel(folder=str(tmp_path), build_options={"dense": None, "sparse": None})
    got = mteb.evaluate(model, [Local()], cache=None, overwrite_strategy="always")
    ndcg = got.task_results[0].scores["test"][0]["ndcg_at_10"]
    index = ldr.open(next(tmp_path.iterdir()))
    run = {q: {h.id: h.score for h in index.search(t, k=100, passages=0)} for q, t in queries.items()}
    assert ndcg == pytest.approx(evaluate(qrels, run, ("ndcg@10",))["ndcg@10"], abs=1e-4)
    assert 0 < ndcg < 1
