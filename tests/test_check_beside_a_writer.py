"""`ldr check` beside a writer (issue 42 item 4): it checks the generation it pinned, so commits
and the collection of old generations beside it are never reported as damage; a real flipped
byte still is."""
import subprocess
import sys
import textwrap

import ldr
from ldr.index.check import check_index

from conftest import segment_dir

WRITER = textwrap.dedent("""
    import sys, ldr
    ix = ldr.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        ix.add([{"id": f"w{i}", "text": f"a document written beside the check, number {i}"}], wait=30)
        if i % 2:
            ix.delete([f"w{i - 1}"], wait=30)
    print("done")
""")


def test_check_reports_no_damage_while_a_writer_commits(tmp_path):
    idx = tmp_path / "idx"
    ldr.Index.build([{"id": f"d{i}", "text": f"document {i} about bridges"} for i in range(30)], idx,
                    bm25="native", dense=None, sparse=None)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(idx), "20"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    checks, alarms = 0, []
    while writer.poll() is None or checks < 5:
        _, problems = check_index(idx)
        checks += 1
        alarms += problems
    out, err = writer.communicate()
    assert writer.returncode == 0 and "done" in out, err[-2000:]
    assert checks >= 5 and alarms == []
    # a real flipped byte is still found
    doc = next(p for p in segment_dir(idx, 0).rglob("*") if p.is_file() and p.stat().st_size > 64)
    data = bytearray(doc.read_bytes())
    data[len(data) // 2] ^= 0xFF
    doc.write_bytes(bytes(data))
    _, problems = check_index(idx)
    assert problems


def test_check_of_a_sharded_index_beside_a_writer(tmp_path):
    """Issue 57 item 3: the cluster generation and every shard's are pinned before any is read. The
    writer is made to land at the worst moment: while the check reads shard 0, two commits land on
    the last shard, which is read last (the second collects the generation the check began with,
    unless the check pinned it)."""
    from ldr.index.cluster import shard_of
    from ldr.sharded import ShardedIndex

    idx = tmp_path / "idx"
    ShardedIndex.build([{"id": f"d{i}", "text": f"document {i} about bridges"} for i in range(40)], idx, shards=4,
                       dense=None, sparse=None)
    last = [f"w{i}" for i in range(1000) if shard_of(f"w{i}", 4) == 3][:2]
    writer, landed = ShardedIndex(idx), []

    def progress(step):
        if not landed:
            landed.append(step)
            for d in last:
                writer.add([{"id": d, "text": f"written beside the check, {d}"}])

    _, problems = check_index(idx, progress)
    assert landed and writer.generation == 3 and problems == []
    assert check_index(idx)[1] == []
