"""Segment replication (issue 55, "shards on their own disks"): a copy of an index on another disk
catches up by copying only the files a new commit adds, each verified against its manifest
before the manifest is written; the copy answers as the source; a damaged source file is never
served from the copy."""
import shutil

import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.errors import IndexFormatError
from ldr.index.replica import catch_up
from ldr.sharded import ShardedIndex

DOCS = [ldr.Doc(f"d{i}", f"report {i} on the harbour lamp, tides and bearing plates {i % 3} " * 8, f"R{i}")
        for i in range(24)]
QUERIES = ["harbour lamp", "bearing plates 2", "tides report 7"]


def _answers(ix):
    return {q: [(h.id, round(h.score, 6)) for h in ix.search(q, k=5)] for q in QUERIES}


@pytest.mark.parametrize("shards", [0, 3])
def test_a_copy_catches_up_with_only_the_new_files(tmp_path, shards):
    src, dst = tmp_path / "src", tmp_path / "copy"
    if shards:
        ShardedIndex.build(DOCS, src, shards=shards, dense=None, sparse=None)
    else:
        ldr.Index.build(DOCS, src, dense=None, sparse=None)
    first = catch_up(src, dst)
    assert first["copied"] > 0 and first["kept"] == 0 and _answers(ldr.open(dst)) == _answers(ldr.open(src))
    reader = ldr.open(dst)                          # a reader of the copy pins its generation
    before = _answers(reader)
    ldr.open(src).add([ldr.Doc("new", "a new report on the harbour lamp", "New")])
    got = catch_up(src, dst)
    newest = [ldr.open(src)] if not shards else ldr.open(src).shards
    total = sum(len(ix.manifest["files"]) for ix in newest)
    assert 0 < got["copied"] < total and got["kept"] > 0          # the commit's new files only
    out = CliRunner().invoke(main, ["replicate", str(src), str(dst)])
    assert out.exit_code == 0 and "0 file(s) copied" in out.output, out.output
    assert _answers(ldr.open(dst)) == _answers(ldr.open(src)) != before
    assert _answers(reader) == before               # the pinned generation still answers
    assert CliRunner().invoke(main, ["check", str(dst)]).exit_code == 0


def test_a_copy_copies_only_what_a_commit_adds_and_refuses_a_damaged_file(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "copy"
    ldr.Index.build(DOCS, src, dense=None, sparse=None)
    catch_up(src, dst)
    ix = ldr.open(src)
    ix.add([ldr.Doc("new", "a new report on the harbour lamp", "New")])
    new_seg = max((src / "segments").iterdir())
    added = sum(1 for p in new_seg.rglob("*") if p.is_file())
    got = catch_up(src, dst)
    assert 0 < got["copied"] <= added + 1 and got["kept"] > 0       # the new segment (and its deletes file)
    ix.add([ldr.Doc("newer", "another report", "Newer")])
    seg = max((src / "segments").iterdir())
    victim = max((p for p in seg.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    before = _answers(ldr.open(dst))
    with pytest.raises(IndexFormatError, match="does not match its manifest"):
        catch_up(src, dst)
    assert _answers(ldr.open(dst)) == before and not list(dst.rglob("*.ldr-copy"))
    with pytest.raises(IndexFormatError, match="outside"):
        catch_up(src, src / "segments" / "x")
    shutil.rmtree(dst)
