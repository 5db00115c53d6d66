"""The query plan (ldr/search/plan.py): options checked once and turned into a value that can be
printed and split; a stage defined only in this file (a boost by a metadata field) plugs into
the plan, `ldr search`, the server, `ldr eval` and `ldr tune` without an edit elsewhere, as the
trigram kind does for retriever kinds (test_components.py)."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import QueryError
from ldr.search.stages import Candidates, StageType, register_stage
from ldr.search.stages.base import unregister_stage

HERE = Path(__file__).resolve().parent
DOCS = [{"id": f"d{i}", "title": f"note {i}", "text": f"gannets and kittiwakes over the reef, note {i}. " * (3 + i % 3),
         "priority": i % 4} for i in range(12)]


# -- the toy stage: everything a stage type needs, here and nowhere else ---------------------------
@dataclass
class BoostSettings:
    field: str = "priority"
    weight: float = 1.0


@dataclass(frozen=True)
class Boost:
    """Adds weight × the numeric metadata `field` to each candidate's score and re-ranks."""

    settings: BoostSettings
    side = "coordinator"
    name = "boost"

    def needs(self) -> int:
        return 0

    def describe(self) -> str:
        return f"score + {self.settings.weight:g} x {self.settings.field}"

    def run(self, cands: Candidates, source) -> Candidates:
        with cands.timed(self.name):
            docnos = [d for d, _, _ in cands.rows]
            meta = source.meta(docnos)
            rows = []
            for d, sc, st in cands.rows:
                v = sc + self.settings.weight * float(meta[d].get(self.settings.field, 0) or 0)
                rows.append((d, v, dict(st, boost=v)))
            tiebreak = source.tiebreak()
            rows.sort(key=lambda r: (-r[1], tiebreak[r[0]]))
            cands.rows = rows
            cands.runs[self.name] = {d: s for d, s, _ in rows}
        return cands


def register() -> None:
    register_stage(StageType("boost", BoostSettings, Boost, after="windows", help="boost by a metadata field"))


register()      # imported as a plugin (LDR_PLUGINS=test_plan) the server registers it the same way


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    return ldr.Index.build(DOCS, tmp_path_factory.mktemp("plan") / "idx", bm25="native", dense=None, sparse=None)


# -- the plan as a value -----------------------------------------------------------------------------
def test_a_plan_prints_its_stages_and_where_each_setting_came_from(idx):
    plan = idx.plan("gannets reef", k=3, passages=1, window_depth=7)
    text = plan.explain()
    assert [s.name for s in plan.first] == ["bm25"] and plan.first[0].side == "shard"
    assert [s.name for s in plan.rest] == ["fused", "windows", "relevance", "passages"]
    assert "windows    top 7" in text and "[language en, request]" in text   # depth asked, weight English
    assert "off: reranked" in text
    out = CliRunner().invoke(main, ["search", "gannets reef", "-i", str(idx.path), "--explain", "--window-depth", "7"])
    assert out.exit_code == 0 and out.output.strip() == idx.plan("gannets reef", k=10, passages=1,
                                                                  window_depth=7).explain()
    as_json = json.loads(CliRunner().invoke(main, ["search", "gannets", "-i", str(idx.path), "--explain",
                                                   "--json"]).output)
    assert [s["side"] for s in as_json["stages"]] == ["shard"] + ["coordinator"] * 4


def test_a_split_plan_answers_as_the_whole_one(idx):
    """The first stages on one side, the rest over the gathered candidates: the hits a
    coordinator would return are the unsplit search's."""
    import pickle

    from ldr.search.gather import ShardedSource, gather

    plan = idx.plan("gannets kittiwakes reef", k=5)
    first, rest = plan.split()
    assert first.rest == () and rest.first == () and first.stages + rest.stages == plan.stages
    first, rest = pickle.loads(pickle.dumps(first)), pickle.loads(pickle.dumps(rest))   # values that travel
    shard = idx.as_shard()
    reps = {k: idx.query_side(k).encode(first.query) for k in first.kinds}    # the query side's, once
    got = pickle.loads(pickle.dumps(shard.first(first, reps, None)))    # the shard's side: a value
    assert set(got.lists) == {"bm25"} and set(got.ids) == {d for d, _ in got.lists["bm25"]}
    one = idx._snapshot()
    cands, ids = gather([got], one.map, plan.query, {s.kind: s.depth for s in first.first})
    finder = idx._run(one).finder(plan.settings.weights, plan.kinds)
    source = ShardedSource(plan.query, {}, [shard], one.map, ids, finder,
                           lambda k: idx.query_side(k).encode(plan.query), None)
    rows = rest.run_rest(cands, source).rows
    whole = idx.search("gannets kittiwakes reef", k=5)
    assert [(ids[d], s) for d, s, _ in rows] == [(h.id, h.score) for h in whole]


def test_options_are_checked_once_against_the_index(idx):
    with pytest.raises(ldr.ConfigError, match="no 'dense' component"):
        idx.plan("reef", mode="dense")
    with pytest.raises(QueryError, match="unknown stage 'nosuch'"):
        idx.search("reef", stages={"nosuch": {}})
    with pytest.raises(QueryError, match="no setting colour"):
        idx.search("reef", stages={"boost": {"colour": "red"}})
    with pytest.raises(ldr.ConfigError, match="plain name"):
        register_stage(StageType("windows", BoostSettings, Boost))     # a built-in stage's name


# -- the toy stage through every interface ----------------------------------------------------------
def test_a_stage_defined_here_runs_in_the_api_and_the_cli(idx):
    plain = idx.search("gannets reef", k=12)
    boosted = idx.search("gannets reef", k=12, stages={"boost": {"weight": 10}})
    assert [s.name for s in boosted.plan.rest] == ["fused", "windows", "boost", "relevance", "passages"]
    assert "boost" in boosted.timings_ms and all("boost" in h.scores for h in boosted)
    assert [h.meta["priority"] for h in boosted[:3]] == [3, 3, 3] and [h.id for h in plain] != [h.id for h in boosted]
    assert boosted[0].scores["boost"] == pytest.approx(boosted[0].scores["windows"] + 30)
    out = CliRunner().invoke(main, ["search", "gannets reef", "-i", str(idx.path), "-k", "12", "--json",
                                    "--stage", "boost:weight=10"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert [h["id"] for h in got["hits"]] == [h.id for h in boosted] and "boost" in got["stages"]
    bad = CliRunner().invoke(main, ["search", "reef", "-i", str(idx.path), "--stage", "boost:weight"])
    assert bad.exit_code == 2 and "SETTING=VALUE" in bad.output


def test_a_stage_defined_here_runs_in_eval_and_tune(idx, tmp_path):
    from ldr.eval.runner import EvalOptions, run_benchmark
    from ldr.eval.tasks import Task
    from ldr.eval.tune import TuneOptions, tune
    from ldr.index.build import BuildConfig

    queries = {f"q{i}": f"note {i} gannets" for i in range(12)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(12)}
    task = Task(name="toy", corpus=lambda: iter(DOCS), queries=queries, qrels=qrels)
    metrics = run_benchmark("beir", [task], BuildConfig(bm25="native", dense=None, sparse=None),
                            EvalOptions(progress=False, stages={"boost": {"weight": 0.5}}), tmp_path / "out", {},
                            ldr.Index)
    assert "boost" in metrics["tasks"]["toy"]["stages"]
    assert (tmp_path / "out" / "runs" / "toy.boost.trec").is_file()
    report = tune(idx, queries, qrels, TuneOptions(progress=False, rerank_depths=(), stages={"boost": {"weight": 0.5}}))
    assert report["queries"] == 12 and report["n_settings"] >= 1


@pytest.mark.slow
def test_a_stage_defined_here_runs_in_the_server(idx):
    """A real server process loads this file as a plugin (LDR_PLUGINS) and runs the stage."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from test_serve import Server

    old = os.environ.get("PYTHONPATH"), os.environ.get("LDR_PLUGINS")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE)] + ([old[0]] if old[0] else []))
    os.environ["LDR_PLUGINS"] = "test_plan"
    try:
        server = Server(idx.path)
    finally:
        for k, v in zip(("PYTHONPATH", "LDR_PLUGINS"), old):
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    try:
        r = server.http.post("/search", json={"query": "gannets reef", "k": 12, "stages": {"boost": {"weight": 10}}})
        assert r.status_code == 200, r.text
        want = [h.id for h in idx.search("gannets reef", k=12, stages={"boost": {"weight": 10}})]
        assert [h["id"] for h in r.json()["hits"]] == want
        bad = server.http.post("/search", json={"query": "reef", "stages": {"nosuch": {}}})
        assert bad.status_code == 400 and "unknown stage" in bad.text
    finally:
        server.stop()
    assert httpx is not None and sys.modules.get("test_plan") is not None


def teardown_module():
    unregister_stage("boost")


def test_explain_loads_no_model_and_a_plan_pickles(idx):
    """Compiling a plan reads no document and loads no model (the second stage is a value bound
    where the plan runs): `ldr search --explain` with a cross-encoder imports no model runtime."""
    import pickle
    import subprocess
    import sys

    code = ("import sys\nfrom click.testing import CliRunner\nfrom ldr.cli import main\n"
            f"r = CliRunner().invoke(main, ['search', 'reef', '-i', {str(idx.path)!r}, '--explain', "
            "'--rerank-model', 'cross-encoder/ms-marco-MiniLM-L-12-v2'])\n"
            "assert r.exit_code == 0, r.output\nprint(r.output)\n"
            "print('LOADED', [m for m in ('torch', 'transformers', 'onnxruntime') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "reranked   cross-encoder:cross-encoder/ms-marco-MiniLM-L-12-v2" in out.stdout
    assert "LOADED []" in out.stdout
    plan = idx.plan("reef", rerank_model="cross-encoder/ms-marco-MiniLM-L-12-v2")
    again = pickle.loads(pickle.dumps(plan))
    assert again.explain() == plan.explain() and again.stage("reranked").reranker.model == plan.stage("reranked").reranker.model


def test_stage_settings_are_finite_numbers(idx):
    """Issue 57 item 10: NaN and infinities are refused for a stage's settings as for every option."""
    for bad in (float("nan"), float("inf"), "inf", "1e309", "nan"):
        with pytest.raises(QueryError, match="finite"):
            idx.search("reef", stages={"boost": {"weight": bad}})
    out = CliRunner().invoke(main, ["search", "reef", "-i", str(idx.path), "--stage", "boost:weight=1e309"])
    assert out.exit_code == 2 and "finite" in out.output and "Traceback" not in out.output


def test_a_plan_for_another_query_is_the_plan_replaced(idx):
    """Plan.for_query (a batch's results each get the plan with their own query) is what
    dataclasses.replace gives, and leaves the plan it came from as it was."""
    from dataclasses import fields, replace

    plan = idx.search("harbour", k=3).plan
    got, want = plan.for_query("lighthouse keeper"), replace(plan, query="lighthouse keeper")
    assert type(got) is type(want) and plan.query == "harbour"
    assert all(getattr(got, f.name) == getattr(want, f.name) for f in fields(plan))
    assert got.explain() == want.explain()
