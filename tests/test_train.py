"""`ldr train dense|reranker` on tiny data: training runs, the loss falls, the saved model loads
through ldr's model resolution and changes the ranking; the model folder carries its card."""
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.train.mining import mine, split_queries

from conftest import release_memory
from test_tune import beir  # noqa: F401  (the module fixture: index + BEIR folder)

# a training's models, optimiser state and checkpoints are freed after each test, not kept beside
# the next one's (the suite's peak was here)
pytestmark = pytest.mark.usefixtures("fresh_encoders")


@pytest.fixture(autouse=True)
def _release_after_each():
    yield
    release_memory()


@pytest.fixture(scope="module")
def train_data(beir):  # noqa: F811
    idx, data, queries, qrels = beir
    # the qrels as a train split too
    (data / "qrels" / "train.tsv").write_text((data / "qrels" / "dev.tsv").read_text())
    return idx, data, queries, qrels


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Small random models for the tests of a loss's mechanics (mined examples, OPL, listwise and its
    cached mini-batches): a step there is ~30x cheaper than MiniLM's. The trainings from the packaged
    models (the CLI's defaults) are the tests that also check the ranking changes."""
    from tiny_models import make
    root = tmp_path_factory.mktemp("tiny")
    return {"dense": str(make("bert", root / "dense")), "reranker": str(make("bert-classifier", root / "cross"))}


def falls(curve: list[dict]) -> bool:
    losses = [c["loss"] for c in curve]
    return len(losses) >= 4 and np.mean(losses[-2:]) < np.mean(losses[:2])


def test_mining_takes_maxp_positives_and_non_relevant_negatives(train_data):
    idx, _, queries, qrels = train_data
    index = ldr.Index(idx)
    train, dev = split_queries(sorted(qrels), 0.25, seed=0)
    assert len(dev) == 6 and not set(train) & set(dev)
    examples, skipped = mine(index, queries, qrels, train, negatives=3, progress=False)
    assert skipped == 0 and len(examples) == len(train)
    for ex in examples:
        rel = set(qrels[ex.qid])
        assert ex.positive_docs == sorted(rel) and not rel & set(ex.negative_docs)
        assert len(ex.negatives) == 3
        doc = index.document(ex.positive_docs[0]).text
        assert ex.positives[0] in doc          # a passage of the relevant document, verbatim


def test_train_dense_lowers_the_loss_and_changes_the_ranking(train_data, tmp_path):
    idx, data, queries, _ = train_data
    out = tmp_path / "dense-model"
    r = CliRunner().invoke(main, ["train", "dense", "--data", str(data), "-i", str(idx), "-o", str(out),
                                  "--epochs", "2", "--batch-size", "4", "--lr", "1e-4", "--dev-fraction", "0.25",
                                  "--negatives", "1", "--max-seq-length", "32", "--eval-steps", "4", "-q"])
    assert r.exit_code == 0, r.output
    card = json.loads((out / "ldr-train.json").read_text())
    assert card["kind"] == "dense" and card["train_queries"] == 18 and card["dev_queries"] == 6
    assert card["settings"]["loss"] == "mnrl" and card["dev"]["before"] is not None
    assert falls(card["loss_curve"]), card["loss_curve"]
    assert "trained by ldr" in (out / "README.md").read_text()
    # the model folder is an ordinary local model: an index built with it ranks differently
    from ldr.encode.dense import DenseSettings
    base = ldr.Index(idx)
    docs = [base.document(i) for i in base.docstore.live_ids()]
    # on PyTorch: its ONNX export is any local folder's (test_onnx), 9 s of a first run here
    new = ldr.Index.build(docs, tmp_path / "idx2", dense=DenseSettings(model=str(out), max_length=32, device="cpu",
                                                                       backend="torch"),
                          sparse=None, bm25=None)
    assert new.components["dense"]["model"]["name"] == str(out)
    # fine-tuned from the packaged model: the search defaults its language measured for that model
    assert new.components["dense"]["model"]["trained_from"] == "all-MiniLM-L6-v2"
    assert new.manifest["settings"]["build"]["search_profile"] == base.manifest["settings"]["build"]["search_profile"]
    changed = 0
    for q in list(queries.values())[:8]:
        a = [(h.id, round(h.score, 4)) for h in base.search(q, k=5, mode="dense")]
        b = [(h.id, round(h.score, 4)) for h in new.search(q, k=5, mode="dense")]
        changed += a != b
    assert changed > 0


def test_train_dense_with_opl_on_examples_mined_before(train_data, tiny, tmp_path):
    idx, data, queries, qrels = train_data
    from ldr.train.dense import DenseTrainSettings
    from ldr.train.run import train
    # examples mined once for every query (as cross-validation does); one query has none
    examples, _ = mine(ldr.Index(idx), queries, qrels, sorted(qrels), negatives=4, progress=False)
    mined = {ex.qid: ex for ex in examples if ex.qid != "q003"}
    info = train("dense", data, tmp_path / "opl", index_path=str(idx), dev_fraction=0.25, progress=False, indexes=ldr.Index,
                 mined=mined, base_model=tiny["dense"],
                 settings=DenseTrainSettings(loss="opl", epochs=2, batch_size=2, negatives=2, learning_rate=1e-3,
                                             max_seq_length=64, eval_steps=4))   # a dev evaluation per 4 steps
    assert info["settings"]["loss"] == "opl" and falls(info["loss_curve"])
    assert info["skipped_queries"] == 1 and info["train_queries"] + info["dev_queries"] == 23


def test_train_reranker_lowers_the_loss_and_reranks(train_data, tmp_path):
    idx, data, queries, _ = train_data
    out = tmp_path / "reranker"     # from the packaged MiniLM, the default
    r = CliRunner().invoke(main, ["train", "reranker", "--data", str(data), "-i", str(idx), "-o", str(out),
                                  "--epochs", "1", "--batch-size", "8", "--lr", "1e-4",
                                  "--dev-fraction", "0.25", "--negatives", "3", "--max-length", "32", "--loss", "bce",
                                  "--eval-steps", "3", "-q"])
    assert r.exit_code == 0, r.output
    card = json.loads((out / "ldr-train.json").read_text())
    assert card["kind"] == "reranker" and card["settings"]["loss"] == "bce" and card["positives"] > 0 and falls(card["loss_curve"]), card["loss_curve"]
    index = ldr.Index(idx)
    changed = 0
    for q in list(queries.values())[:6]:
        plain = [h.id for h in index.search(q, k=8, rerank=False)]
        reranked = index.search(q, k=8, rerank_model=str(out), rerank_depth=8)
        assert reranked.reranker and sorted(h.id for h in reranked) == sorted(plain)
        changed += [h.id for h in reranked] != plain
    assert changed > 0
    # CLI: the reranker works from `ldr search --rerank-model`
    r = CliRunner().invoke(main, ["search", "-i", str(idx), "--rerank-model", str(out), "lease ref005k", "-k", "3"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("mini_batch", [None, 3])     # 3: the cached loss, a step's 16 pairs in 6 chunks
def test_train_reranker_listwise_on_examples_mined_before(train_data, tiny, tmp_path, mini_batch):
    idx, data, queries, qrels = train_data
    from ldr.train.reranker import RerankerTrainSettings, tuples
    from ldr.train.run import train
    examples, _ = mine(ldr.Index(idx), queries, qrels, sorted(qrels), negatives=2, progress=False)
    mined = {ex.qid: ex for ex in examples}
    # a query with one negative has it repeated; one with none is counted, not trained on
    few, none = mined["q001"], mined["q002"]
    few.negatives, none.negatives = few.negatives[:1], []
    cols, dropped = tuples([few, none], 3)
    assert dropped == 1 and cols["query"] == [few.query] * len(few.positives)
    assert cols["negative_1"] == cols["negative_2"] == cols["negative_3"] == [few.negatives[0]] * len(few.positives)
    info = train("reranker", data, tmp_path / "mnrl", index_path=str(idx), dev_fraction=0.25, progress=False, indexes=ldr.Index,
                 mined=mined, base_model=tiny["reranker"],
                 # a random model needs more steps than MiniLM's 2 epochs to learn to rank: 6 epochs of
                 # the tiny model cost a fifth of those; at 6e-3 its loss rose again at the last step once
                 # the mined negatives changed with the window stage's default (window_scales), 3e-3 falls
                 settings=RerankerTrainSettings(loss="mnrl", epochs=6, batch_size=4, negatives=2,
                                                max_length=64, learning_rate=3e-3,
                                                mini_batch=mini_batch, eval_steps=12))
    assert info["settings"]["loss"] == "mnrl" and info["settings"]["mini_batch"] == mini_batch
    assert falls(info["loss_curve"]), info["loss_curve"]
    assert info["queries_without_negatives"] == ("q002" not in info["dev_qids"])
    assert info["rows"] + info["queries_without_negatives"] >= info["train_queries"]
    with pytest.raises(ldr.errors.ConfigError, match="in-batch"):
        train("reranker", data, tmp_path / "x", index_path=str(idx), progress=False, indexes=ldr.Index, mined=mined,
              settings=RerankerTrainSettings(loss="mnrl", in_batch=0))
    with pytest.raises(ldr.errors.ConfigError, match="mini-batch"):
        train("reranker", data, tmp_path / "x", index_path=str(idx), progress=False, indexes=ldr.Index, mined=mined,
              settings=RerankerTrainSettings(loss="bce", mini_batch=4))


def test_stale_folders_of_a_killed_training_are_swept(tmp_path):
    """A training killed before it published leaves `.NAME.part-PID-*`: the next one removes it
    when PID is gone, and touches nothing else beside the model."""
    import subprocess
    import sys

    from ldr.train.run import sweep_stale
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    out = tmp_path / "model"
    stale = [tmp_path / f".model.part-{dead}-abc", tmp_path / f".model.old-{dead}"]
    kept = [tmp_path / f".model.part-{os.getpid()}-xyz", tmp_path / f".other.part-{dead}-abc",
            tmp_path / ".model.part-notapid", tmp_path / "model-notes"]
    for p in stale + kept:
        p.mkdir()
        (p / "f").write_text("x")
    assert sorted(sweep_stale(out)) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)


def test_train_refuses_a_folder_it_did_not_write(train_data, tmp_path):
    idx, data, _, _ = train_data
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    r = CliRunner().invoke(main, ["train", "dense", "--data", str(data), "-i", str(idx), "-o", str(out), "-q"])
    assert r.exit_code == 2 and "not a model ldr trained" in r.output
    assert (out / "notes.txt").read_text() == "keep me"
    r = CliRunner().invoke(main, ["train", "dense", "--data", str(data), "--split", "nope", "-i", str(idx),
                                  "-o", str(tmp_path / "x"), "-q"])
    assert r.exit_code == 2 and "splits present" in r.output


def test_pseudo_queries_come_from_their_document_and_the_search_ranks_it(train_data):
    from ldr.train.pseudo import PseudoSettings, pseudo_examples, sentences
    idx, *_ = train_data
    index = ldr.Index(idx)
    examples, counts = pseudo_examples(index, PseudoSettings(queries=24, window_words=30, top=3), progress=False)
    assert counts["drawn"] == 24 and counts["kept"] == len(examples) > 0
    assert counts["kept"] + counts.get("vague", 0) + counts.get("no negative", 0) == 24
    assert {"summaries", "keyword sets"} <= set(counts)
    for ex in examples:
        (doc,) = ex.positive_docs
        text = " ".join(sentences(index.document(doc).text))
        assert ex.positives[0] in text                    # the window, verbatim (markers and spacing cleaned)
        assert doc not in ex.negative_docs and len(ex.negatives) == 1
        assert ex.negatives[0] in " ".join(sentences(index.document(ex.negative_docs[0]).text))
        # the teacher ranks the source document in its top 3 for the query
        assert doc in [h.id for h in index.search(ex.query, k=3, passages=0)]


def test_a_document_s_keywords_are_its_own_most_telling_terms_and_their_window_the_positive(train_data):
    """The third shape: the whole document's top terms by tf·idf, as written; the positive is the
    document's window holding most of their weight; the shapes are taken in turn, and an unknown
    one is refused by name."""
    from dataclasses import replace

    from ldr.errors import ConfigError
    from ldr.train.pseudo import PseudoSettings, Terms, best_window, pseudo_examples, windows
    idx, *_ = train_data
    index = ldr.Index(idx)
    s = PseudoSettings(queries=24, window_words=30, top=3, document_keywords=6, shapes=("document keywords",))
    examples, counts = pseudo_examples(index, s, progress=False)
    assert counts["drawn"] == 24 and counts["kept"] == counts["document keywords"] == len(examples) > 0
    terms = Terms(index)
    for ex in examples:
        (doc,) = ex.positive_docs
        words = ex.query.split()
        assert 0 < len(words) <= 6 and len(set(words)) == len(words)
        text = index.document(doc).text.lower()
        assert all(w in text for w in words)          # each keyword as the document writes it
        ws = windows(doc, index.document(doc).text, 30, terms)
        assert ex.positives[0] == best_window(ws, set(terms(ex.query)), _idf(index, terms)).text
    mixed = pseudo_examples(index, PseudoSettings(queries=24, window_words=30, top=3, shapes=(
        "summaries", "keyword sets", "document keywords")), progress=False)[1]
    assert sum(mixed.get(k, 0) for k in ("summaries", "keyword sets", "document keywords")) == mixed["kept"]
    # more draws than documents: a document's keyword query is asked once, the others counted
    again = pseudo_examples(index, replace(s, queries=60), progress=False)[1]
    assert again["drawn"] == 60 and again["repeated"] == 60 - 24
    assert again["kept"] + again.get("vague", 0) + again.get("no negative", 0) == 24
    with pytest.raises(ConfigError, match="document keywords"):
        PseudoSettings(shapes=("summaries", "sentences"))


def _idf(index, terms) -> dict:
    """pseudo_examples' idf over the index's documents, computed again."""
    import math
    from collections import Counter

    from ldr.train.pseudo import windows
    ids, df = index.live_ids(), Counter()
    for d in ids:
        df.update({t for w in windows(d, index.document(d).text, 30, terms) for ts in w.terms for t in ts})
    return {t: math.log(1 + (len(ids) - n + 0.5) / (n + 0.5)) for t, n in df.items()}


def test_train_dense_from_the_corpus_alone(train_data, tiny, tmp_path):
    idx, data, _, _ = train_data
    out = tmp_path / "pseudo-model"
    args = ["train", "dense", "-i", str(idx), "-o", str(out), "--epochs", "2", "--batch-size", "4", "--lr", "1e-3",
            "--max-seq-length", "32", "--eval-steps", "4", "-q"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "--from-corpus" in r.output            # no labels and no --from-corpus
    r = CliRunner().invoke(main, args + ["--from-corpus", "--data", str(data)])
    assert r.exit_code == 2 and "drop --data" in r.output
    r = CliRunner().invoke(main, args + ["--shapes", "summaries"])
    assert r.exit_code == 2 and "for --from-corpus" in r.output
    for shapes, said in ((" , ", "got none"), ("summaries,sentences", "got sentences")):
        r = CliRunner().invoke(main, args + ["--from-corpus", "--shapes", shapes])
        assert r.exit_code != 0 and said in r.output and "Traceback" not in r.output, r.output
    from ldr.train.dense import DenseTrainSettings
    from ldr.train.pseudo import PseudoSettings
    from ldr.train.run import train
    info = train("dense", None, out, index_path=str(idx), indexes=ldr.Index, base_model=tiny["dense"],
                 progress=False, dev_fraction=0.25, pseudo=PseudoSettings(queries=40, window_words=30),
                 settings=DenseTrainSettings(epochs=2, batch_size=4, learning_rate=1e-3, max_seq_length=32,
                                             eval_steps=4))
    card = json.loads((out / "ldr-train.json").read_text())
    assert card["pseudo"]["drawn"] == 40 and card["train_queries"] + card["dev_queries"] == card["pseudo"]["kept"]
    assert card["documents"] == 24 and "no query" in card["data"] and falls(info["loss_curve"])
    assert card["base_name"] == tiny["dense"]
    assert "pseudo-queries drawn from the windows of 24 documents" in (out / "README.md").read_text()
    one = tmp_path / "one"
    ldr.Index.build([{"id": "a", "text": "only one document here " * 10}], one, sparse=None)
    with pytest.raises(ldr.errors.ConfigError, match="at least two"):
        train("dense", None, tmp_path / "m1", index_path=str(one), indexes=ldr.Index, progress=False,
              pseudo=PseudoSettings(queries=8))
