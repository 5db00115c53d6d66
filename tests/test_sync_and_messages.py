"""Issue 45, items 6, 7, 9 and 10: `ldr add` as a folder sync, messages that name the command to
run, log lines that do not glue onto progress bars, one unit for timings. Through the CLI and the
API, where each was found."""
import json
import logging

from click.testing import CliRunner

import ldr
from ldr.cli import main

BM25_ONLY = ["--dense", "none", "--sparse", "none", "-q"]


def _corpus(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    (c / "a.txt").write_text("the lighthouse keeper relit the lamp at dusk")
    (c / "b.txt").write_text("apples ripen slowly in the orchard")
    (c / "c.md").write_text("# Bridges\n\nbearing plates show section loss from corrosion")
    return c


def test_ldr_add_on_an_unchanged_folder_encodes_nothing_and_says_so(tmp_path):
    c, idx, r = _corpus(tmp_path), tmp_path / "idx", CliRunner()
    assert r.invoke(main, ["index", str(c), "-o", str(idx)] + BM25_ONLY).exit_code == 0
    same = r.invoke(main, ["add", str(c), "-i", str(idx), "-q"])
    assert same.exit_code == 0, same.output
    assert "0 added, 0 replaced, 3 unchanged" in same.output and "generation 1" in same.output   # no commit
    (c / "b.txt").write_text("apples and pears ripen slowly in the orchard")
    (c / "d.txt").write_text("a new document about tides")
    changed = r.invoke(main, ["add", str(c), "-i", str(idx), "-q"])
    assert "1 added, 1 replaced, 2 unchanged" in changed.output and "generation 2" in changed.output
    index = ldr.open(idx)
    assert len(index) == 4 and index.search("pears", mode="bm25")[0].id == "b.txt"


def test_ldr_add_lists_what_is_gone_from_the_folder_and_prune_deletes_it(tmp_path):
    """Issue 58: files removed from the folder (and records dropped from a JSONL file) are listed
    by `ldr add FOLDER`; `--prune` deletes them. Documents from another folder, and a file that is
    still there but now skipped, are never touched."""
    c, idx, r = _corpus(tmp_path), tmp_path / "idx", CliRunner()
    (c / "notes.jsonl").write_text('{"id": "n1", "text": "tide tables for May"}\n{"id": "n2", "text": "ferry times"}\n')
    other = tmp_path / "other"
    other.mkdir()
    (other / "z.txt").write_text("a document from another folder about salt marshes")
    assert r.invoke(main, ["index", str(c), "-o", str(idx)] + BM25_ONLY).exit_code == 0
    assert r.invoke(main, ["add", str(other), "-i", str(idx), "-q"]).exit_code == 0
    (c / "a.txt").unlink()
    (c / "notes.jsonl").write_text('{"id": "n1", "text": "tide tables for May"}\n')
    (c / "b.txt").write_bytes(b"\x00" * 10)          # still there, now skipped as binary: kept
    listed = r.invoke(main, ["add", str(c), "-i", str(idx), "-q"])
    assert listed.exit_code == 0, listed.output
    assert "2 indexed document(s) read from" in listed.output and "a.txt, n2" in listed.output
    assert "--prune` deletes them" in listed.output and "generation 2" in listed.output   # nothing committed
    assert len(ldr.open(idx)) == 6
    pruned = r.invoke(main, ["add", str(c), "-i", str(idx), "-q", "--prune"])
    assert pruned.exit_code == 0, pruned.output
    assert "2 deleted (gone from" in pruned.output and "generation 3" in pruned.output
    assert sorted(ldr.open(idx).live_ids()) == ["b.txt", "c.md", "n1", "z.txt"]
    again = r.invoke(main, ["add", str(c), "-i", str(idx), "-q", "--prune"])
    assert "no longer in it" not in again.output and "deleted" not in again.output and "generation 3" in again.output


def test_the_api_counts_unchanged_documents_and_metadata_is_content(tmp_path):
    docs = [ldr.Doc("x", "tidal flats and salt marsh", meta={"v": 1}), ldr.Doc("y", "granite quarry")]
    index = ldr.Index.build(docs, tmp_path / "idx", dense=None, sparse=None)
    r = index.add([ldr.Doc("x", "tidal flats and salt marsh", meta={"v": 1}), ldr.Doc("y", "granite quarry")])
    assert (r["added"], r["replaced"], r["unchanged"]) == (0, [], 2) and r["report"].unchanged == 2
    r = index.add([ldr.Doc("x", "tidal flats and salt marsh", meta={"v": 2})])    # only the metadata moved
    assert r["replaced"] == ["x"] and r["unchanged"] == 0
    assert index.search("marsh", mode="bm25", with_meta=True)[0].meta == {"v": 2}


def test_an_index_inside_the_corpus_is_a_counted_skip(tmp_path):
    c, r = _corpus(tmp_path), CliRunner()
    idx = c / "idx"
    out = r.invoke(main, ["index", str(c), "-o", str(idx)] + BM25_ONLY)
    assert out.exit_code == 0 and len(ldr.open(idx)) == 3
    again = r.invoke(main, ["add", str(c), "-i", str(idx), "-q"])
    assert "3 unchanged, 1 skipped" in again.output and "the index being written" in again.output


def test_a_folder_of_documents_given_as_an_index_names_the_command_that_indexes_it(tmp_path):
    c, r = _corpus(tmp_path), CliRunner()
    for args in (["search", "lamp", "-i", str(c)], ["info", str(c)], ["check", str(c)]):
        out = r.invoke(main, args)
        assert out.exit_code == 2, out.output
        assert f"ldr index {c} -o IDX" in out.output and "rebuild" not in out.output


def test_ldr_check_on_a_path_that_never_was_an_index_does_not_ask_for_a_rebuild(tmp_path):
    out = CliRunner().invoke(main, ["check", str(tmp_path / "nosuch")])
    assert out.exit_code == 2 and "no index at" in out.output and "rebuild" not in out.output
    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(main, ["check", str(tmp_path / "empty")])
    assert out.exit_code == 2 and "empty directory, not an index" in out.output


def test_log_lines_are_written_above_a_progress_bar_not_onto_it(tmp_path, monkeypatch):
    from tqdm import tqdm

    written = []
    monkeypatch.setattr(logging.getLogger(), "handlers", [])     # as in a fresh process: the CLI installs its own
    monkeypatch.setattr(tqdm, "write", classmethod(lambda cls, s, file=None, **kw: written.append(s)))
    c, r = _corpus(tmp_path), CliRunner()
    (c / "notes.xyz").write_text("not a supported type")
    out = r.invoke(main, ["-v", "index", str(c), "-o", str(tmp_path / "idx")] + BM25_ONLY)
    assert out.exit_code == 0, out.output
    assert any(line.startswith("info ldr.corpus.report: skipped notes.xyz") for line in written)


def test_timings_are_milliseconds_under_one_name_in_the_api_json_and_server_shapes(tmp_path):
    c, idx, r = _corpus(tmp_path), tmp_path / "idx", CliRunner()
    assert r.invoke(main, ["index", str(c), "-o", str(idx)] + BM25_ONLY).exit_code == 0
    hits = ldr.open(idx).search("corrosion of the bearing plates")
    assert not hasattr(hits, "timings") and {"bm25", "encode.bm25"} <= set(hits.timings_ms)
    assert hits.took_ms >= sum(hits.timings_ms.values()) * 0.99 and hits.took_ms < 60_000
    out = json.loads(r.invoke(main, ["search", "corrosion", "-i", str(idx), "--json"]).output)
    assert set(out["timings_ms"]) == set(hits.timings_ms) and out["took_ms"] > 0


def test_a_sync_sees_metadata_types(tmp_path):
    """Issue 57 item 12: `1 -> true` and `2 -> 2.0` are changes (Python's == says equal); a filter
    on the new value then finds the document."""
    index = ldr.Index.build([ldr.Doc("x", "tidal flats", meta={"urgent": 1, "v": 2})], tmp_path / "idx",
                            dense=None, sparse=None)
    r = index.add([ldr.Doc("x", "tidal flats", meta={"urgent": True, "v": 2.0})])
    assert r["replaced"] == ["x"] and r["unchanged"] == 0
    assert [h.id for h in index.search("tidal", filters={"urgent": "true"}, mode="bm25")] == ["x"]
    again = index.add([ldr.Doc("x", "tidal flats", meta={"urgent": True, "v": 2.0})])
    assert again["unchanged"] == 1


def test_the_write_encoders_load_before_the_first_write(tmp_path):
    """Issue 58: a server's first POST /documents took 19 s (the write encoders loaded lazily); the
    server now calls `load_write_encoders` at start-up, after which a write loads no model."""
    from ldr.components import ENCODERS

    ldr.Index.build([{"id": "a", "text": "the keeper relit the lamp"}], tmp_path / "i", sparse=None).close()
    ENCODERS.clear()
    index = ldr.open(tmp_path / "i")
    index.load_write_encoders()
    loaded = len(ENCODERS.loaded())
    assert loaded >= 1
    index.add([{"id": "b", "text": "granite ballast for the sidings"}])
    assert len(ENCODERS.loaded()) == loaded and index.search("ballast", k=1)[0].id == "b"


def test_prune_never_deletes_a_record_that_was_skipped_and_follows_a_changed_copy(tmp_path):
    """Issue 76 (data loss): a JSONL record that failed to parse, or was over --max-doc-mb,
    counted as gone and `--prune` deleted it; a skip is not a removal. And `ldr add COPY --prune`
    of a changed copy of the indexed folder did not notice a file deleted from the copy."""
    c, idx, r = _corpus(tmp_path), tmp_path / "idx", CliRunner()
    (c / "notes.jsonl").write_text('{"id": "n1", "text": "tide tables for May"}\n{"id": "n2", "text": "ferry times"}\n'
                                   '{"id": "n3", "text": "harbour dues"}\n')
    other = tmp_path / "other"
    other.mkdir()
    (other / "z.txt").write_text("a document from another folder about salt marshes")
    assert r.invoke(main, ["index", str(c), "-o", str(idx)] + BM25_ONLY).exit_code == 0
    assert r.invoke(main, ["add", str(other), "-i", str(idx), "-q"]).exit_code == 0
    (c / "notes.jsonl").write_text('{"id": "n1", "text": "tide tables for May"}\n{"id": "n2", "text": "ferry \n'
                                   '{"id": "n3", "text": "' + "harbour dues " * 90_000 + '"}\n')
    out = r.invoke(main, ["add", str(c), "-i", str(idx), "-q", "--prune", "--max-doc-mb", "1"])
    assert out.exit_code == 0, out.output
    assert "deleted" not in out.output and "no longer in it" not in out.output, out.output
    assert sorted(ldr.open(idx).live_ids()) == ["a.txt", "b.txt", "c.md", "n1", "n2", "n3", "z.txt"]
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(c, copy)
    (copy / "notes.jsonl").write_text('{"id": "n1", "text": "tide tables for May"}\n{"id": "n2", "text": "ferry times"}\n'
                                      '{"id": "n3", "text": "harbour dues"}\n')
    (copy / "b.txt").unlink()
    (copy / "a.txt").write_text("the lighthouse keeper relit the lamp at dawn")     # changed
    out = r.invoke(main, ["add", str(copy), "-i", str(idx), "-q", "--prune"])
    assert out.exit_code == 0, out.output
    assert "1 deleted (gone from" in out.output, out.output
    assert sorted(ldr.open(idx).live_ids()) == ["a.txt", "c.md", "n1", "n2", "n3", "z.txt"]     # z.txt: another folder


def test_writers_of_one_process_queue_instead_of_failing(tmp_path):
    """Issue 76: 4 threads adding to one LdrVectorStore failed 56 of 60 calls with IndexLockedError
    naming the process's own pid; asyncio.gather of 8 aadd_documents, 7 of 8. They queue now."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from langchain_core.documents import Document

    from ldr.integrations.langchain import LdrVectorStore

    store = LdrVectorStore(str(tmp_path / "vs"), build_options={"dense": None, "sparse": None})

    def add(t):
        return [store.add_texts([f"thread {t} note {i} about tides"], ids=[f"t{t}-{i}"]) for i in range(3)]
    with ThreadPoolExecutor(4) as pool:
        assert len(list(pool.map(add, range(4)))) == 4

    async def many():
        return await asyncio.gather(*(store.aadd_documents([Document(page_content=f"async note {i}", id=f"a{i}")])
                                      for i in range(8)))
    assert len(asyncio.run(many())) == 8
    assert len(store.index.live_ids()) == 12 + 8
