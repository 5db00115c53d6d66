import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ldr.corpus import IngestReport, check_documents, iter_corpus
from ldr.errors import CorpusError


def _read(path):
    report = IngestReport()
    docs = list(check_documents(iter_corpus(path, report), report))
    return docs, report


def test_every_format_and_doc_ids(tmp_path, write_jsonl):
    (tmp_path / "a.txt").write_text("plain text document")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# Markdown Title\n\nbody of b")
    (tmp_path / "c.html").write_text("<html><head><title>Page C</title><style>.x{color:red}</style>"
                                     "<script>var hidden=1;</script></head><body><p>Visible &amp; kept</p></body></html>")
    write_jsonl(tmp_path / "beir.jsonl", [{"_id": "d1", "title": "T1", "text": "beir one"},
                                          {"_id": "d2", "title": "", "text": "beir two"}])
    write_jsonl(tmp_path / "plain.jsonl", [{"id": "p1", "text": "id/text form", "lang": "en"}])
    (tmp_path / "arr.json").write_text(json.dumps([{"id": "j1", "text": "json array item"}]))
    pq.write_table(pa.table({"id": ["q1", "q2"], "text": ["parquet one", "parquet two"]}), tmp_path / "t.parquet")

    docs, report = _read(tmp_path)
    by_id = {d.id: d for d in docs}
    assert set(by_id) == {"a.txt", "sub/b.md", "c.html", "d1", "d2", "p1", "j1", "q1", "q2"}
    assert by_id["sub/b.md"].title == "Markdown Title"
    html = by_id["c.html"]
    assert html.title == "Page C" and html.text == "Visible & kept"
    assert "hidden" not in html.text and "color" not in html.text
    assert by_id["d1"].title == "T1"
    assert by_id["p1"].meta["lang"] == "en"
    assert report.indexed == 9 and report.n_skipped == 0


def test_single_file_corpus(tmp_path, write_jsonl):
    f = write_jsonl(tmp_path / "c.jsonl", [{"_id": "x", "text": "hello"}])
    docs, _ = _read(f)
    assert [d.id for d in docs] == ["x"]
    docs, _ = _read(tmp_path / "c.jsonl")
    (tmp_path / "one.txt").write_text("words")
    docs, _ = _read(tmp_path / "one.txt")
    assert [d.id for d in docs] == ["one.txt"]


def test_bad_inputs_are_counted_not_lost(tmp_path, write_jsonl):
    (tmp_path / "good.txt").write_text("a good document")
    (tmp_path / "empty.txt").write_text("   \n\t")
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\x00\x00\x01binary")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / "broken-link.txt").symlink_to(tmp_path / "does-not-exist.txt")
    write_jsonl(tmp_path / "lines.jsonl", [{"_id": "ok", "text": "fine"}, "{not json", {"_id": "notext"},
                                           {"_id": "blank", "text": ""}, "[1, 2]"])
    pq.write_table(pa.table({"id": ["z"], "body2": ["no text column"]}), tmp_path / "bad.parquet")

    docs, report = _read(tmp_path)
    assert sorted(d.id for d in docs) == ["good.txt", "latin1.txt", "ok"]
    latin = next(d for d in docs if d.id == "latin1.txt")
    assert latin.text == "café crème"          # not UTF-8: read as Windows-1252 (latin-1's superset)
    s = report.skipped
    assert s["empty document"] == 2
    assert s["binary file"] == 1
    assert s["unreadable"] == 1
    assert s["unsupported file type .png"] == 1
    assert s["malformed JSON line"] == 1
    assert s["record without text field"] == 1
    assert s["JSON record is not an object"] == 1
    assert s["parquet without text column"] == 1
    assert report.warnings["not UTF-8: read as windows-1252 (guessed)"] == 1
    # documents in = indexed + skipped: 3 kept, 9 skipped (the 5 JSONL lines count one each)
    assert report.indexed == 3 and report.n_skipped == 9
    assert any("lines.jsonl line 2" in w for w in report.examples["malformed JSON line"])
    assert "3 documents indexed, 9 skipped" in report.summary()


def test_duplicate_ids_name_both_sources(tmp_path, write_jsonl):
    write_jsonl(tmp_path / "a.jsonl", [{"_id": "same", "text": "one"}])
    write_jsonl(tmp_path / "b.jsonl", [{"_id": "other", "text": "x"}, {"_id": "same", "text": "two"}])
    with pytest.raises(CorpusError) as e:
        _read(tmp_path)
    msg = str(e.value)
    assert "'same'" in msg and "a.jsonl line 1" in msg and "b.jsonl line 2" in msg


def test_empty_corpus_is_an_error(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(CorpusError, match="no indexable documents.*empty document: 1"):
        _read(tmp_path)
    with pytest.raises(CorpusError, match="does not exist"):
        _read(tmp_path / "missing")


def test_utf8_with_a_damaged_byte_stays_utf8_and_latin1_is_searchable(tmp_path):
    """A UTF-8 file with one bad byte keeps its characters (the byte becomes U+FFFD); a latin-1
    file is read as latin-1, so "café" finds it (issue 58)."""
    import ldr

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "mixed.txt").write_bytes("café crème ".encode() + b"\xff" + " brûlée".encode())
    (tmp_path / "c" / "old.txt").write_bytes("le caf\xe9 de la gare, \x93quoted\x94".encode("latin-1"))
    docs, report = _read(tmp_path / "c")
    by = {d.id: d.text for d in docs}
    assert by["mixed.txt"] == "café crème \ufffd brûlée" and report.warnings["invalid UTF-8 replaced"] == 1
    assert by["old.txt"] == "le café de la gare, \u201cquoted\u201d"
    idx = ldr.Index.build(tmp_path / "c", tmp_path / "idx", dense=None, sparse=None)
    assert [h.id for h in idx.search("café gare", k=1)] == ["old.txt"]
