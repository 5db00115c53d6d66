"""`ldr tune --relevance` (issue 78): the index's relevance recalibrated on the user's judgements,
committed in a new generation, used by every search of the kinds it was fitted on, named by
`ldr info`; its fit moves a miscalibrated estimate towards the labels, and its min_score states
the confidence it has."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.eval import relevance_fit as rf
from ldr.search.stages.relevance import own_relevance

from test_tune import beir  # noqa: F401  (the module fixture: index + BEIR folder)


def test_the_fit_moves_a_miscalibrated_estimate_to_the_labels():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.02, 0.98, 4000)
    y = (rng.uniform(size=p.size) < p ** 3).astype(int)      # the estimate over-states
    rows = {"p": p, "y": y, "q": np.array([f"q{i // 20}" for i in range(p.size)]),
            "estimate": np.array(["query"] * p.size), "x": np.zeros((p.size, 0)), "names": []}
    fit = rf.fit(rows)
    assert fit["ece"]["shipped"] > 0.15 and fit["ece"]["cross_validated"] < 0.03
    assert fit["queries"] == 200 and fit["estimate"] == "query"
    cut = fit["min_score"]
    assert cut["certified"] and cut["confidence"] >= 0.9
    kept = np.array([own_relevance(fit, x, {}) for x in p]) >= cut["threshold"]
    assert y[kept].mean() >= 0.8


def test_the_fit_converges_where_an_over_confident_estimate_nearly_separates_the_labels():
    """A family of hits the shipped estimate puts near 1 (half of them wrong) beside others near 0:
    Newton's full step went to a weight of ~350 on its logit (a man-bundles draw of 80 queries:
    held-out ECE 0.81); the fit's loss never rises, so the weights stay moderate and calibrated."""
    r = np.random.default_rng(0)
    n = 400
    fam = r.random(n) < 0.4
    p = np.where(fam, 1 - 10 ** r.uniform(-4, -1, n), 10 ** r.uniform(-4, -1, n))
    y = np.where(fam, r.random(n) < 0.45, r.random(n) < 0.02).astype(float)
    x = np.column_stack([np.where(fam, 1.0, r.uniform(0, 0.5, n)), r.normal(size=n) + 3 * fam])
    X = np.column_stack([rf.logit(p), np.ones(n), x])
    w = rf.logistic(X, y)
    assert np.abs(w).max() < 5
    q = 1 / (1 + np.exp(-X @ w))
    assert rf.ece(q, y) < 0.1 < rf.ece(p, y)


def test_the_threshold_says_when_the_labels_cannot_certify_it():
    # five hits of which four are relevant: precision 0.8, far from certain
    cut = rf.cut(np.array([0.9, 0.9, 0.9, 0.9, 0.9, 0.1]), np.array([1, 1, 1, 1, 0, 0]), 0.8, 0.9)
    assert cut["threshold"] > 0.1 and not cut["certified"] and 0.2 < cut["confidence"] < 0.9
    assert rf.cut(np.array([0.9, 0.8]), np.array([0, 0]), 0.8, 0.9) is None
    assert rf.confidence_of(100, 100, 0.8) > 0.999 and rf.confidence_of(10, 0, 0.8) == 0.0


def test_tune_relevance_commits_a_fit_every_search_of_its_kinds_uses(beir, tmp_path):  # noqa: F811
    idx, data, queries, _ = beir
    before = ldr.open(idx).generation
    r = CliRunner().invoke(main, ["tune", "--relevance", "-i", str(idx), "--data", str(data), "--dry-run", "--json",
                                  "-q"])
    assert r.exit_code == 0, r.output
    dry = json.loads(r.output)
    assert dry["queries"] == 24 and dry["hits"] > 24 and dry["estimate"] in ("query", "first")
    assert ldr.open(idx).generation == before                          # a dry run commits nothing
    r = CliRunner().invoke(main, ["tune", "--relevance", "-i", str(idx), "--data", str(data), "-q"])
    assert r.exit_code == 0, r.output
    assert "calibration error (ECE), 5-fold cross-validated by query" in r.output
    index = ldr.open(idx)
    assert index.generation == before + 1
    own = index.info()["relevance"]["own_fit"]
    assert own["queries"] == 24 and own["data"] == str(data.resolve())
    info = CliRunner().invoke(main, ["info", str(idx)])
    assert "recalibrated by `ldr tune --relevance` on 24 judged queries" in info.output, info.output
    fit = index.manifest["search"]["relevance_fit"]
    q = queries["q003"]
    for h in index.search(q, k=5, relevance=True):
        s = h.scores
        x = {n[len("relevance."):]: v for n, v in s.items() if n.startswith("relevance.") and n != "relevance.shipped"}
        cover = x.pop("cover", None)
        assert s["relevance"] == pytest.approx(own_relevance(fit, s.get("relevance.shipped", s["relevance"]), x, cover))
    assert "recalibrated on 24 judged queries" in index.plan(q, relevance=True).explain()
    # another mode's estimate is not the one it was fitted on: left as shipped
    assert all("relevance.shipped" not in h.scores for h in index.search(q, k=5, mode="dense", relevance=True))
