"""One search options schema (ldr.search.options.QueryOptions): every field reaches every
interface (the library, `ldr search`, the server's request model, the client, the LangChain and
LlamaIndex adapters, `ldr tune`'s settings), or the schema says why that interface has none."""
from __future__ import annotations

from dataclasses import fields

import pytest
from click.testing import CliRunner

import ldr
from ldr.errors import QueryError
from ldr.search.options import QueryOptions, names, spec

# a valid value other than the default for every field (rerank_model is a model: checked apart)
VALUES = {"k": 3, "mode": "bm25", "fusion": "rrf", "weights": {"bm25": 1.0}, "rrf_k": 10, "depth": 50,
          "rerank": False, "rerank_model": "some/cross-encoder", "rerank_depth": 5, "rerank_weight": 0.5,
          "rerank_windows": 2, "window_weight": 0.25, "window_depth": 7, "window_vectors": 0.5, "window_scales": "60:1", "phrase_weight": 0.2, "aspect_weight": 0.3, "filters": {"topic": "birds"}, "passages": 2, "min_score": 0.001,
          "with_text": True, "with_meta": False, "stages": {}, "relevance": False}
DOCS = [{"id": f"d{i}", "text": f"herons and cranes {i} wade in the marsh", "topic": "birds" if i % 2 else "marsh"}
        for i in range(6)]


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    return ldr.Index.build(DOCS, tmp_path_factory.mktemp("opt") / "idx", bm25="native", dense=None, sparse=None)


def test_every_field_has_a_test_value_and_a_valid_default():
    assert set(VALUES) == set(names())
    QueryOptions()                                            # defaults validate
    QueryOptions.of(**VALUES)                                 # so do the test values
    with pytest.raises(QueryError, match="unknown search option"):
        QueryOptions.of(kk=1)
    for bad in ({"k": 0}, {"rerank_weight": 2}, {"rerank_windows": 0}, {"passages": -1}, {"depth": "10"},
                {"with_text": "yes"}, {"filters": ["lang"]}):
        with pytest.raises(QueryError, match=next(iter(bad))):
            QueryOptions.of(**bad)


def test_every_field_reaches_the_library(idx):
    for name, value in VALUES.items():
        if name == "rerank_model":
            continue          # loading a model is tested with the cross-encoder (test_rerank.py)
        res = idx.search("herons", **{name: value})
        assert len(res) >= 1, name
    hits = idx.search("herons", filters=VALUES["filters"], k=10)
    assert hits and all(h.meta["topic"] == "birds" for h in hits)
    assert idx.search("herons", passages=2, with_text=True)[0].text is not None
    assert idx.search("herons", with_meta=False)[0].meta is None


def test_every_field_reaches_the_cli(idx):
    from ldr.cli import main
    from ldr.cli.search import search_cmd

    params = {p.name for p in search_cmd.params}
    for f in fields(QueryOptions):
        flags = f.metadata["cli"]
        assert f.name in params or (isinstance(flags, str) and flags), f.name
    out = CliRunner().invoke(main, ["search", "herons", "-i", str(idx.path), "-k", "2", "--fusion", "rrf",
                                    "--rrf-k", "10", "--filter", "topic=birds", "--json", "--text", "-p", "1"])
    assert out.exit_code == 0, out.output
    import json
    got = json.loads(out.output)
    assert len(got["hits"]) == 2 and all(h["meta"]["topic"] == "birds" and h["text"] for h in got["hits"])


def test_every_field_reaches_the_server_model_and_the_client(monkeypatch):
    pytest.importorskip("fastapi")
    from ldr.serve.app import SearchRequest
    from ldr.serve.client import Client

    served = set(SearchRequest.model_fields)
    for f in fields(QueryOptions):
        assert f.name in served or isinstance(spec(f.name)["server"], str), f.name
        if f.name in served:
            info = SearchRequest.model_fields[f.name]
            assert info.description == f.metadata["help"]
    assert SearchRequest.model_fields["passages"].default == 1
    sent = []
    client = Client("http://127.0.0.1:9")
    monkeypatch.setattr(client, "_call", lambda method, path, json: sent.append(json) or
                        {"hits": [], "query": json["query"], "generation": 1})
    for name in served - {"query"}:
        client.search("herons", **{name: VALUES[name]})
        assert sent[-1][name] == VALUES[name], name
    with pytest.raises(QueryError, match="rerank_model"):
        client.search("herons", rerank_model="x")            # a server loads no model a request names
    with pytest.raises(QueryError, match="unknown search option"):
        client.search("herons", kk=1)


def test_the_rag_adapters_pass_options_through(idx):
    from ldr.integrations.langchain import LdrRetriever as LC
    from ldr.integrations.llamaindex import LdrRetriever as LI

    # search_kwargs={"k": 2} used to raise "multiple values for keyword argument 'k'"
    docs = LC(index=idx, k=5, search_kwargs={"k": 2, "filters": {"topic": "birds"}, "fusion": "rrf"}).invoke("herons")
    assert len({d.metadata["doc_id"] for d in docs}) == 2 and all(d.metadata["topic"] == "birds" for d in docs)
    nodes = LI(idx, k=5, search_kwargs={"k": 1, "passages": 2}).retrieve("herons")
    assert len({n.node.metadata["doc_id"] for n in nodes}) == 1


def test_tune_settings_and_index_defaults_speak_the_schema():
    from ldr.search.options import SearchOptions
    from ldr.eval.tune import _grid, as_search_defaults

    known = set(names())
    assert {f.name for f in fields(SearchOptions)} <= known
    for setting in _grid(["bm25", "dense"])[:5]:
        assert set(setting) <= known
    chosen = {"fusion": "rrf", "weights": {"bm25": 1.0}, "rrf_k": 10, "rerank": "passage", "rerank_depth": 20,
              "rerank_weight": 0.5, "rerank_model": "m"}
    assert set(as_search_defaults(chosen, {})) <= known
