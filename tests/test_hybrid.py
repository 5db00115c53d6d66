"""The whole pipeline with the real packaged models: three retrievers → fusion → rerank."""
import json

import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import ConfigError

pytestmark = pytest.mark.slow

QUERY = "XQ-77 automobile repair price"
DOCS = [
    {"id": "R1-lexical", "text": "Form XQ-77 must be signed by the tenant before moving in."},
    {"id": "R2-semantic", "text": "What a mechanic charges to fix your car."},
    {"id": "D1", "text": "Buying tyres and brakes for a vehicle at the garage."},
    {"id": "D2", "text": "Motor insurance premiums for young drivers."},
    {"id": "D3", "text": "A recipe for lemon drizzle cake with icing."},
    {"id": "D4", "text": "The planets orbit the sun in elliptical paths."},
]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return ldr.Index.build(DOCS, tmp_path_factory.mktemp("h") / "idx", sparse=None)


def test_fusion_finds_what_each_retriever_misses(hybrid):
    bm25 = [h.id for h in hybrid.search(QUERY, k=2, mode="bm25")]
    dense = [h.id for h in hybrid.search(QUERY, k=2, mode="dense")]
    fused = [h.id for h in hybrid.search(QUERY, k=2, rerank=False)]
    assert "R2-semantic" not in bm25 and "R1-lexical" in bm25       # no shared terms
    assert "R1-lexical" not in dense and "R2-semantic" in dense     # semantically off
    assert set(fused) == {"R1-lexical", "R2-semantic"}


def test_every_hit_explains_its_rank(hybrid):
    plain = hybrid.search(QUERY, k=3)
    # default: the window stage's score (fused list and best window, both min-max), no rerank
    assert "reranked" not in plain[0].scores and plain[0].scores["windows"] == plain[0].score
    assert {"fused", "windows.best"} <= set(plain[0].scores) and "windows" in plain.timings_ms
    off = hybrid.search(QUERY, k=3, window_weight=0)
    assert "windows.best" not in off[0].scores and off[0].scores["fused"] == off[0].score
    hits = hybrid.search(QUERY, k=3, rerank="passage", rerank_weight=1)
    assert hits[0].scores["reranked"] == hits[0].score
    assert {"fused", "reranked", "reranked.dense", "reranked.bm25"} <= set(hits[0].scores)
    assert set(hits.timings_ms) >= {"bm25", "dense", "fused", "reranked"} and hits.reranker
    # the query encoders' time is a search's too (issue 80: most of it on long queries)
    assert {"encode.bm25", "encode.dense"} <= set(plain.timings_ms) and plain.took_ms >= sum(plain.timings_ms.values())
    minmax = hybrid.search(QUERY, k=3, fusion="minmax", weights={"bm25": 1.0, "dense": 0.0}, rerank=False)
    assert minmax[0].id == "R1-lexical"
    with pytest.raises(ConfigError, match="no 'sparse' component"):
        hybrid.search(QUERY, mode="sparse")


def test_cli_full_pipeline(tmp_path, sample_corpus):
    r = CliRunner()
    out = r.invoke(main, ["index", str(sample_corpus), "-o", str(tmp_path / "idx"), "-q"])
    assert out.exit_code == 0, out.output
    out = r.invoke(main, ["search", "stretch and folds during bulk fermentation", "-i", str(tmp_path / "idx"), "--json"])
    data = json.loads(out.output)
    assert data["mode"] == "hybrid" and data["hits"][0]["id"] == "sourdough-guide"
    assert {"bm25", "dense", "sparse", "fused"} <= set(data["stages"]) and data["reranker"] is None
    out = r.invoke(main, ["search", "stretch and folds during bulk fermentation", "-i", str(tmp_path / "idx"),
                          "--json", "--rerank", "passage"])
    data = json.loads(out.output)
    assert data["reranker"] == "passage" and "reranked" in data["stages"]
    assert data["hits"][0]["id"] == "sourdough-guide"
    for mode in ("bm25", "dense", "sparse"):
        out = r.invoke(main, ["search", "corrosion of the bearing plates", "-i", str(tmp_path / "idx"),
                              "--mode", mode, "-k", "1", "--json"])
        assert json.loads(out.output)["hits"][0]["id"] == "bridge-inspection-report.html", mode
    out = r.invoke(main, ["search", "x", "-i", str(tmp_path / "idx"), "--weights", "bm25"])
    assert out.exit_code == 2 and "name=number" in out.output
    out = r.invoke(main, ["info", str(tmp_path / "idx")])
    assert "sparse      splade-tiny" in out.output and "fusion=minmax" in out.output and "rerank=none" in out.output
