import json
import math
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytrec_eval
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import DataError
from ldr.eval import benchmarks, synthetic
from ldr.eval.metrics import evaluate, evaluate_per_query
from ldr.eval.runs import read_run, write_run


# -- metrics ---------------------------------------------------------------------------------
def test_metrics_by_hand():
    qrels = {"q1": {"a": 1, "c": 1}, "q2": {"z": 1}}
    run = {"q1": {"b": 3.0, "a": 2.0, "c": 1.0}, "q2": {"x": 1.0}}
    m = evaluate_per_query(qrels, run, ("ndcg@10", "acc@1", "mrr@10", "recall@100"))
    dcg = 1 / math.log2(3) + 1 / math.log2(4)
    idcg = 1 + 1 / math.log2(3)
    assert m["q1"]["ndcg@10"] == pytest.approx(dcg / idcg)
    assert m["q1"]["acc@1"] == 0.0 and m["q1"]["mrr@10"] == pytest.approx(0.5)
    assert m["q1"]["recall@100"] == 1.0
    assert m["q2"] == {"ndcg@10": 0.0, "acc@1": 0.0, "mrr@10": 0.0, "recall@100": 0.0}
    mean = evaluate(qrels, run, ("ndcg@10",))
    assert mean["ndcg@10"] == pytest.approx(dcg / idcg / 2)
    # a query with no results at all still counts (as 0) in the mean
    assert evaluate(qrels, {"q1": run["q1"]}, ("ndcg@10",))["ndcg@10"] == pytest.approx(dcg / idcg / 2)


def _ndcg10(rel: dict, ranked: list[str]) -> float:
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(rel.values(), reverse=True)[:10]
    return dcg / sum(r / math.log2(i + 2) for i, r in enumerate(ideal))


def test_metrics_match_pytrec_eval_and_numpy_on_a_random_run():
    rng = random.Random(3)
    docs = [f"d{i}" for i in range(200)]
    qrels = {f"q{i}": {d: rng.choice([1, 2]) for d in rng.sample(docs, rng.randint(1, 5))} for i in range(30)}
    run = {q: {d: rng.random() for d in rng.sample(docs, 150)} for q in qrels}
    ours = evaluate_per_query(qrels, run, ("ndcg@10", "recall@100"))
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    for q in qrels:
        assert ours[q]["ndcg@10"] == pytest.approx(ref[q]["ndcg_cut_10"])
        assert ours[q]["recall@100"] == pytest.approx(ref[q]["recall_100"])
        ranked = sorted(run[q], key=lambda d: -run[q][d])
        assert ours[q]["ndcg@10"] == pytest.approx(_ndcg10(qrels[q], ranked), abs=1e-6)


def test_trec_run_roundtrip(tmp_path):
    run = {"q1": {"a": 1.5, "b": 2.5}, "q2": {"c": 0.1}}
    write_run(tmp_path / "r.trec", run, "tag")
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert lines[0] == "q1 Q0 b 1 2.500000 tag" and lines[1] == "q1 Q0 a 2 1.500000 tag"
    assert read_run(tmp_path / "r.trec") == run


# -- synthetic tasks -------------------------------------------------------------------------
def test_passkey_layout_and_recipe():
    t = synthetic.passkey(lengths=(256, 1024), seed=1)
    assert t == synthetic.passkey(lengths=(256, 1024), seed=1)          # deterministic by seed
    corpus, queries, qrels = t.split(1024)
    assert len(corpus) == 100 and len(queries) == 50 and len(qrels) == 50
    for qid, q in queries.items():
        name = q.removeprefix("what is the passkey for ").removesuffix("?")
        doc = corpus[next(iter(qrels[qid]))]
        assert f"{name}'s pass key is" in doc and len(doc.split()) <= 0.75 * 1024
        assert synthetic.FILLER in doc
    assert set(t.corpus[0]) == {"doc_id", "text", "context_length"}


def test_needle_hides_one_fact_per_document(tmp_path):
    for i in range(3):
        (tmp_path / f"e{i}.txt").write_text(" ".join(f"essay{i}word{j}" for j in range(800)))
    t = synthetic.needle(tmp_path, lengths=(512,), seed=0)
    corpus, queries, qrels = t.split(512)
    assert len(corpus) == 100 and len(queries) == 50
    for qid, q in list(queries.items())[:10]:
        doc = corpus[next(iter(qrels[qid]))]
        person_thing = q.removeprefix("What is ").removesuffix("?")
        assert f"{person_thing} is " in doc and len(doc.split()) <= 0.75 * 512 + 1


# -- loaders on fixtures in the official layouts -------------------------------------------
def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_longembed_loader(tmp_path):
    _jsonl(tmp_path / "qmsum/corpus.jsonl", [{"doc_id": "d1", "text": "meeting one"}, {"doc_id": "d2", "text": "two"}])
    _jsonl(tmp_path / "qmsum/queries.jsonl", [{"qid": "q1", "text": "one?"}])
    _jsonl(tmp_path / "qmsum/qrels.jsonl", [{"qid": "q1", "doc_id": "d1"}])
    pk = synthetic.passkey(lengths=(256, 512))
    _jsonl(tmp_path / "passkey/corpus.jsonl", pk.corpus)
    _jsonl(tmp_path / "passkey/queries.jsonl", pk.queries)
    _jsonl(tmp_path / "passkey/qrels.jsonl", pk.qrels)
    tasks = benchmarks.load("longembed", ["qmsum", "passkey"], tmp_path)
    assert [t.name for t in tasks] == ["qmsum", "passkey@256", "passkey@512"]
    assert [d.id for d in tasks[0].corpus()] == ["d1", "d2"] and tasks[0].qrels == {"q1": {"d1": 1}}
    assert tasks[1].group == "passkey" and tasks[1].length == 256 and len(list(tasks[1].corpus())) == 100
    assert len(tasks[2].queries) == 50
    only = benchmarks.load("longembed", ["passkey"], tmp_path, lengths=[512])
    assert [t.name for t in only] == ["passkey@512"]


def test_loco_loader_parquet(tmp_path):
    qdir, ddir = tmp_path / "LoCoV1-Queries/data", tmp_path / "LoCoV1-Documents/data"
    qdir.mkdir(parents=True)
    ddir.mkdir(parents=True)
    pq.write_table(pa.table({"qid": ["q1", "q2"], "query": ["a?", "b?"], "answer_pids": [["p1"], ["p3"]],
                             "dataset": ["qmsum", "gov_report"]}), qdir / "test-00000-of-00001.parquet")
    pq.write_table(pa.table({"pid": ["p1", "p2", "p3"], "passage": ["x", "y", "z"],
                             "dataset": ["qmsum", "qmsum", "gov_report"]}), ddir / "test-00000-of-00001.parquet")
    tasks = benchmarks.load("loco", ["qmsum", "gov_report"], tmp_path)
    assert [d.id for d in tasks[0].corpus()] == ["p1", "p2"] and tasks[0].qrels == {"q1": {"p1": 1}}
    assert tasks[1].queries == {"q2": "b?"}
    with pytest.raises(DataError, match="unknown LoCoV1"):
        benchmarks.load("loco", ["nope"], tmp_path)


@pytest.mark.parametrize("layout", ["parquet", "raw"])
def test_mldr_loader(tmp_path, layout):
    q = [{"query_id": "q-en-1", "query": "who?", "positive_passages": [{"docid": "doc-en-2", "text": "t"}],
          "negative_passages": []}]
    c = [{"docid": "doc-en-1", "text": "first"}, {"docid": "doc-en-2", "text": "second"}]
    if layout == "parquet":
        for cfg, split, rows in (("en", "test", q), ("corpus-en", "corpus", c)):
            (tmp_path / cfg / split).mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(rows), tmp_path / cfg / split / "0000.parquet")
    else:
        _jsonl(tmp_path / "mldr-v1.0-en/test.jsonl", q)
        _jsonl(tmp_path / "mldr-v1.0-en/corpus.jsonl", c)
    (task,) = benchmarks.load("mldr", ["en"], tmp_path)
    assert task.qrels == {"q-en-1": {"doc-en-2": 1}} and [d.id for d in task.corpus()] == ["doc-en-1", "doc-en-2"]


def test_offline_without_data_says_how_to_get_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="hf download --repo-type dataset Shitao/MLDR"):
        benchmarks.load("mldr", ["en"])
    with pytest.raises(DataError, match="--haystack"):
        benchmarks.load("longembed", ["needle"])
    with pytest.raises(DataError, match="needs --data"):
        benchmarks.load("beir")


# -- ldr eval end to end ---------------------------------------------------------------------
def test_eval_cli_writes_runs_metrics_report_and_plots(tmp_path):
    beir = tmp_path / "mini"
    _jsonl(beir / "corpus.jsonl", [{"_id": f"d{i}", "title": "", "text": f"topic{i} words about item{i}"}
                                   for i in range(20)])
    _jsonl(beir / "queries.jsonl", [{"_id": f"q{i}", "text": f"item{i}"} for i in range(5)])
    (beir / "qrels").mkdir()
    (beir / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(5)))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["eval", "--bench", "beir", "--data", str(beir), "--out", str(out), "--dense", "none",
                                  "--sparse", "none", "-q", "--max-queries", "4"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    assert m["tasks"]["mini"]["stages"]["bm25"]["ndcg@10"] == 100.0
    assert m["averages"]["bm25"] == 100.0 and m["settings"]["partial"] == "max 4 queries per task"
    # BM25 alone: a plain search still runs the window stage over BM25's list (issue 58: it said bm25)
    assert m["default_stage"] == "windows" and "windows" in m["tasks"]["mini"]["stages"]
    assert len((out / "runs/mini.bm25.trec").read_text().splitlines()) >= 4
    assert (out / "report.md").read_text().count("Partial run") == 1
    assert (out / "tasks.png").stat().st_size > 1000
    # second run reuses the cached index
    r = CliRunner().invoke(main, ["eval", "--bench", "beir", "--data", str(beir), "--out", str(out), "--dense", "none",
                                  "--sparse", "none", "-q"])
    assert json.loads((out / "metrics.json").read_text())["raw"]["mini"]["index_cached"] is True
    # an index the user built of the same corpus (issue 58): evaluated as it is, nothing re-encoded
    idx = tmp_path / "idx"
    assert CliRunner().invoke(main, ["index", str(beir / "corpus.jsonl"), "-o", str(idx), "--dense", "none",
                                     "--sparse", "none", "-q"]).exit_code == 0
    r = CliRunner().invoke(main, ["eval", "--bench", "beir", "--data", str(beir), "-i", str(idx), "--out",
                                  str(tmp_path / "out2"), "-q"])
    assert r.exit_code == 0, r.output
    m2 = json.loads((tmp_path / "out2" / "metrics.json").read_text())
    assert m2["tasks"]["mini"]["stages"]["bm25"]["ndcg@10"] == 100.0 and m2["settings"]["index"] == str(idx)
    assert not (tmp_path / "out2" / "cache").exists()
    other = tmp_path / "other"
    assert CliRunner().invoke(main, ["index", str(beir / "queries.jsonl"), "-o", str(other), "--dense", "none",
                                     "--sparse", "none", "-q"]).exit_code == 0
    r = CliRunner().invoke(main, ["eval", "--bench", "beir", "--data", str(beir), "-i", str(other), "-q",
                                  "--out", str(tmp_path / "out3")])
    assert r.exit_code == 2 and "is not an index of mini's corpus: it lacks 20 of its 20 documents" in r.output


@pytest.mark.slow
def test_eval_synthetic_passkey_all_stages(tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["eval", "--bench", "longembed", "--tasks", "passkey", "--lengths", "256,512",
                                  "--synthetic-docs", "12", "--max-queries", "5", "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    pk = m["tasks"]["passkey"]
    assert set(pk["per_length"]) == {"256", "512"}
    assert set(pk["stages"]) == {"bm25", "dense", "sparse", "fused", "windows", "reranked"}
    assert (out / "passkey_heatmap.png").exists()
    assert "passkey: Acc@1 per context length" in (out / "report.md").read_text()
    sig = next(t["significance"] for n, t in m["raw"].items() if n.startswith("passkey"))   # beat BM25? fusion?
    assert sig["baseline"] == "bm25" and set(sig["vs_baseline"]) == {"dense", "sparse", "fused", "windows", "reranked"}
    assert "p_t_holm" in sig["windows_vs_fused"]
    assert "p_t_holm" in sig["reranked_vs_fused"] and "## Significance" in (out / "report.md").read_text()
    assert m["default_stage"] == "windows"     # what a plain `ldr search` returns
    assert m["settings"]["partial"] == "max 5 queries per task; lengths 256,512; 12 documents per length; tasks passkey"
    assert {r["documents"] for n, r in m["raw"].items() if n.startswith("passkey")} == {12}


@pytest.mark.slow
def test_probe_position(tmp_path, sample_corpus):
    out = tmp_path / "probe"
    r = CliRunner().invoke(main, ["probe", "position", str(sample_corpus), "--out", str(out), "--max-docs", "3",
                                  "--needle-length", "512", "--needle-docs", "4", "--depths", "3",
                                  "--strategies", "truncate,maxp"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "probe.json").read_text())
    assert set(res["strategies"]) == {"truncate", "maxp"} and res["depths"] == [0.0, 0.5, 1.0]
    tr, mp = res["strategies"]["truncate"], res["strategies"]["maxp"]
    assert len(tr["window_similarity"]) == 10
    # truncation cannot see a needle at the end of a 512-token document; MaxP can
    assert tr["needle_acc_by_depth"][-1] < mp["needle_acc_by_depth"][-1]
    assert mp["needle_acc_by_depth"][0] == 100.0
    assert "moved needle" in r.output and (out / "probe.png").stat().st_size > 1000
    r = CliRunner().invoke(main, ["probe", "position", str(sample_corpus), "--strategies", "bogus"])
    assert r.exit_code == 2 and "unknown strategies" in r.output


def test_queries_without_relevant_documents_do_not_count():
    """As trec_eval: a query whose judgments are all non-relevant (or empty) is left out of the mean."""
    from ldr.eval.metrics import evaluate

    run = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"a": 1.0}, "q3": {"b": 1.0}}
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {}}
    m = evaluate(qrels, run, metrics=("ndcg@10", "acc@1"))
    assert m == {"ndcg@10": 1.0, "acc@1": 1.0}


def test_mldr_languages_get_their_own_analyzer(tmp_path):
    """German MLDR is analysed as German (stemmed "Häuser" → "haus"), Hindi plainly; the report says so."""
    from ldr.eval.runner import EvalOptions, run_benchmark
    from ldr.index.build import BuildConfig

    for lang, docs, query in (("de", ["die Häuser sind alt", "der Hund schläft"], "Haus"),
                              ("hi", ["यह एक किताब है", "बिल्ली सो रही है"], "किताब")):
        q = [{"query_id": f"q-{lang}", "query": query, "positive_passages": [{"docid": f"{lang}-0", "text": ""}]}]
        _jsonl(tmp_path / f"mldr-v1.0-{lang}/test.jsonl", q)
        _jsonl(tmp_path / f"mldr-v1.0-{lang}/corpus.jsonl", [{"docid": f"{lang}-{i}", "text": t} for i, t in enumerate(docs)])
    tasks = benchmarks.load("mldr", ["de", "hi"], tmp_path)
    metrics = run_benchmark("mldr", tasks, BuildConfig(dense=None, sparse=None), EvalOptions(progress=False),
                            tmp_path / "out", {}, ldr.Index)
    assert metrics["tasks"]["de"]["analyzer"]["language"] == "de"
    assert metrics["tasks"]["hi"]["analyzer"]["language"] == "none"
    assert metrics["tasks"]["de"]["stages"]["bm25"]["ndcg@10"] == 100.0      # English analysis misses "Häuser"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "BM25 analyzer per task" in report and "| de | de |" in report


def test_a_partial_run_is_not_averaged_beside_published_numbers_and_the_legend_spares_the_bars(tmp_path):
    """Issue 27 item 15: a partial run's average is not set beside full published averages; the
    bar plot's legend lies beside the axes, not on the bars."""
    import matplotlib
    matplotlib.use("Agg")
    from ldr.eval.report import bars_figure, write_report

    stages = {"bm25": {"ndcg@10": 99.0, "recall@100": 100.0}, "fused": {"ndcg@10": 98.0, "recall@100": 100.0}}
    tasks = {t: {"main_metric": "ndcg@10", "stages": stages} for t in ("summ_screen_fd", "qmsum", "2wikimqa")}
    metrics = {"bench": "longembed", "tasks": tasks, "averages": {"bm25": 99.0, "fused": 98.0},
               "settings": {"partial": "max 5 queries per task"}}
    write_report(metrics, tmp_path)
    avg = next(line for line in (tmp_path / "report.md").read_text().splitlines() if "**average**" in line)
    assert "not comparable (partial run)" in avg and "BGE-M3" not in avg
    metrics["settings"]["partial"] = None
    write_report(metrics, tmp_path)
    avg = next(line for line in (tmp_path / "report.md").read_text().splitlines() if "**average**" in line)
    assert "BGE-M3" in avg
    fig = bars_figure(metrics, ["bm25", "fused"])
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1 and legend.x1 <= fig.bbox.x1 + 1    # beside the axes, inside the figure


def test_mldr_as_the_hub_ships_it_gives_the_metrics_of_the_same_data_as_a_beir_folder(tmp_path):
    """Issue 29: `mldr-v1.0-{lang}/corpus.jsonl.gz` + `test.jsonl.gz` (rows `docid, text` and
    `query_id, query, positive_passages, negative_passages`) read as downloaded."""
    import gzip

    docs = [{"docid": f"doc-{i}", "text": f"topic{i} words about item{i} and more text"} for i in range(20)]
    qs = [{"query_id": f"q-{i}", "query": f"item{i}", "positive_passages": [{"docid": f"doc-{i}", "text": "x"}],
           "negative_passages": []} for i in range(6)]
    raw = tmp_path / "mldr" / "mldr-v1.0-en"
    raw.mkdir(parents=True)
    for name, rows in (("corpus", docs), ("test", qs)):
        with gzip.open(raw / f"{name}.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    beir = tmp_path / "en"
    _jsonl(beir / "corpus.jsonl", [{"_id": d["docid"], "title": "", "text": d["text"]} for d in docs])
    _jsonl(beir / "queries.jsonl", [{"_id": q["query_id"], "text": q["query"]} for q in qs])
    (beir / "qrels").mkdir()
    (beir / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q['query_id']}\t{q['positive_passages'][0]['docid']}\t1\n" for q in qs))
    got = {}
    for bench, data in (("mldr", tmp_path / "mldr"), ("beir", beir)):
        out = tmp_path / f"out-{bench}"
        args = ["eval", "--bench", bench, "--data", str(data), "--out", str(out), "--dense", "none", "--sparse", "none",
                "-q"] + (["--tasks", "en"] if bench == "mldr" else [])
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        got[bench] = json.loads((out / "metrics.json").read_text())["tasks"]["en"]["stages"]["bm25"]
    assert got["mldr"] == got["beir"] and got["mldr"]["ndcg@10"] > 50


def test_mldr_leakage_is_named(tmp_path):
    """A model trained on MLDR's train split, scored on MLDR, gets a warning (issue 29)."""
    from ldr.eval.benchmarks import mldr_leakage

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "ldr-train.json").write_text(json.dumps({"data": "/data/mldr-v1.0-en", "loss": "mnrl"}))
    assert mldr_leakage(["BAAI/bge-m3", "all-MiniLM-L6-v2", "none", None, str(mine)]) == ["BAAI/bge-m3", str(mine)]


def _beir_metrics(tmp_path, docs, queries, qrels, name):
    beir = tmp_path / f"beir-{len(list(tmp_path.iterdir()))}" / name
    _jsonl(beir / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in docs.items()])
    _jsonl(beir / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    (beir / "qrels").mkdir()
    (beir / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, ds in qrels.items() for d in ds))
    return _eval_bm25(tmp_path, ["--bench", "beir", "--data", str(beir)], name)


def _eval_bm25(tmp_path, args, task):
    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
    r = CliRunner().invoke(main, ["eval", *args, "--out", str(out), "--dense", "none", "--sparse", "none", "-q"])
    assert r.exit_code == 0, r.output
    return json.loads((out / "metrics.json").read_text())["tasks"][task]["stages"]["bm25"]


def test_longembed_and_loco_hub_layouts_give_the_metrics_of_the_same_data_as_beir_folders(tmp_path):
    """Issue 29: LongEmbed as `hf download --repo-type dataset dwzhu/LongEmbed` leaves it (a folder
    per config with corpus/queries/qrels .jsonl: doc_id/text, qid/text, qid/doc_id) and LoCoV1 as
    its two hub repos leave it (parquet under data/: pid/passage/dataset, qid/query/answer_pids/dataset)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = {f"doc{i}": f"topic{i} words about item{i} and a meeting" for i in range(15)}
    queries = {f"q{i}": f"item{i} meeting" for i in range(5)}
    qrels = {f"q{i}": [f"doc{i}"] for i in range(5)}
    le = tmp_path / "longembed" / "qmsum"
    _jsonl(le / "corpus.jsonl", [{"doc_id": d, "text": t} for d, t in docs.items()])
    _jsonl(le / "queries.jsonl", [{"qid": q, "text": t} for q, t in queries.items()])
    _jsonl(le / "qrels.jsonl", [{"qid": q, "doc_id": d} for q, ds in qrels.items() for d in ds])
    got = _eval_bm25(tmp_path, ["--bench", "longembed", "--tasks", "qmsum", "--data", str(tmp_path / "longembed")], "qmsum")
    assert got == _beir_metrics(tmp_path, docs, queries, qrels, "qmsum")
    loco = tmp_path / "loco"
    (loco / "LoCoV1-Documents" / "data").mkdir(parents=True)
    (loco / "LoCoV1-Queries" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"pid": list(docs), "passage": list(docs.values()), "dataset": ["qmsum"] * len(docs)}),
                   loco / "LoCoV1-Documents" / "data" / "test-00000-of-00001.parquet")
    pq.write_table(pa.table({"qid": list(queries), "query": list(queries.values()),
                             "answer_pids": [qrels[q] for q in queries], "dataset": ["qmsum"] * len(queries)}),
                   loco / "LoCoV1-Queries" / "data" / "test-00000-of-00001.parquet")
    got = _eval_bm25(tmp_path, ["--bench", "loco", "--tasks", "qmsum", "--data", str(loco)], "qmsum")
    assert got == _beir_metrics(tmp_path, docs, queries, qrels, "qmsum")
