"""`ldr tune`: fusion settings fused offline rank like the real pipeline; the chosen setting is
scored on held-out halves and committed as the index's search defaults (a new generation)."""
import json
import random

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.eval.tune import TuneOptions, _Offline, tune

from conftest import manifest_of

TOPICS = {
    "harbour": "harbour lamp storm reef gannet kittiwake tide whale",
    "lease": "contract clause tenant lease rent landlord deposit notice",
    "budget": "meeting budget ledger audit invoice forecast spending cost",
    "orbit": "river valley engine turbine orbit comet rocket launch",
}


def make_corpus(n: int = 24, seed: int = 0):
    rng = random.Random(seed)
    docs, queries, qrels = [], {}, {}
    topics = list(TOPICS)
    for i in range(n):
        t = topics[i % len(topics)]
        words = TOPICS[t].split()
        body = " ".join(rng.choice(words) for _ in range(rng.randint(40, 90)))
        code = f"ref{i:03d}k"      # a rare token only BM25 matches exactly
        docs.append({"id": f"d{i:03d}", "title": f"{t} note {i}", "text": f"{body} {code} {body[:80]}"})
        queries[f"q{i:03d}"] = f"{rng.choice(words)} {code}"
        qrels[f"q{i:03d}"] = {f"d{i:03d}": 1}
    return docs, queries, qrels


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    from ldr.encode.dense import DenseSettings

    root = tmp_path_factory.mktemp("tune")
    docs, queries, qrels = make_corpus()
    data = root / "data"
    (data / "qrels").mkdir(parents=True)
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (data / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, ds in qrels.items() for d, r in ds.items()))
    idx = root / "idx"
    ldr.Index.build(docs, idx, dense=DenseSettings(max_length=32, device="cpu"))
    return idx, data, queries, qrels


def test_offline_fusion_ranks_like_the_search_pipeline(beir):
    idx, _, queries, _ = beir
    index = ldr.Index(idx)
    names = ["bm25", "dense", "sparse"]
    runs = {n: {q: {h.id: h.score for h in index.search(t, k=len(index), mode=n, rerank=False)}
                for q, t in queries.items()} for n in names}
    off = _Offline(runs, names, sorted(queries))
    for method, k, w in (("minmax", 60, (1, 0.25, 0.25)), ("zscore", 60, (0.5, 1, 0)), ("rrf", 10, (1, 1, 0.5))):
        (fused,) = off.runs(method, k, np.array([w], float), 10)
        for q, t in queries.items():
            hits = index.search(t, k=10, fusion=method, weights=dict(zip(names, w)), rrf_k=k, rerank=False,
                                window_weight=0)
            assert list(fused[q]) == [h.id for h in hits], (method, q)


def test_tune_chooses_on_held_out_halves(beir):
    idx, data, queries, qrels = beir
    report = tune(ldr.Index(idx), queries, qrels, TuneOptions(rerank_depths=(5,), progress=False))
    assert report["queries"] == 24 and report["n_grid"] > 100 and 1 <= report["n_settings"] <= 12
    h = report["held_out"]
    assert len(h["halves"]) == 2 and 0 <= h["tuned"] <= 100 and 0 <= h["default"] <= 100
    # the final choice is the best on all queries, at least as good as the defaults there
    assert report["full"]["chosen"] >= report["full"]["default"]
    assert report["candidates"][0]["score"] == pytest.approx(report["full"]["chosen"])


def test_cli_tune_commits_the_defaults_and_info_shows_them(beir, tmp_path):
    import shutil
    idx = tmp_path / "idx"
    shutil.copytree(beir[0], idx)
    gen = manifest_of(idx)["generation"]
    r = CliRunner().invoke(main, ["tune", "-i", str(idx), "--data", str(beir[1]), "--rerank-depths", "5", "-q"])
    assert r.exit_code == 0, r.output
    assert "held-out" in r.output and "committed as the search defaults" in r.output
    m = manifest_of(idx)
    assert m["generation"] == gen + 1 and m["history"][-1]["op"] == "tune"
    t = m["search"]["tuned"]
    assert t["split"] == "dev" and t["queries"] == 24
    index = ldr.Index(idx)
    d = index.search_defaults()
    assert d["fusion"] in ("rrf", "minmax", "zscore") and set(d["weights"]) == {"bm25", "dense", "sparse"}
    assert index.search("lease ref005k", k=3)[0].id == "d005"
    info = CliRunner().invoke(main, ["info", str(idx)])
    assert "tuned by `ldr tune`" in info.output and "held-out ndcg@10" in info.output
    # a split that is not there: a clear error naming the ones that are
    r = CliRunner().invoke(main, ["tune", "-i", str(idx), "--data", str(beir[1]), "--split", "test"])
    assert r.exit_code == 2 and "splits present: dev" in r.output
    assert manifest_of(idx)["generation"] == gen + 1


def test_rerank_weight_mixes_the_second_stage_with_the_fused_score(beir):
    from ldr.errors import QueryError
    from ldr.search.stages.rerank import mix
    from ldr.eval.tune import _reweighted

    idx, _, queries, _ = beir
    index = ldr.Index(idx)
    for q in sorted(queries)[:6]:
        t = queries[q]
        alone = index.search(t, k=8, rerank="passage", rerank_depth=8, rerank_weight=1)
        assert [h.score for h in alone] == [h.scores["reranked.raw"] for h in alone]     # weight 1: its score alone
        default = index.search(t, k=8, rerank="passage", rerank_depth=8)          # 0.15 by default
        # mixed with the stage before it: the window stage's score (the fused one without it)
        assert [h.score for h in default] == pytest.approx(list(mix([h.scores["reranked.raw"] for h in default],
                                                                    [h.scores["windows"] for h in default], 0.15)))
        for w in (0.5, 0.25):
            hits = index.search(t, k=8, rerank="passage", rerank_depth=8, rerank_weight=w)
            final = mix([h.scores["reranked.raw"] for h in hits], [h.scores["windows"] for h in hits], w)
            assert [h.score for h in hits] == pytest.approx(list(final))
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            # what tune derives from the weight-1 run is what the pipeline does with the weight
            assert _reweighted(alone, w, index.docstore.ids, index.docstore.id_order) == [h.id for h in hits], (q, w)
    assert [h.id for h in index.search(queries["q001"], k=5, rerank="passage", rerank_depth=5, rerank_weight=0)] == \
        [h.id for h in index.search(queries["q001"], k=5, rerank=False)]
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(QueryError, match="rerank_weight"):
            index.search("lease", rerank="passage", rerank_weight=bad)


def test_tune_rerank_only_keeps_the_fusion_and_tries_weights(beir, tmp_path):
    import shutil
    idx = tmp_path / "idx"
    shutil.copytree(beir[0], idx)
    index = ldr.Index(idx)
    before = index.search_defaults()
    report = tune(index, beir[2], beir[3], TuneOptions(rerank_depths=(5,), rerank_weights=(1.0, 0.5), rerank_only=True,
                                                       progress=False))
    c = report["chosen"]
    assert (c["fusion"], c["weights"]) == (before["fusion"], before["weights"])
    # reranking is kept only when it also wins on the held-out halves
    rej = report["rerank_rejected"]
    if rej:
        assert not (c.get("rerank") or c.get("rerank_model")) and rej["held_out"] <= rej["held_out_without"]
    # the index's fusion alone, and the passage rescorer at weights 1 and 0.5
    assert report["n_settings"] == 3
    assert {x["setting"].split(", ", 1)[1] for x in report["candidates"]} == {
        "no rerank", "rerank passage top 5", "rerank passage top 5 weight 0.5"}
    r = CliRunner().invoke(main, ["tune", "-i", str(idx), "--data", str(beir[1]), "--rerank-only",
                                  "--rerank-depths", "5", "--rerank-weights", "0.5", "-q"])
    assert r.exit_code == 0, r.output
    d = ldr.Index(idx).search_defaults()
    assert (d["fusion"], d["weights"]) == (before["fusion"], before["weights"])
    assert d["rerank_weight"] in (0.5, 1.0) and (d["rerank"] == "passage") == \
        ("rerank passage" in ldr.Index(idx).manifest["search"]["tuned"]["setting"])
    info = CliRunner().invoke(main, ["info", str(idx)])
    assert info.exit_code == 0, info.output
    for bad in ("0", "2", "x"):
        r = CliRunner().invoke(main, ["tune", "-i", str(idx), "--data", str(beir[1]), "--rerank-weights", bad])
        assert r.exit_code == 2 and "--rerank-weights" in r.output


def test_reranking_is_kept_only_when_it_wins_on_held_out_halves():
    from ldr.eval.tune import _decide, _key
    plain = {"fusion": "minmax", "weights": {"bm25": 1.0}, "rrf_k": 60, "rerank": None}
    rr = {**plain, "rerank": "passage", "rerank_depth": 20}
    halves = (["q1", "q2"], ["q3", "q4"])
    settings = {_key(plain): plain, _key(rr): rr}
    # best on all queries (0.55 > 0.5) only thanks to one half: chosen there, it loses on the other
    scores = {_key(plain): dict.fromkeys(["q1", "q2", "q3", "q4"], 0.5),
              _key(rr): {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.2}}
    final, picks, held, rejected = _decide(scores, settings, halves, _key(plain))
    assert final == plain and rejected["held_out"] < rejected["held_out_without"] == 50.0
    assert held == dict.fromkeys(["q1", "q2", "q3", "q4"], 0.5)
    # better on both halves: kept
    scores[_key(rr)] = {"q1": 0.9, "q2": 0.6, "q3": 0.7, "q4": 0.6}
    final, picks, held, rejected = _decide(scores, settings, halves, _key(plain))
    assert final == rr and rejected is None and picks == [rr, rr]
