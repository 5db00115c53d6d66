"""`ldr train whitening`: the index's passage vectors whitened into a copy of its dense model,
which builds, adds to and queries an index as any model with a Dense projection does."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.encode.dense import DenseSettings, load_dense
from ldr.train import whitening

TOPICS = ["harbour tides and the lighthouse keeper", "bridge bearings and corrosion of steel",
          "the school budget and its teachers", "a remote control shaped like a banana",
          "contract clauses on termination and damages", "the orchestra rehearsal of a symphony"]


FILLER = "the notes of today say that we met and talked about it again at length before the end".split()


def _docs(n=150):
    rng = np.random.default_rng(0)
    return [{"id": f"d{i}", "text": " ".join(f"{TOPICS[i % len(TOPICS)]} {' '.join(rng.choice(FILLER, 8))}."
                                             for _ in range(12))} for i in range(n)]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A dense index of short windows: ~1,000 passage vectors, more than twice MiniLM's 384 dims."""
    path = tmp_path_factory.mktemp("whiten") / "base"
    ldr.Index.build(_docs(), path, dense=DenseSettings(max_length=32, backend="onnx"), sparse=None, bm25="native")
    return path


def test_the_adapted_model_whitens_the_base_model_s_vectors(base, tmp_path):
    out = CliRunner().invoke(main, ["train", "whitening", "-i", str(base), "-o", str(tmp_path / "m")])
    assert out.exit_code == 0, out.output
    assert "fitted on" in out.output and "--dense" in out.output and "document's mean at 0.6" in out.output
    card = json.loads((tmp_path / "m" / whitening.CARD).read_text())
    vectors, _ = whitening.index_vectors(base)
    assert card["passages"] == len(vectors) > 2 * 384 and card["eps"] == whitening.EPS
    sample, _ = whitening.index_vectors(base, limit=800)        # a seeded sample, read a segment at a time
    assert sample.shape == (800, 384) and np.isin(sample[:, 0], vectors[:, 0]).all()
    mean, matrix = whitening.fit(vectors)
    # the fitted passages come out with their mean at 0 and their covariance near the identity
    white = (vectors - mean) @ matrix
    assert np.abs(white.mean(axis=0)).max() < 1e-3
    cov = white.T @ white / len(white)
    top = np.linalg.eigvalsh(cov)[-10:]
    assert np.all(top < 1.0 + 1e-3) and np.all(top > 0.5), top
    # the model folder runs the same transform after the base model, on both CPU engines
    texts = ["the lighthouse keeper", "steel corrosion of the bearings"]
    manual = (load_dense(DenseSettings(backend="onnx")).encode_queries(texts) - mean) @ matrix
    manual /= np.linalg.norm(manual, axis=1, keepdims=True)
    for engine in ("onnx", "torch"):
        got = load_dense(DenseSettings(model=str(tmp_path / "m"), backend=engine)).encode_queries(texts)
        np.testing.assert_allclose(got, manual, atol=2e-4)


def _whitened(vectors, mean, matrix):
    out = (vectors - mean) @ matrix
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_an_index_of_the_adapted_model_builds_adds_and_answers(base, tmp_path):
    from ldr.encode.dense_core import with_context

    whitening.whiten(base, tmp_path / "m")
    docs = _docs()
    idx = ldr.Index.build(docs[:-1], tmp_path / "adapted", dense=DenseSettings(model=str(tmp_path / "m"),
                                                                               max_length=32), sparse=None)
    idx.add([docs[-1]])                  # a second segment, encoded by the adapted model too
    assert len(idx) == len(docs)
    # every passage the base index holds, whitened, then mixed with its document's mean direction
    # at the card's weight: what the adapted index holds
    vectors, _ = whitening.index_vectors(base)
    mean, matrix = whitening.fit(vectors)
    _, owner = load_dense(DenseSettings(max_length=32, backend="onnx")).encode_documents([d["text"] for d in docs])
    assert len(owner) == len(vectors)
    want = with_context(_whitened(vectors, mean, matrix), owner, len(docs), whitening.CONTEXT)
    got, comp = whitening.index_vectors(tmp_path / "adapted")
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert comp["model"]["settings"]["context"] == whitening.CONTEXT > 0     # recorded: `ldr add`s mix alike
    assert comp["model"]["trained_from"] == "all-MiniLM-L6-v2"      # the English search defaults apply
    hits = idx.search(TOPICS[3], k=5, mode="dense")
    assert len(hits) == 5 and hits[0].scores["dense"] > hits[-1].scores["dense"]
    info = CliRunner().invoke(main, ["info", str(tmp_path / "adapted")])
    assert info.exit_code == 0 and f"document context {whitening.CONTEXT:g}" in info.output
    # its passages are mixed, its queries are not: a whitening fitted on them would not fit its queries
    out = CliRunner().invoke(main, ["train", "whitening", "-i", str(tmp_path / "adapted"), "-o", str(tmp_path / "m2")])
    assert out.exit_code == 2 and "--doc-context 0" in out.output and not (tmp_path / "m2").exists()
    # --doc-context 0 keeps the whitened passages as they are; the card's weight is only a default
    plain, _ = load_dense(DenseSettings(model=str(tmp_path / "m"), max_length=32, context=0,
                                        backend="onnx")).encode_documents([d["text"] for d in docs])
    np.testing.assert_allclose(plain, _whitened(vectors, mean, matrix), atol=2e-4)


def test_an_index_recorded_before_the_document_context_adds_without_it(base, tmp_path):
    """An index whose recorded settings have no `context` was built without one: its adds must not
    take the card's weight, or its old and new passages would be of two kinds."""
    from ldr.encode.models import model_settings

    whitening.whiten(base, tmp_path / "m")
    comp = {"model": {"name": str(tmp_path / "m"), "settings": {
        "model": str(tmp_path / "m"), "strategy": "maxp", "max_length": 32, "backend": "onnx"}}}
    settings = model_settings(comp, DenseSettings, False, None)
    assert settings.context is None
    assert load_dense(settings).settings.context == 0.0
    assert load_dense(DenseSettings(model=str(tmp_path / "m"), max_length=32, backend="onnx")).settings.context \
        == whitening.CONTEXT                                              # a new build takes the card's
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("a short note")
    out = CliRunner().invoke(main, ["index", str(tmp_path / "c"), "-o", str(tmp_path / "x"), "--doc-context", "-1"])
    assert out.exit_code == 2 and "--doc-context -1.0 is out of range" in out.output
    assert not (tmp_path / "x").exists()


def test_whitening_refuses_what_it_cannot_fit(base, tmp_path):
    from ldr.errors import ConfigError

    small = tmp_path / "small"
    ldr.Index.build(_docs(6), small, dense=DenseSettings(max_length=32, backend="onnx"), sparse=None)
    out = CliRunner().invoke(main, ["train", "whitening", "-i", str(small), "-o", str(tmp_path / "m")])
    assert out.exit_code == 2 and "at least 768 passages" in out.output and "Traceback" not in out.output
    no_dense = tmp_path / "bm25"
    ldr.Index.build(_docs(6), no_dense, dense=None, sparse=None)
    out = CliRunner().invoke(main, ["train", "whitening", "-i", str(no_dense), "-o", str(tmp_path / "m")])
    assert out.exit_code == 2 and "no dense component" in out.output
    with pytest.raises(ConfigError, match="out of range"):
        whitening.whiten(base, tmp_path / "m", context=-0.5)
    assert not (tmp_path / "m").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    out = CliRunner().invoke(main, ["train", "whitening", "-i", str(base), "-o", str(tmp_path / "full")])
    assert out.exit_code == 2 and "not empty" in out.output
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def test_a_model_that_leaves_normalising_to_ldr_gets_its_normalize_first(tmp_path):
    """e5's converted folder ends in Pooling (ldr normalises): the index holds unit vectors, and the
    fitted transform must see unit vectors in the adapted model too."""
    base = tmp_path / "base"
    base.mkdir()
    (base / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    whitening.write_model(base, tmp_path / "m", np.zeros(4, np.float32), np.eye(4, dtype=np.float32), {})
    modules = json.loads((tmp_path / "m" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize", "Dense",
                                                               "Normalize"]
    assert all((tmp_path / "m" / m["path"]).is_dir() for m in modules[2:])


def test_a_folder_that_is_not_a_model_is_a_clear_error_and_nothing_is_written(tmp_path):
    from ldr.errors import ConfigError

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "secret").write_text("not a model")
    with pytest.raises(ConfigError, match="not a sentence-transformers model folder"):
        whitening.write_model(tmp_path / "etc", tmp_path / "m", np.zeros(4, np.float32), np.eye(4, dtype=np.float32),
                              {})
    assert not (tmp_path / "m").exists()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.floats(0, 4), st.integers(0, 2 ** 32 - 1))
def test_the_document_context_is_each_document_s_own(sizes, weight, seed):
    """Unit rows; weight 0 and one-passage documents unchanged; a document's rows the same whatever
    other documents share its batch (an `ldr add` mixes as the build did)."""
    from ldr.encode.dense_core import with_context

    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(sum(sizes), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    got = with_context(vecs, owner, len(sizes), weight)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(with_context(vecs, owner, len(sizes), 0.0), vecs, atol=1e-6)
    single = np.isin(owner, np.flatnonzero(np.array(sizes) == 1))
    np.testing.assert_allclose(got[single], vecs[single], atol=1e-5)
    start = 0
    for d, n in enumerate(sizes):        # each document alone, as one `ldr add`
        alone = with_context(vecs[start:start + n], np.zeros(n, np.int64), 1, weight)
        np.testing.assert_array_equal(alone, got[start:start + n])
        start += n


def test_apply_commits_the_index_s_passages_as_the_adapted_model_gives_them(base, tmp_path):
    """`--apply`: seconds, nothing re-encoded; the index then holds what a build with the model
    holds, answers with it, and its adds run it; a kill before the commit leaves it as it was."""
    import os
    import shutil
    import subprocess
    import sys

    from ldr.encode.dense_core import with_context

    idx_path = tmp_path / "idx"
    shutil.copytree(base, idx_path)
    before, _ = whitening.index_vectors(idx_path)
    # killed after the rewritten segment is written, before the commit: the last commit answers
    env = {**os.environ, "LDR_CRASH_AT": "merge:segment-written"}
    crashed = subprocess.run([sys.executable, "-m", "ldr.cli", "train", "whitening", "-i", str(idx_path), "-o",
                              str(tmp_path / "m0"), "--apply"], env=env, capture_output=True, text=True)
    assert crashed.returncode != 0
    kept, comp = whitening.index_vectors(idx_path)
    assert np.array_equal(kept, before) and comp["model"]["name"] == "all-MiniLM-L6-v2"
    out = CliRunner().invoke(main, ["train", "whitening", "-i", str(idx_path), "-o", str(tmp_path / "m"), "--apply"])
    assert out.exit_code == 0, out.output
    assert "now holds its passages as the model gives them (generation 2)" in out.output   # the killed write took none
    got, comp = whitening.index_vectors(idx_path)
    mean, matrix = whitening.fit(before)
    docs = _docs()
    _, owner = load_dense(DenseSettings(max_length=32, backend="onnx")).encode_documents([d["text"] for d in docs])
    want = with_context(_whitened(before, mean, matrix), owner, len(docs), whitening.CONTEXT)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert comp["model"]["path"] == str((tmp_path / "m").resolve()) and comp["model"]["settings"]["context"] == 0.6
    with ldr.open(idx_path) as idx:
        hits = idx.search(TOPICS[3], k=3, mode="dense")
        assert len(hits) == 3 and hits[0].scores["dense"] >= hits[-1].scores["dense"]
        assert idx.query_side("dense").encoder.path == str((tmp_path / "m").resolve())   # queries run the model
        # an add encodes with the adapted model and mixes as the applied passages were mixed
        extra = {"id": "new", "text": docs[3]["text"]}
        idx.add([extra])
    vecs, _ = whitening.index_vectors(idx_path)
    rows = owner == 3
    np.testing.assert_allclose(vecs[-int(rows.sum()):], want[rows], atol=2e-4)
    # applied twice, the index's passages are mixed: refused, nothing written
    again = CliRunner().invoke(main, ["train", "whitening", "-i", str(idx_path), "-o", str(tmp_path / "m2"),
                                      "--apply"])
    assert again.exit_code == 2 and "--doc-context 0" in again.output and not (tmp_path / "m2").exists()


def test_apply_rewrites_every_shard_of_a_sharded_index(tmp_path):
    docs = _docs()
    sharded, plain = tmp_path / "sharded", tmp_path / "plain"
    settings = dict(dense=DenseSettings(max_length=32, backend="onnx"), sparse=None, bm25="native")
    ldr.Index.build(docs, sharded, shards=2, **settings)
    before, _ = whitening.index_vectors(sharded)
    about = whitening.whiten(sharded, tmp_path / "m", in_place=True)
    assert about["applied"]["shards"] == 2
    got, comp = whitening.index_vectors(sharded)
    mean, matrix = whitening.fit(before)
    assert comp["model"]["settings"]["context"] == whitening.CONTEXT
    # each shard's passages, whitened by the one fit and mixed within their own documents
    ldr.Index.build(docs, plain, dense=DenseSettings(model=str(tmp_path / "m"), max_length=32, backend="onnx"),
                    sparse=None, bm25="native")
    want, _ = whitening.index_vectors(plain)
    assert np.allclose(np.sort(got[:, 1]), np.sort(want[:, 1]), atol=2e-4)
    with ldr.open(sharded) as idx:
        assert [h.id for h in idx.search(TOPICS[0], k=3, mode="dense")]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=30), st.sampled_from([0.0, 0.6, 2.0]),
       st.integers(0, 2 ** 32 - 1))
def test_the_passage_map_treats_each_document_alone(owners, context, seed):
    """`--apply`'s map over a merged segment's rows (owners as the merge numbers them, any order of
    ids): unit rows, each document's rows from its own rows only, the build's arithmetic."""
    from ldr.encode.dense_core import with_context

    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(len(owners), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    owner = np.sort(np.array(owners)) * 7            # a document's rows together, its number sparse
    mean, matrix = rng.normal(size=8).astype(np.float32) * 0.1, np.eye(8, dtype=np.float32) + 0.1
    got = whitening.PassageMap(mean, matrix, context)(vecs, owner)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    white = (vecs.astype(np.float64) - mean) @ matrix
    white /= np.linalg.norm(white, axis=1, keepdims=True)
    for d in np.unique(owner):
        rows = owner == d
        alone = with_context(white[rows].astype(np.float32), np.zeros(int(rows.sum()), np.int64), 1, context) \
            if context else white[rows]
        np.testing.assert_allclose(got[rows], alone, atol=1e-5)


def test_a_rewrite_leaves_no_segment_as_it_was(base, tmp_path):
    """A kind rewritten by a merge holds no row of its old kind, however many segments may stay."""
    import shutil

    from ldr.index.writer import IndexWriter

    idx_path = tmp_path / "idx"
    shutil.copytree(base, idx_path)
    with ldr.open(idx_path) as idx:
        idx.add([{"id": "extra", "text": _docs(1)[0]["text"] + " again"}])      # a second segment
    before, comp = whitening.index_vectors(idx_path)
    with IndexWriter(idx_path) as w:
        assert len(w.current["segments"]) == 2
        r = w.merge(5, rewrite={"dense": (comp, lambda vectors, owner: -vectors)})
    assert r["segments"] == 1
    after, _ = whitening.index_vectors(idx_path)
    np.testing.assert_array_equal(after, -before)
