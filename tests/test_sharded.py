"""A sharded index answers exactly as the unsharded index of the same documents (issue 41): the
same top-10 ids and scores in every mode, the window stage and passages included, for 1, 2 and 4
shards, also after add / replace / delete / merge; a write killed between a shard's commit and the
cluster's leaves every reader on the previous generation, `ldr check` names the shard left behind
and the next write brings it back."""
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.sharded import ShardedIndex

QUERIES = ["corrosion of the bearing plates", "who relit the lamp", "when can the licence be terminated",
           "sourdough starter feeding", "annual revenue growth", "tides and the harbour"]
MODES = [None, "bm25", "dense", "sparse"]


def _docs():
    from conftest import ROOT

    from ldr.corpus import IngestReport, corpus_docs

    return list(corpus_docs(ROOT / "corpora" / "sample", IngestReport(), 64, ROOT / "no-index-here"))


def _extra():
    return [ldr.Doc("harbour-log", "The harbour master logged the tides at dawn; the lamp in the lighthouse was relit "
                    "after the storm.", "Harbour log"),
            ldr.Doc("bridge-note", "A note on bearing plates: corrosion was treated and the plates repainted.",
                    "Bridge maintenance note")]


def _same(one, sharded, where: str):
    for mode in MODES:
        kw = {"mode": mode} if mode else {}
        for q in QUERIES:
            a, b = one.search(q, k=10, passages=2, **kw), sharded.search(q, k=10, passages=2, **kw)
            assert [h.id for h in a] == [h.id for h in b], (where, mode, q)
            assert all(abs(x.score - y.score) < 1e-4 for x, y in zip(a, b)), (where, mode, q)
            assert [h.relevance for h in a] == pytest.approx([h.relevance for h in b], abs=1e-6), (where, mode, q)
            # the first stages with native BM25's lists, the window features (local shards describe only
            # the fused candidates: on Ray, tests/test_ray_serve.py, they come with the first stages), the passages
            assert b.rounds == ((2 if len(sharded.cluster["shards"]) == 1 else 3) if b else 1), (where, mode, q)
            assert [[(p.start, p.end) for p in h.passages] for h in a] == \
                [[(p.start, p.end) for p in h.passages] for h in b], (where, mode, q)


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory):
    return ldr.Index.build(_docs(), tmp_path_factory.mktemp("one") / "idx")


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_sharded_index_answers_as_one_index_through_writes(unsharded, tmp_path, n):
    # 4 shards built from the documents (routed, encoded shard by shard); 1 and 2 resharded from the
    # default index, which copies its encodings (a build of each encoded the corpus again: ~9 s apiece)
    sharded = ShardedIndex.build(_docs(), tmp_path / "idx", shards=n) if n == 4 else \
        ldr.sharded.reshard(unsharded, tmp_path / "idx", n)
    assert ldr.open(tmp_path / "idx").sharded and not unsharded.sharded and len(sharded) == len(unsharded)
    assert len(sharded.cluster["shards"]) == n
    _same(unsharded, sharded, "built")
    if n != 4:
        return
    import shutil
    shutil.copytree(unsharded.path, tmp_path / "one")          # changed alongside (a copy: built once)
    one = ldr.Index(tmp_path / "one")
    for index in (one, sharded):
        index.add(_extra())
        index.add([ldr.Doc("sourdough-guide", "A shorter sourdough guide: feed the starter twice a day.", "Sourdough")])
        index.delete(["annual-report-2024", "no-such-id"])
    _same(one, sharded, "after add, replace, delete")
    for index in (one, sharded):
        index.merge()
    _same(one, sharded, "after merge")
    assert len(sharded) == len(one) == len(_docs()) + 1


def test_filters_and_bm25_statistics_are_the_whole_index(unsharded, tmp_path):
    sharded = ShardedIndex.build(_docs(), tmp_path / "idx", shards=3)
    for q in QUERIES:
        a = unsharded.search(q, mode="bm25", filters={"id": "bridge-inspection-report.html"})
        b = sharded.search(q, mode="bm25", filters={"id": "bridge-inspection-report.html"})
        assert [(h.id, round(h.score, 6)) for h in a] == [(h.id, round(h.score, 6)) for h in b]
    # every shard scores with the same document count and average length
    from ldr.search import searcher

    snap = sharded._snapshot()
    _, stats, _ = searcher.statistics(snap, "bearing plates", {}, sharded._run(snap))
    rep = searcher.encode(snap, "bearing plates", ["bm25"], stats=stats)["bm25"]
    whole = unsharded.retriever("bm25")
    assert (rep.n, rep.avgdl) == (whole.n, whole.avgdl) and rep.df == {t: whole._df(t) for t in rep.df} == \
        {"bear": 2, "plate": 1}


def test_a_shard_whose_own_frequencies_mislead_it_is_asked_again_and_the_hits_stay_exact(tmp_path):
    # shard 0 holds every "alpha" document: ranked with its own frequencies scaled up, alpha looks
    # common there and the shard lists by "beta"; the whole index's frequencies make alpha rare, so
    # documents it did not list belong in the top: its bound says so and it is asked again
    from ldr.index.cluster import shard_of

    ids = [f"d{i}" for i in range(400)]
    zero = [i for i in ids if shard_of(i, 2) == 0][:12]
    one_ = [i for i in ids if shard_of(i, 2) == 1][:36]
    docs = [ldr.Doc(i, " ".join(["alpha"] * (1 + j % 5) + ["beta"] * (3 if j < 4 else 0) + ["filler"] * 20), i)
            for j, i in enumerate(zero)]
    docs += [ldr.Doc(i, " ".join(["beta"] * (1 + j % 3) + ["filler"] * 20 + (["alpha"] if j < 2 else [])), i)
             for j, i in enumerate(one_)]
    single = ldr.Index.build(docs, tmp_path / "one", dense=None, sparse=None, progress=False)
    sharded = ShardedIndex.build(docs, tmp_path / "two", shards=2, dense=None, sparse=None, progress=False)
    for kw in ({"depth": 4}, {"depth": 4, "filters": {"id": {"!=": zero[0]}}}, {}):
        a, b = single.search("alpha beta", k=4, passages=1, **kw), sharded.search("alpha beta", k=4, passages=1, **kw)
        assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b], kw
        assert [h.relevance for h in a] == pytest.approx([h.relevance for h in b], abs=1e-6), kw
        # asked again; whole lists: never
        assert b.rounds == (4 if "depth" in kw else 3), kw
    # a pasted text of 300 words: no shard sends its 300 x 300 sums, each is asked again instead
    pasted = " ".join(f"w{i}" for i in range(300)) + " alpha beta"
    a, b = single.search(pasted, k=4), sharded.search(pasted, k=4)
    assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b] and b.rounds == 4
    assert [h.relevance for h in a] == pytest.approx([h.relevance for h in b], abs=1e-6)


def test_the_cli_builds_and_writes_a_sharded_index(tmp_path):
    from conftest import ROOT

    r, idx = CliRunner(), tmp_path / "idx"
    out = r.invoke(main, ["index", str(ROOT / "corpora" / "sample"), "-o", str(idx), "--shards", "2",
                          "--dense", "none", "--sparse", "none", "-q"])
    assert out.exit_code == 0 and "in 2 shards" in out.output, out.output
    assert r.invoke(main, ["search", "bearing plates", "-i", str(idx), "--json"]).exit_code == 0
    out = r.invoke(main, ["add", str(ROOT / "corpora" / "more"), "-i", str(idx), "-q"])
    assert out.exit_code == 0 and "documents in 2 shards" in out.output, out.output
    generation = ShardedIndex(idx).generation
    again = r.invoke(main, ["add", str(ROOT / "corpora" / "more"), "-i", str(idx), "-q"])
    assert "0 added, 0 replaced" in again.output and "unchanged" in again.output
    assert ShardedIndex(idx).generation == generation          # nothing new: no commit, as unsharded
    assert r.invoke(main, ["delete", "sourdough-guide", "-i", str(idx)]).exit_code == 0
    assert r.invoke(main, ["merge", "-i", str(idx)]).exit_code == 0
    info = r.invoke(main, ["info", str(idx)])
    assert "shards      2" in info.output
    # `ldr info` says what the same writes on one index say: its documents and its last ingest
    one = tmp_path / "one"
    r.invoke(main, ["index", str(ROOT / "corpora" / "sample"), "-o", str(one), "--dense", "none", "--sparse", "none",
                    "-q", "--bm25", "native"])
    for args in (["add", str(ROOT / "corpora" / "more")], ["add", str(ROOT / "corpora" / "more")],
                 ["delete", "sourdough-guide"], ["merge"]):
        r.invoke(main, [args[0], *args[1:], "-i", str(one)] + (["-q"] if args[0] == "add" else []))
    lines = [{ln[:12]: ln for ln in r.invoke(main, ["info", str(i)]).output.splitlines()} for i in (idx, one)]
    assert lines[0]["documents   "] == lines[1]["documents   "]
    assert lines[0]["ingest      "] == lines[1]["ingest      "]
    check = r.invoke(main, ["check", str(idx)])
    assert check.exit_code == 0 and "in 2 shards" in check.output
    tantivy = r.invoke(main, ["index", str(ROOT / "corpora" / "sample"), "-o", str(tmp_path / "t"), "--shards", "2",
                              "--bm25", "tantivy", "--dense", "none", "--sparse", "none", "-q"])
    assert tantivy.exit_code == 2 and "native" in tantivy.output
    # a first build that fails leaves no directory behind (it left its lock file), as one index's
    with pytest.raises(ldr.CorpusError):
        ShardedIndex.build([{"id": "x"}], tmp_path / "bad", shards=2, dense=None, sparse=None)
    assert not (tmp_path / "t").exists() and not (tmp_path / "bad").exists()


def _add_in_child(idx, corpus, crash_at):
    env = {**os.environ, "LDR_CRASH_AT": crash_at}
    return subprocess.run([sys.executable, "-m", "ldr.cli", "add", str(corpus), "-i", str(idx), "-q"], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("crash_at", ["cluster:shard-committed", "cluster:add:before-publish"])
def test_a_write_killed_between_shard_and_cluster_commits_is_never_half_seen(tmp_path, crash_at):
    from conftest import ROOT

    idx = tmp_path / "idx"
    ShardedIndex.build(_docs(), idx, shards=2, dense=None, sparse=None)
    before = {q: [(h.id, h.score) for h in ldr.open(idx).search(q)] for q in QUERIES}
    more = tmp_path / "more"
    more.mkdir()
    for i, d in enumerate(_extra() * 3):
        (more / f"{d.id}-{i}.txt").write_text(d.text)
    done = _add_in_child(idx, more, crash_at)
    assert done.returncode == -9, done.stderr             # killed by SIGKILL at that moment
    reader = ldr.open(idx)
    assert {q: [(h.id, h.score) for h in reader.search(q)] for q in QUERIES} == before and len(reader) == 6
    check = CliRunner().invoke(main, ["check", str(idx)])
    assert check.exit_code == 0                          # no damage: readers answer from the named generations
    if crash_at == "cluster:shard-committed":
        assert "note: shard" in check.output and "the cluster names" in check.output
        assert any(s["ahead"] for s in reader.info()["shards"])         # /info says it too
    again = _add_in_child(idx, more, "")                  # the next writer brings the shard back first
    assert again.returncode == 0, again.stderr
    assert CliRunner().invoke(main, ["check", str(idx)]).exit_code == 0
    after = ldr.open(idx)
    assert len(after) == 12 and after.search("harbour master tides", k=1)[0].id.startswith("harbour-log")
    one = ldr.Index.build(_docs(), tmp_path / "one", dense=None, sparse=None)
    one.add(more)
    for q in QUERIES:
        assert [(h.id, round(h.score, 6)) for h in one.search(q)] == [(h.id, round(h.score, 6)) for h in after.search(q)]


def test_ldr_eval_on_shards_writes_the_runs_of_one_index(tmp_path):
    from conftest import ROOT

    args = ["eval", "--bench", "longembed", "--tasks", "needle", "--haystack",
            str(ROOT.parent / "shared" / "data" / "paul-graham-essays"), "--lengths", "256", "--max-queries", "6",
            "--dense", "none", "--sparse", "none", "-q", "--cache", str(tmp_path / "cache")]
    if not (ROOT.parent / "shared" / "data" / "paul-graham-essays").is_dir():
        pytest.skip("../shared/data/paul-graham-essays is absent")
    r = CliRunner()
    one = r.invoke(main, args + ["--out", str(tmp_path / "one")])
    two = r.invoke(main, args + ["--out", str(tmp_path / "two"), "--shards", "3"])
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    runs = sorted((tmp_path / "one" / "runs").glob("*.trec"))
    assert runs and all(p.read_text() == (tmp_path / "two" / "runs" / p.name).read_text() for p in runs)
    assert len(list((tmp_path / "cache").iterdir())) == 2        # sharded indexes cached apart


def test_a_server_answers_and_writes_a_sharded_index(tmp_path):
    pytest.importorskip("fastapi")
    from test_serve import Server

    idx = tmp_path / "idx"
    one = ldr.Index.build(_docs(), tmp_path / "one", dense=None, sparse=None)
    ShardedIndex.build(_docs(), idx, shards=2, dense=None, sparse=None)
    s = Server(idx)
    try:
        body = s.http.post("/search", json={"query": QUERIES[0], "k": 5}).json()
        assert [h["id"] for h in body["hits"]] == [h.id for h in one.search(QUERIES[0], k=5)]
        assert len(s.http.get("/info").json()["shards"]) == 2
        r = s.http.post("/documents", json={"documents": [{"id": "harbour-log", "text": _extra()[0].text}]})
        assert r.status_code == 200 and r.json()["added"] == 1, r.text
        assert s.http.get("/documents/harbour-log").json()["text"].startswith("The harbour master")
        hits = s.http.post("/search", json={"query": "harbour master tides", "k": 1}).json()["hits"]
        assert hits[0]["id"] == "harbour-log"
    finally:
        assert "Traceback" not in s.stop()


def test_ldr_tune_chooses_and_commits_on_a_sharded_index_as_on_one_index(tmp_path):
    import json

    from test_tune import make_corpus

    docs, queries, qrels = make_corpus()
    data = tmp_path / "data"
    (data / "qrels").mkdir(parents=True)
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (data / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, ds in qrels.items() for d, r in ds.items()))
    ldr.Index.build(docs, tmp_path / "one", dense=None)
    ShardedIndex.build(docs, tmp_path / "sh", shards=3, dense=None)
    r = CliRunner()
    args = ["tune", "--data", str(data), "--rerank-depths", "", "--json", "-q"]
    one = r.invoke(main, args + ["-i", str(tmp_path / "one")])
    sh = r.invoke(main, args + ["-i", str(tmp_path / "sh")])
    assert one.exit_code == 0 and sh.exit_code == 0, one.output + sh.output
    a, b = json.loads(one.output), json.loads(sh.output)
    assert a["chosen"] == b["chosen"] and a["held_out"]["tuned"] == b["held_out"]["tuned"]
    tuned = ldr.open(tmp_path / "sh")
    assert tuned.generation == 2 and all(s.manifest["search"].get("tuned") for s in tuned.shards)
    for q in list(queries.values())[:5]:
        assert [h.id for h in ldr.open(tmp_path / "one").search(q)] == [h.id for h in tuned.search(q)]


def test_resharding_copies_the_encodings_and_answers_as_before(unsharded, tmp_path):
    # the 3-shard source is itself a reshard of the default index (nothing encoded again: the
    # builds of 1, 2 and 4 shards are test_a_sharded_index_answers_as_one_index_through_writes)
    sharded = ldr.sharded.reshard(unsharded, tmp_path / "s3", 3)
    sharded.add(_extra())
    sharded.delete(["sourdough-guide"])
    r = CliRunner().invoke(main, ["reshard", "-i", str(tmp_path / "s3"), "-o", str(tmp_path / "s5"), "--shards", "5"])
    assert r.exit_code == 0 and "3 -> 5 shards" in r.output, r.output
    resharded = ldr.open(tmp_path / "s5")
    assert len(resharded.cluster["shards"]) == 5 and len(resharded) == len(sharded) == 7
    _same(sharded, resharded, "resharded 3 -> 5")
    assert CliRunner().invoke(main, ["check", str(tmp_path / "s5")]).exit_code == 0
    resharded.add([ldr.Doc("sourdough-guide", "Feed the starter twice a day.", "Sourdough")])   # writes go on
    assert resharded.search("feed the starter", k=1, mode="bm25")[0].id == "sourdough-guide"
    assert ldr.open(tmp_path / "s3").generation == sharded.generation          # the source is left as it was


def test_filters_on_a_field_some_shards_lack_and_on_an_empty_shard(tmp_path):
    """A metadata field only some shards' documents have, and a shard with no document at all:
    the sharded index answers as the default unsharded index (issue 55)."""
    from ldr.index.cluster import shard_of

    docs = [ldr.Doc(f"d{i}", f"harbour lamp tide {i} " + "keeper " * (i % 5), f"D{i}",
                    {"topic": "sea"} if i == 3 else {}) for i in range(8)]
    one = ldr.Index.build(docs, tmp_path / "one", dense=None, sparse=None)
    n = 12                                   # more shards than documents: some are empty
    sharded = ShardedIndex.build(docs, tmp_path / "s", shards=n, dense=None, sparse=None)
    holders = {shard_of(d.id, n) for d in docs}
    assert len(holders) < n and shard_of("d3", n) in holders
    for filters in ({"topic": "sea"}, {"topic": {"!=": "sea"}}, {"id": ["d1", "d3"]}):
        for mode in (None, "bm25"):
            a = one.search("harbour lamp keeper", k=5, filters=filters, mode=mode)
            b = sharded.search("harbour lamp keeper", k=5, filters=filters, mode=mode)
            assert [(h.id, round(h.score, 5)) for h in a] == [(h.id, round(h.score, 5)) for h in b], (filters, mode)
    from ldr.errors import QueryError

    with pytest.raises(QueryError, match="no document has the field"):
        sharded.search("harbour", filters={"colour": "red"})


def test_a_missing_shard_is_flagged_whichever_it_is():
    """The gather reads the plan's kinds, not the first shard's: shard 0 gone is `missing_shards: [0]`."""
    from ldr.search.gather import gather
    from ldr.search.gather import ShardMap
    from ldr.values import FirstStage

    m = ShardMap([2, 1, 1])
    two = FirstStage({"bm25": [(0, 2.0)]}, {}, {0: "c"})
    three = FirstStage({"bm25": [(0, 3.0)]}, {}, {0: "d"})
    got, ids = gather([None, two, three], m, "q", {"bm25": 10})
    assert got.lists == {"bm25": [(3, 3.0), (2, 2.0)]} and ids == {2: "c", 3: "d"}


def test_the_gathered_lists_break_equal_scores_by_id_across_shards():
    """Shards' lists merged: by score, and equal scores by id whatever shard or docno holds them
    (as one index breaks them); without a tie the order is the scores' alone."""
    from ldr.search.gather import ShardMap, gather
    from ldr.values import FirstStage

    m = ShardMap([3, 3])
    a = FirstStage({"bm25": [(0, 2.0), (1, 1.0), (2, 1.0)]}, {}, {0: "m", 1: "z", 2: "b"})
    b = FirstStage({"bm25": [(0, 1.0), (1, 0.5)]}, {}, {0: "a", 1: "c"})
    got, ids = gather([a, b], m, "q", {"bm25": 10})
    assert [ids[d] for d, _ in got.lists["bm25"]] == ["m", "a", "b", "z", "c"]
    assert got.lists["bm25"] == [(0, 2.0), (3, 1.0), (2, 1.0), (1, 1.0), (4, 0.5)]
    got, _ = gather([a, b], m, "q", {"bm25": 2})      # the cut falls among the tied: the ids decide
    assert got.lists["bm25"] == [(0, 2.0), (3, 1.0)]
    c = FirstStage({"bm25": [(0, 0.25), (2, 0.75)]}, {}, {0: "a", 2: "b"})
    got, _ = gather([a, c], m, "q", {"bm25": 10})
    assert [s for _, s in got.lists["bm25"]] == [2.0, 1.0, 1.0, 0.75, 0.25]


def test_an_unsharded_index_reshards_without_re_encoding_and_never_over_an_index(unsharded, tmp_path):
    """`ldr reshard -i IDX --shards 4` of the default index: the same answers, nothing encoded; a
    reshard onto an existing index or a non-empty folder is refused and leaves it as it was."""
    r = CliRunner().invoke(main, ["reshard", "-i", str(unsharded.path), "-o", str(tmp_path / "s4"), "--shards", "4"])
    assert r.exit_code == 0 and "1 -> 4 shards" in r.output, r.output
    four = ldr.open(tmp_path / "s4")
    assert four.sharded and len(four) == len(unsharded)
    _same(unsharded, four, "resharded 1 -> 4")
    other = ldr.Index.build(_extra(), tmp_path / "other", dense=None, sparse=None)
    r = CliRunner().invoke(main, ["reshard", "-i", str(tmp_path / "s4"), "-o", str(other.path), "--shards", "2"])
    assert r.exit_code == 2 and "not empty" in r.output, r.output
    assert [h.id for h in ldr.open(other.path).search("harbour", k=2)] == ["harbour-log"]


def test_sharded_writes_take_every_write_option(tmp_path):
    """The write path exists once: `max_doc_mb` reaches the shards (it was checked against the 64 MB
    default), and `ray` is refused with a message instead of dropped."""
    from ldr.errors import ConfigError

    sharded = ShardedIndex.build(_extra(), tmp_path / "s", shards=2, dense=None, sparse=None)
    big = ldr.Doc("big", "lighthouse " * 20_000, "Big")            # ~0.22 MB
    r = sharded.add([big, ldr.Doc("small", "a small note on the lamp", "Small")], max_doc_mb=0.1)
    assert r["added"] == 1 and r["report"].n_skipped == 1 and len(sharded) == 3
    with pytest.raises(ConfigError, match="Ray"):
        sharded.add([ldr.Doc("x", "y")], ray=True)


def test_a_swapped_shard_is_refused_and_a_shard_takes_no_writer_of_its_own(tmp_path):
    """Issue 57 items 4 and 5: another index's shard at the same generation number is found by
    `ldr check` and refused at open; `ldr add` into a shard folder is refused, the index intact."""
    import shutil

    from ldr.errors import IndexFormatError

    s, t = tmp_path / "s", tmp_path / "t"
    ShardedIndex.build(_docs(), s, shards=2, dense=None, sparse=None)
    ShardedIndex.build(_docs() + _extra(), t, shards=2, dense=None, sparse=None)
    r = CliRunner()
    more = tmp_path / "more"
    more.mkdir()
    (more / "n.txt").write_text("a new note about tides")
    out = r.invoke(main, ["add", str(more), "-i", str(s / "shards" / "shard-000")])
    assert out.exit_code == 2 and "is a shard of the sharded index" in out.output, out.output
    assert r.invoke(main, ["check", str(s)]).exit_code == 0 and len(ldr.open(s)) == 6
    before = [h.id for h in ldr.open(s).search("harbour lamp")]
    assert before
    for i in range(2):
        if len(ldr.open(t).shards[i]) != len(ldr.open(s).shards[i]):
            shutil.rmtree(s / "shards" / f"shard-00{i}")
            shutil.copytree(t / "shards" / f"shard-00{i}", s / "shards" / f"shard-00{i}")
            break
    else:
        pytest.fail("no shard differs")
    check = r.invoke(main, ["check", str(s)])
    assert check.exit_code == 1 and "not the one the cluster committed" in check.output, check.output
    with pytest.raises(IndexFormatError, match="not the one the cluster committed"):
        ldr.open(s)


def test_a_reshard_never_writes_inside_its_source_and_a_killed_one_runs_again(tmp_path):
    """Issue 57 items 8 and 9: outputs inside the source are refused at once (no wait on its own
    lock); a reshard killed before its rename leaves nothing at the output and runs again."""
    s = tmp_path / "s"
    ShardedIndex.build(_docs(), s, shards=2, dense=None, sparse=None)
    r = CliRunner()
    for out in (s, s / "shards" / "shard-000" / "segments" / "x"):
        got = r.invoke(main, ["reshard", "-i", str(s), "-o", str(out), "--shards", "3", "--wait"])
        assert got.exit_code == 2 and "inside the index being resharded" in got.output, got.output
    assert r.invoke(main, ["check", str(s)]).exit_code == 0
    env = {**os.environ, "LDR_CRASH_AT": "reshard:before-rename"}
    killed = subprocess.run([sys.executable, "-m", "ldr.cli", "reshard", "-i", str(s), "-o", str(tmp_path / "n"),
                             "--shards", "3"], env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9 and not (tmp_path / "n").exists()
    again = r.invoke(main, ["reshard", "-i", str(s), "-o", str(tmp_path / "n"), "--shards", "3"])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    a, b = ldr.open(s), ldr.open(tmp_path / "n")
    for q in QUERIES:
        assert [(h.id, round(h.score, 6)) for h in a.search(q)] == [(h.id, round(h.score, 6)) for h in b.search(q)]


def test_a_missing_shard_is_named_with_the_right_advice(tmp_path):
    """Issue 57 item 14: a shard folder gone is named as a missing shard of the sharded index (not
    "build one at shards/shard-001"); `ldr check` reports it as a problem (exit 1); writes refuse."""
    import shutil

    s = tmp_path / "s"
    ShardedIndex.build(_docs(), s, shards=2, dense=None, sparse=None)
    shutil.rmtree(s / "shards" / "shard-001")
    r = CliRunner()
    for args, code in ((["search", "lamp", "-i", str(s)], 2), (["check", str(s)], 1),
                       (["delete", "x", "-i", str(s)], 2)):
        out = r.invoke(main, args)
        assert out.exit_code == code and "shard 1 of the sharded index" in out.output and "is missing" in out.output \
            and "-o " + str(s / "shards") not in out.output and "Traceback" not in out.output, (args, out.output)


def test_facets_of_a_sharded_index_are_the_unsharded_ones(tmp_path):
    """Issue 58: the search page's field counts, counted per shard and added, equal one index's."""
    docs = [{"id": f"d{i}", "text": f"bridge report {i}", "team": ["red", "blue", "green"][i % 3],
             "year": 2000 + i % 4, "tags": ["a", "b"][: 1 + i % 2]} for i in range(30)]
    sharded = ShardedIndex.build(docs, tmp_path / "s", shards=3, dense=None, sparse=None)
    one = ldr.Index.build(docs, tmp_path / "o", dense=None, sparse=None)
    got, want = sharded.facets(), one.facets()
    assert {**got, "generation": 0} == {**want, "generation": 0}
    team = next(f for f in got["fields"] if f["name"] == "team")
    assert team["values"] == [["blue", 10], ["green", 10], ["red", 10]] and team["documents"] == 30
    year = next(f for f in got["fields"] if f["name"] == "year")
    assert (year["min"], year["max"]) == (2000, 2003)
    assert next(f for f in got["fields"] if f["name"] == "tags")["values"] == [["a", 30], ["b", 15]]
    # counted over each segment's live rows: a second segment and deletes (a replaced document's
    # old row, two removed) are the counts of the documents the index now holds
    for ix in (sharded, one):
        ix.add([{"id": "d0", "text": "bridge report 0", "team": "amber", "year": 1999}, {"id": "n1", "text": "x"}])
        ix.delete(["d1", "d2"])
    got, want = sharded.facets(), one.facets()
    assert {**got, "generation": 0} == {**want, "generation": 0} and got["documents"] == 29
    team = next(f for f in got["fields"] if f["name"] == "team")
    assert team["values"] == [["blue", 9], ["green", 9], ["red", 9], ["amber", 1]] and team["documents"] == 28
    year = next(f for f in got["fields"] if f["name"] == "year")
    assert (year["min"], year["max"], year["documents"]) == (1999, 2003, 28)


def test_a_shard_reader_loads_no_model_and_answers_the_query_sides_encoding(unsharded):
    """Issue 79: the query side holds the models, a shard reader only the files. A fresh process
    opens the default index as a shard (as a Ray Serve replica does) and answers a default
    search's shard calls from the encodings it is sent, importing no torch, transformers or ONNX
    Runtime and loading no model; its first stages equal the ones the handle's own shard gives."""
    import pickle

    q = "when can the licence be terminated"
    first, _ = unsharded.plan(q, k=5).split()
    assert {"dense", "sparse", "bm25"} <= set(first.kinds)
    reps = {k: unsharded.query_side(k).encode(q) for k in first.kinds}
    terms = unsharded.as_shard()._finder(["dense"]).term_list(q)
    code = ("import pickle, sys\n"
            "import ldr\n"
            "from ldr.components import ENCODERS\n"
            "first, reps, terms = pickle.load(sys.stdin.buffer)\n"
            "shard = ldr.Index(sys.argv[1]).as_shard()\n"
            "shard.stats(first.query, ['bm25'], None)\n"
            "got = shard.first(first, reps, None)\n"
            "docs = sorted(got.ids)[:4]\n"
            "shard.windows(docs, ['dense', 'sparse'], reps, terms)\n"
            "shard.exact('sparse', reps['sparse'], docs, {})\n"
            "shard.fetch(docs, text=True)\n"
            "heavy = [m for m in ('torch', 'transformers', 'onnxruntime', 'sentence_transformers') if m in sys.modules]\n"
            "pickle.dump((got, heavy, len(ENCODERS.loaded())), sys.stdout.buffer)\n")
    r = subprocess.run([sys.executable, "-c", code, str(unsharded.path)], input=pickle.dumps((first, reps, terms)),
                       capture_output=True)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    got, heavy, models = pickle.loads(r.stdout)
    assert heavy == [] and models == 0
    here = unsharded.as_shard().first(first, reps, None)
    assert got.lists == here.lists and got.ids == here.ids and got.bounds == here.bounds and got.bounds


def test_shards_statistics_sum_alike_in_one_pass_or_pairwise():
    """CollectionStats.total (one pass where every shard lists the query's terms in one order) is
    the pairwise sum, terms in another order or missing on a shard included."""
    import functools
    import operator
    import random

    from ldr.values import CollectionStats

    rng = random.Random(3)
    for _ in range(200):
        terms = [f"t{i}" for i in range(rng.randrange(0, 6))]
        parts = []
        for _ in range(rng.randrange(1, 5)):
            mine = list(terms)
            if rng.random() < 0.3:
                rng.shuffle(mine)
            if rng.random() < 0.2 and mine:
                mine.pop()
            parts.append(CollectionStats(rng.randrange(100), float(rng.randrange(10_000)),
                                         {t: rng.randrange(50) for t in mine}))
        got, want = CollectionStats.total(parts), functools.reduce(operator.add, parts)
        assert (got.n, got.length, got.df) == (want.n, want.length, want.df)
        assert list(got.df) == list(want.df)
