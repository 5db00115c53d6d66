"""An index never harms a user's files, never runs code on its own say-so, never reads outside
itself, and a damaged index is an IndexFormatError (or an `ldr check` failure), never a
traceback or a silently different ranking."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import ConfigError, IndexFormatError
from ldr.index.check import check_index
from ldr.index.manifest import _self_checksum, file_digest

from conftest import cli_run, bm25_dir, newest_manifest, segment_dir


def build(docs, path, **kw):
    kw.setdefault("dense", None)
    kw.setdefault("sparse", None)
    return ldr.Index.build(docs, path, **kw)


def docs(n=20, prefix="doc"):
    return [{"id": f"{prefix}{i}", "text": f"document {i} about topic{i % 5} and zebra{i}"} for i in range(n)]


def rewrite_manifest(idx: Path, edit, rehash: bool = True) -> None:
    """Edit a manifest the way an attacker would: re-sign its checksum (and the file hashes)."""
    p = newest_manifest(idx)
    m = json.loads(p.read_text())
    edit(m)
    if rehash:
        for rel, info in m["files"].items():
            f = idx / rel
            if f.is_file() and not os.path.isabs(rel) and ".." not in rel:
                info.update(size=f.stat().st_size, sha256=file_digest(f))
    m["checksum"] = _self_checksum(m)
    p.write_text(json.dumps(m))


def flip(path: Path, offset: int, n: int = 8) -> None:
    data = bytearray(path.read_bytes())
    for i in range(offset, min(offset + n, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


# -- 1. never delete files ldr did not write ------------------------------------------------

def test_a_foreign_manifest_json_is_not_an_index(tmp_path):
    proj = tmp_path / "webapp"
    proj.mkdir()
    (proj / "manifest.json").write_text('{"name": "my-app", "version": "1.0.0"}')
    (proj / "index.html").write_text("<html>precious</html>")
    with pytest.raises(ConfigError, match="not a readable ldr index manifest"):
        build(docs(), proj)
    assert (proj / "index.html").read_text() == "<html>precious</html>"
    out = CliRunner().invoke(main, ["index", str(tmp_path / "webapp"), "-o", str(proj), "-q", "--dense", "none",
                                    "--sparse", "none"])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert sorted(p.name for p in proj.iterdir()) == ["index.html", "manifest.json"]


def test_foreign_files_inside_an_index_are_named_and_kept(tmp_path):
    idx = tmp_path / "idx"
    build(docs(), idx)
    (idx / "notes.txt").write_text("mine")
    (idx / "corpus").mkdir()
    (idx / "corpus" / "a.txt").write_text("my corpus")
    with pytest.raises(ConfigError, match=r"corpus/, notes\.txt"):
        build(docs(5, "new"), idx, overwrite=True)
    assert (idx / "notes.txt").read_text() == "mine" and (idx / "corpus" / "a.txt").read_text() == "my corpus"
    assert ldr.open(idx).search("zebra3", k=1)[0].id == "doc3"   # the old index still answers


def test_output_inside_the_corpus_is_not_ingested(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"d{i}.txt").write_text(f"text number {i} about owls")
    r = CliRunner()
    for _ in range(2):  # the second build used to fail on "duplicate id ... from idx/docstore"
        out = r.invoke(main, ["index", str(corpus), "-o", str(corpus / "idx"), "-q", "--dense", "none",
                              "--sparse", "none", "--overwrite"])
        assert out.exit_code == 0, out.output
        # the index itself is counted as a skip (issue 45 item 9: skips are counted, never silent)
        assert "4 documents indexed, 1 skipped (ldr index directory: 1)" in out.output
    # another ldr index lying in the corpus is skipped and counted, not read as documents
    build(docs(3), corpus / "other-index")
    out = r.invoke(main, ["index", str(corpus), "-o", str(tmp_path / "idx2"), "-q", "--dense", "none", "--sparse", "none"])
    assert "4 documents indexed, 2 skipped" in out.output and "ldr index directory: 2" in out.output


# -- 2. an index never runs code by itself ----------------------------------------------------

@pytest.mark.slow
def test_trust_remote_code_is_never_taken_from_the_manifest(tmp_path):
    from ldr.encode.dense import DenseSettings

    idx = tmp_path / "idx"
    build(docs(4), idx, dense=DenseSettings(strategy="truncate", max_length=32), bm25=None)
    rewrite_manifest(idx, lambda m: m["components"]["dense"]["model"]["settings"].update(trust_remote_code=True))
    with pytest.raises(ConfigError, match="--trust-remote-code"):
        ldr.open(idx).search("zebra2", k=1)
    r = CliRunner()
    out = r.invoke(main, ["search", "zebra2", "-i", str(idx)])
    assert out.exit_code == 2 and "--trust-remote-code" in out.output and "Traceback" not in out.output
    out = r.invoke(main, ["info", str(idx)])
    assert "model path" in out.output and "needs --trust-remote-code" in out.output
    # the user's explicit consent opens it
    assert ldr.open(idx, trust_remote_code=True).search("zebra2", k=1)[0].id == "doc2"


# -- 3. manifest paths stay inside the index --------------------------------------------------

@pytest.mark.parametrize("edit, match", [
    (lambda m: m["components"]["bm25"].update(path="../elsewhere"), "outside the index"),
    (lambda m: m["components"]["bm25"].update(path="/tmp"), "outside the index"),
    (lambda m: m["files"].update({"/etc/hostname": {"size": 1, "sha256": "0" * 64}}), "outside the index"),
    (lambda m: m["files"].update({"../x": {"size": 1, "sha256": "0" * 64}}), "outside the index"),
    (lambda m: m["components"]["bm25"].pop("k1"), "components.bm25.k1 is missing"),
    (lambda m: m.pop("doc_count"), "doc_count"),
    (lambda m: m.pop("segments"), "segments"),
    (lambda m: m["segments"][0].update(path="../elsewhere"), "outside the index"),
    (lambda m: m["segments"][0].update(deletes="/etc/passwd"), "outside the index"),
    (lambda m: m["segments"][0].update(live=99), "live"),
    (lambda m: m["components"]["bm25"].update(backend=7), "wrong type"),
    # issue 42 item 6: a clear index-format error, never KeyError / TypeError
    (lambda m: m.pop("next_uid"), "'next_uid' is missing"),
    (lambda m: m.pop("next_segment"), "'next_segment' is missing"),
    (lambda m: m.update(history={"op": "x"}), "'history' is not a list"),
    (lambda m: m["segments"].append(dict(m["segments"][0])), "listed twice"),
])
def test_manifest_paths_and_keys_are_checked(tmp_path, edit, match):
    idx = tmp_path / "idx"
    build(docs(), idx)
    (tmp_path / "elsewhere").mkdir()
    rewrite_manifest(idx, edit, rehash=False)
    with pytest.raises(IndexFormatError, match=match):
        ldr.open(idx).search("zebra1")
    out = CliRunner().invoke(main, ["info", str(idx)])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert list((tmp_path / "elsewhere").iterdir()) == []    # nothing created outside


def test_symlink_out_of_the_index_is_refused(tmp_path):
    idx = tmp_path / "idx"
    build(docs(), idx, bm25="tantivy")     # an index store of its own: a folder a link could replace
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    meta = bm25_dir(idx) / "meta.json"
    meta.rename(meta.with_name("meta.json.bak"))
    os.symlink(secret, meta)
    with pytest.raises(IndexFormatError, match="outside the index directory"):
        ldr.open(idx)


def test_inside_follows_links_only_where_they_stay_inside(tmp_path):
    """A folder of the index replaced by a link: refused when it leads out, kept when it leads to
    another folder of the same index; a root that is itself a link is the user's choice."""
    from ldr.paths import inside

    root, out = tmp_path / "idx", tmp_path / "out"
    (root / "a" / "b").mkdir(parents=True)
    (out / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    (out / "b" / "f").write_text("secret")
    (root / "in").symlink_to(root / "a")
    (root / "away").symlink_to(out)
    assert inside(root, "in/b/f") == root / "in" / "b" / "f" and inside(root, "a/b/missing/x").name == "x"
    for rel in ("away/b/f", "away", "away/none"):
        with pytest.raises(IndexFormatError, match="outside the index directory"):
            inside(root, rel)
    (tmp_path / "link").symlink_to(root)
    assert inside(tmp_path / "link", "a/b/f").read_text() == "x"


def test_edited_manifest_fails_its_own_checksum(tmp_path):
    idx = tmp_path / "idx"
    build(docs(), idx)
    p = newest_manifest(idx)
    assert '"doc_count": 20' in p.read_text()
    p.write_text(p.read_text().replace('"doc_count": 20', '"doc_count": 19'))
    with pytest.raises(IndexFormatError, match="its own checksum"):
        ldr.open(idx)


# -- 4. damaged files: IndexFormatError at open, or `ldr check` -------------------------------

@pytest.fixture(scope="module")
def full_index(tmp_path_factory):
    """BM25 + dense (MiniLM, maxp) + sparse (SPLADE-tiny) on a few short documents."""
    from ldr.encode.dense import DenseSettings
    root = tmp_path_factory.mktemp("full")
    build(docs(12), root / "idx", dense=DenseSettings(max_length=16), sparse="splade-tiny")
    return root / "idx"


@pytest.fixture(scope="module")
def tantivy_index(tmp_path_factory):
    """The same with tantivy's BM25 (an index store of its own) in place of the default native one."""
    from ldr.encode.dense import DenseSettings
    root = tmp_path_factory.mktemp("full-tantivy")
    build(docs(12), root / "idx", dense=DenseSettings(max_length=16), sparse="splade-tiny", bm25="tantivy")
    return root / "idx"


def _copy(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


def _seg(i: Path) -> Path:
    return segment_dir(i)


DAMAGE = {
    "docstore": lambda i: flip(_seg(i) / "docstore.parquet", (_seg(i) / "docstore.parquet").stat().st_size // 3),
    "owner": lambda i: np.save(_seg(i) / "dense" / "owner.npy", np.load(_seg(i) / "dense" / "owner.npy") + 1000),
    "owner-order": lambda i: np.save(_seg(i) / "dense" / "owner.npy",
                                     np.load(_seg(i) / "dense" / "owner.npy")[::-1].copy()),
    "doc_indptr": lambda i: np.save(_seg(i) / "sparse" / "doc_indptr.npy",
                                    np.load(_seg(i) / "sparse" / "doc_indptr.npy")[::-1].copy()),
    "faiss-header": lambda i: flip(_seg(i) / "dense" / "faiss.index", 0, 16),
    "native-postings": lambda i: np.save(_seg(i) / "bm25" / "term_indptr.npy",
                                         np.load(_seg(i) / "bm25" / "term_indptr.npy")[::-1].copy()),
    "native-lengths": lambda i: np.save(_seg(i) / "bm25" / "doc_lengths.npy",
                                        np.load(_seg(i) / "bm25" / "doc_lengths.npy")[:-1].copy()),
    "tantivy": lambda i: [flip(f, f.stat().st_size // 2) for f in sorted(bm25_dir(i).glob("*.idx"))],
    "tantivy-meta": lambda i: (bm25_dir(i) / "meta.json").write_text("{not json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_files_are_caught(tmp_path, request, damage):
    source = "tantivy_index" if damage.startswith("tantivy") else "full_index"
    idx = _copy(request.getfixturevalue(source), tmp_path / "idx")
    before = [h.id for h in ldr.open(idx).search("zebra3 topic1", k=5)]
    DAMAGE[damage](idx)
    # as found on disk: the open-time hash of small files catches it
    with pytest.raises(IndexFormatError, match="damaged"):
        ldr.open(idx)
    manifest, problems = check_index(idx)
    assert problems, damage
    out = CliRunner().invoke(main, ["check", str(idx), "-q"])
    assert out.exit_code == 1 and "problem" in out.output and "Traceback" not in out.output
    # re-signed (as if the hashes had been updated): the component's own checks still refuse it,
    # or the ranking is unchanged; never a raw exception
    rewrite_manifest(idx, lambda m: None)
    try:
        index = ldr.open(idx)
        for mode in ("bm25", "dense", "sparse", "hybrid"):
            hits = index.search("zebra3 topic1", k=5, mode=mode)
            if mode == "hybrid":
                assert [h.id for h in hits] == before, damage
    except IndexFormatError as e:
        assert "ldr" in str(e)
    out = CliRunner().invoke(main, ["search", "zebra3 topic1", "-i", str(idx)])
    assert "Traceback" not in out.output and out.exit_code in (0, 2)


def test_check_passes_a_sound_index(tmp_path):
    build(docs(), tmp_path / "idx", bm25="native")
    out = CliRunner().invoke(main, ["check", str(tmp_path / "idx"), "-q"])
    assert out.exit_code == 0 and "OK (20 documents" in out.output


def test_cli_never_prints_a_traceback_for_unexpected_errors(tmp_path):
    # an index directory that is not readable at all: an OS error, reported in one line
    r = cli_run("search", "x", "-i", str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr


@pytest.mark.slow
def test_unknown_model_settings_are_ignored_with_a_note(tmp_path, caplog):
    idx = tmp_path / "idx"
    build(docs(4), idx, sparse="splade-tiny")
    rewrite_manifest(idx, lambda m: m["components"]["sparse"]["model"]["settings"].update(future_option=3))
    assert ldr.open(idx).search("zebra2", k=1, mode="sparse")[0].id == "doc2"
    assert "ignoring unknown model settings ['future_option']" in caplog.text


def test_a_segment_listed_twice_or_a_next_uid_set_back_stops_writers_too(tmp_path):
    """Issue 42 item 6: search refused a twice-listed segment while `ldr add` committed on top; a
    next_uid set back made an acknowledged add unreachable while `ldr check` said OK."""
    idx = tmp_path / "idx"
    build(docs(), idx)
    rewrite_manifest(idx, lambda m: m["segments"].append(dict(m["segments"][0])), rehash=False)
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "new.txt").write_text("a new document about zebra99")
    out = CliRunner().invoke(main, ["add", str(tmp_path / "more"), "-i", str(idx), "-q"])
    assert out.exit_code == 2 and "listed twice" in out.output

    idx2 = tmp_path / "idx2"
    build(docs(), idx2)
    rewrite_manifest(idx2, lambda m: m.update(next_uid=3), rehash=False)
    with pytest.raises(IndexFormatError, match="next_uid"):
        ldr.open(idx2)
    check = CliRunner().invoke(main, ["check", str(idx2)])
    assert check.exit_code == 1 and "next_uid" in check.output
    out = CliRunner().invoke(main, ["add", str(tmp_path / "more"), "-i", str(idx2), "-q"])
    assert out.exit_code == 2 and "next_uid" in out.output


def test_a_stray_manifest_name_does_not_make_the_index_unopenable(tmp_path):
    """Issue 42 item 6: `manifest-0000010.json` (seven digits) is not a generation ldr wrote."""
    idx = tmp_path / "idx"
    build(docs(), idx)
    (idx / "manifest-0000010.json").write_text(newest_manifest(idx).read_text())
    assert ldr.open(idx).search("zebra1", k=1)[0].id == "doc1"
    assert CliRunner().invoke(main, ["check", str(idx)]).exit_code == 0
