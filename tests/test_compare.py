"""`ldr eval --qrels --run`: run files scored with trec_eval semantics and compared with paired
significance tests (issue 29)."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import pytrec_eval

from conftest import cli_run
from ldr.eval.compare import compare, holm, randomisation_p, read_qrels
from ldr.eval.runs import write_run


def fixture(seed=0, n_q=60, n_d=50):
    rng = random.Random(seed)
    qrels = {f"q{i}": {f"d{rng.randrange(n_d)}": rng.choice([1, 2]) for _ in range(3)} for i in range(n_q)}
    noisy = {q: {f"d{j}": rng.random() for j in range(n_d)} for q in qrels}
    good = {q: {**noisy[q], **{d: 2 + rng.random() for d in rel}} for q, rel in qrels.items()}   # relevant first
    return qrels, noisy, good


def test_scores_equal_pytrec_eval():
    qrels, noisy, _ = fixture()
    res = compare(qrels, {"a": noisy}, permutations=100)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "map"}).evaluate(noisy)
    for m, key in (("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100"), ("map", "map")):
        assert res["runs"]["a"][m] == pytest.approx(np.mean([ref[q][key] for q in qrels]), abs=1e-6)


def test_a_known_difference_is_significant_and_identical_runs_are_not():
    qrels, noisy, good = fixture()
    res = compare(qrels, {"base": noisy, "same": noisy, "better": good}, permutations=2000)
    same, better = res["tests"]["same"]["ndcg@10"], res["tests"]["better"]["ndcg@10"]
    assert same["p_t"] == 1.0 and same["p_randomisation"] == 1.0 and not same["significant"]
    assert better["delta"] > 0.3 and better["p_t_holm"] < 1e-6 and better["p_randomisation_holm"] < 0.01
    assert better["significant"]


def test_holm_and_the_randomisation_test():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert randomisation_p(np.zeros(10)) == 1.0
    assert randomisation_p(np.ones(30), 999) == pytest.approx(1 / 1000)      # all 2^30 flips but one are smaller


def test_cli_compares_run_files(tmp_path):
    qrels, noisy, good = fixture(1)
    (tmp_path / "qrels.txt").write_text("".join(f"{q} 0 {d} {r}\n" for q, docs in qrels.items() for d, r in docs.items()))
    write_run(tmp_path / "a.trec", noisy, "a")
    write_run(tmp_path / "b.trec", good, "b")
    r = cli_run("eval", "--qrels", tmp_path / "qrels.txt", "--run", tmp_path / "a.trec", "--run", tmp_path / "b.trec",
                "--per-query", tmp_path / "pq.tsv", "--plot", tmp_path / "diff.png")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("b.trec"))
    assert "†" in row and "†" not in next(line for line in r.stdout.splitlines() if line.startswith("a.trec"))
    assert (tmp_path / "diff.png").stat().st_size > 1000
    assert len((tmp_path / "pq.tsv").read_text().splitlines()) == 1 + 2 * len(qrels) * 5
    j = json.loads(cli_run("eval", "--qrels", tmp_path / "qrels.txt", "--run", tmp_path / "a.trec", "--run",
                           tmp_path / "b.trec", "--json").stdout)
    assert j["tests"]["b.trec"]["ndcg@10"]["significant"] and j["queries"] == len(qrels)
    # a BEIR qrels TSV reads the same
    (tmp_path / "q.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, docs in qrels.items() for d, r in docs.items()))
    assert read_qrels(tmp_path / "q.tsv") == read_qrels(tmp_path / "qrels.txt")
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1 notanumber tag\n")
    r = cli_run("eval", "--qrels", tmp_path / "qrels.txt", "--run", tmp_path / "bad.trec")
    assert r.returncode == 2 and "line 1" in r.stderr and "Traceback" not in r.stderr
