"""Segment replication (issue 55, "shards on their own disks"): a copy of an index on another disk
catches up by copying only the files a new commit adds, each verified against its manifest
before the manifest is written; the copy answers as the source; a damaged source file is never
served from the copy."""
import shutil
import time

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


def test_a_writer_publishes_to_a_uri_and_a_copy_catches_up_from_it(tmp_path):
    """Issue 55: object storage between the writer and the replicas. A writer publishes each
    commit to a URI (pyarrow's filesystems: s3://, gs://, ...; file:// here, through the same
    interface), files first and each manifest after its files; a node's copy catches up from the
    URI with only the new files, each verified; a damaged object is never served."""
    src, dst = tmp_path / "src", tmp_path / "copy"
    uri = (tmp_path / "bucket" / "idx").as_uri()
    ShardedIndex.build(DOCS, src, shards=2, dense=None, sparse=None)
    out = CliRunner().invoke(main, ["replicate", str(src), uri])
    assert out.exit_code == 0 and "2 shards" in out.output, out.output
    first = catch_up(uri, dst)
    assert first["copied"] > 0 and first["shards"] == 2 and _answers(ldr.open(dst)) == _answers(ldr.open(src))
    ldr.open(src).add([ldr.Doc("new", "a new report on the harbour lamp", "New")])
    pushed = catch_up(src, uri)                     # a URI target: publish
    assert 0 < pushed["copied"] < first["copied"] and pushed["kept"] > 0
    got = catch_up(uri, dst)
    assert got["copied"] == pushed["copied"] and got["generation"] == ldr.open(src).generation
    assert _answers(ldr.open(dst)) == _answers(ldr.open(src))
    # `ldr serve -i URI --ray ... --replica-root DIR`: a shard's replica copies its shard from the URI
    pytest.importorskip("ray")
    from ldr.serve.ray_shards import ShardReplica
    replica = ShardReplica(uri, 1, local=str(tmp_path / "node"))
    entry = replica.cluster()["shards"][1]
    assert replica.describe(entry).docs == len(ldr.open(src).shards[1])
    assert (tmp_path / "node" / "shards" / "shard-001" / f"manifest-{entry['generation']:06d}.json").is_file()
    # a damaged object at the URI: refused, the copy keeps answering from its last commit
    ldr.open(src).add([ldr.Doc("newer", "another report on bearing plates", "Newer")])
    catch_up(src, uri)
    before = _answers(ldr.open(dst))
    bucket = tmp_path / "bucket" / "idx"
    newest = max((p for p in bucket.rglob("segments/*/*") if p.is_file()), key=lambda p: p.stat().st_mtime)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="does not match its manifest"):
        catch_up(uri, dst)
    assert _answers(ldr.open(dst)) == before
    out = CliRunner().invoke(main, ["replicate", "nosuchscheme://bucket/idx", str(tmp_path / "x")])
    assert out.exit_code != 0 and "cannot open nosuchscheme://bucket/idx" in out.output and "Traceback" not in out.output


def test_a_replica_keeps_a_generation_a_running_call_holds(tmp_path):
    """A shard replica of `ldr serve --ray` keeps the two newest generations it was asked for open.
    A call still running on an older one (the coordinator moved on meanwhile) keeps its generation:
    the replica drops the older handle but never closes it under the call, so its copy's collector
    keeps the files the call has yet to read (here: the BM25 postings, loaded on first use)."""
    pytest.importorskip("ray")
    from ldr.index.cluster import read_cluster
    from ldr.serve.ray_shards import ShardReplica

    src = tmp_path / "src"
    ShardedIndex.build(DOCS, src, shards=1, dense=None, sparse=None)
    replica = ShardReplica(str(src), 0, local=str(tmp_path / "node-disk"))
    running = replica._at(read_cluster(src)["shards"][0])       # a call's shard: no part loaded yet
    index = ShardedIndex(src)
    for n in range(3):           # commits the replica is asked for in turn; a merge rewrites the segments
        index.delete([f"d{n}"])
        index.merge()
        replica._at(read_cluster(src)["shards"][0])
    got = running.stats("harbour lamp", ["bm25"], None)
    assert got.count == len(DOCS) and got.stats["bm25"]


def test_replicate_refuses_a_folder_that_is_not_a_copy_and_touches_nothing_there(tmp_path):
    """Issue 76 (round 6, data loss): `ldr replicate SRC DIR` into a folder that is not an index
    deleted the user's files in sub-folders named like ldr's own, and onto another index it
    collected that index's generation. Both are refused before anything is written; a copy of the
    same index (finished, or killed before its first commit) is still brought up to date."""
    src, other = tmp_path / "src", tmp_path / "other"
    ldr.Index.build(DOCS, src, dense=None, sparse=None)
    ldr.Index.build(DOCS[:5], other, dense=None, sparse=None)
    user = tmp_path / "mine"
    for sub in ("segments", "codebooks", "bm25-generations", "."):
        (user / sub).mkdir(parents=True, exist_ok=True)
        (user / sub / "notes.txt").write_text("my own notes")
    snapshot = {p: p.read_bytes() for p in user.rglob("*") if p.is_file()}
    out = CliRunner().invoke(main, ["replicate", str(src), str(user)])
    assert out.exit_code != 0 and "not a copy" in out.output and "Traceback" not in out.output, out.output
    assert {p: p.read_bytes() for p in user.rglob("*") if p.is_file()} == snapshot
    before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}
    out = CliRunner().invoke(main, ["replicate", str(src), str(other)])
    assert out.exit_code != 0 and "another index" in out.output, out.output
    assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == before
    assert _answers(ldr.open(other)) != _answers(ldr.open(src))
    # an empty folder, and then the same copy again, are accepted
    (tmp_path / "empty").mkdir()
    assert catch_up(src, tmp_path / "empty")["copied"] > 0
    assert _answers(ldr.open(tmp_path / "empty")) == _answers(ldr.open(src))


def test_a_copy_killed_before_its_first_commit_is_taken_up_and_a_damaged_kept_file_is_replaced(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "copy"
    ldr.Index.build(DOCS, src, dense=None, sparse=None)
    catch_up(src, dst)
    for m in dst.glob("manifest-*.json"):      # as if killed before its commit point was written
        m.unlink()
    victim = max((p for p in (dst / "segments").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF                # same size, other bytes: a size check alone keeps it
    victim.write_bytes(bytes(data))
    got = catch_up(src, dst)
    assert got["copied"] >= 1
    assert _answers(ldr.open(dst)) == _answers(ldr.open(src))
    assert CliRunner().invoke(main, ["check", str(dst)]).exit_code == 0


def test_a_lease_keeps_a_generation_from_the_collector_until_released_or_expired(tmp_path):
    """Issue 79: a holder on another machine (a Ray coordinator, through a replica) leases a
    generation where the writer commits; the writer's collector keeps it while the lease holds, a
    replica catches up to it after two newer commits, and it is collected once the lease is
    released or has expired. A collected generation is never leased; a holder name is a name."""
    from ldr.index import generations as gens, leases

    src = tmp_path / "src"
    ix = ldr.Index.build(DOCS, src, dense=None, sparse=None)
    first = ix.generation
    ix.close()
    assert leases.take(src, first, "coordinator-a", ttl_s=60)
    for n in range(2):
        ldr.open(src).delete([f"d{n}"])
    assert first in gens.generations(src) and leases.held(src, first)
    got = catch_up(src, tmp_path / "copy", first)          # a late replica still finds it
    assert got["generation"] == first and ldr.open(tmp_path / "copy").generation == first
    leases.release(src, first, "coordinator-a")
    ldr.open(src).delete(["d2"])                             # the next commit collects it
    assert first not in gens.generations(src) and not leases.take(src, first, "coordinator-a")
    second = gens.generations(src)[0]
    assert leases.take(src, second, "coordinator-b", ttl_s=0.01)     # a holder that stopped renewing
    time.sleep(0.05)
    ldr.open(src).delete(["d3"])
    assert second not in gens.generations(src) and leases.leases(src) == []
    with pytest.raises(ValueError):
        leases.take(src, gens.generations(src)[-1], "../../etc/x")
