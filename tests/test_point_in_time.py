"""Every search answers from one point in time (issue 55): a sharded index searched from three
threads, each refreshing as it goes, while another process adds and deletes documents: every
answer equals the state of the cluster generation it names, and no search fails.

Each document `doc-N` holds one term no other document holds (`zqN`); the writer logs which
documents each generation it commits holds, so the right answer of "zqN" at generation G is
[doc-N] when doc-N is live at G, else nothing. LDR_PIT_SECONDS sets how long it runs (the suite:
12 s; bench/README reports a 60 s run)."""
import json
import os
import random
import subprocess
import sys
import threading
import time

import ldr
from ldr.sharded import ShardedIndex

SECONDS = float(os.environ.get("LDR_PIT_SECONDS", "12"))
WORDS = ("harbour tide lamp storm keeper gannet reef bearing plate ledger meeting budget clause "
         "licence river bridge sourdough orchard").split()


def doc(n: int) -> ldr.Doc:
    rnd = random.Random(n)
    body = " ".join(rnd.choice(WORDS) for _ in range(40))
    return ldr.Doc(f"doc-{n}", f"{body} zq{n} {body}", f"Document {n}")


WRITER = r"""
import json, sys, time
sys.path.insert(0, {tests!r})
from test_point_in_time import doc
from ldr.sharded import ShardedIndex
ix = ShardedIndex({path!r})
log = open({log!r}, "a")
live = set(json.loads(open({start!r}).read()))
n, deadline = {first}, time.monotonic() + {seconds}
while time.monotonic() < deadline:
    if n % 3 == 2 and "doc-%d" % (n - 2) in live:
        g = ix.delete(["doc-%d" % (n - 2)])["generation"]; live.discard("doc-%d" % (n - 2))
    else:
        g = ix.add([doc(n)])["generation"]; live.add("doc-%d" % n)
    log.write(json.dumps([g, sorted(live)]) + "\n"); log.flush()
    n += 1
print(n)
"""


def test_searches_beside_a_writer_answer_from_the_generation_they_name(tmp_path):
    start = 30
    ix = ShardedIndex.build([doc(n) for n in range(start)], tmp_path / "idx", shards=3, dense=None, sparse=None)
    (tmp_path / "start.json").write_text(json.dumps([f"doc-{n}" for n in range(start)]))
    states = {ix.generation: {f"doc-{n}" for n in range(start)}}
    log = tmp_path / "log.jsonl"
    script = WRITER.format(tests=os.path.dirname(__file__), path=str(tmp_path / "idx"), log=str(log),
                           start=str(tmp_path / "start.json"), first=start, seconds=SECONDS)
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    answers, errors, stop = [], [], threading.Event()

    def searcher(seed: int):
        rnd = random.Random(seed)
        while not stop.is_set():
            try:
                ix.refresh()
                n = rnd.randrange(0, start + int(4 * SECONDS) + 40)
                res = ix.search(f"zq{n}", k=3, mode="bm25")
                answers.append((n, res.generation, [h.id for h in res]))
                hybrid = ix.search(f"zq{n} harbour lamp", k=5, filters={"id": [f"doc-{n}", "doc-1"]})
                answers.append((n, hybrid.generation, sorted(h.id for h in hybrid), "filtered"))
            except Exception as e:          # noqa: BLE001 (every failure is counted)
                errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=searcher, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    out, err = writer.communicate(timeout=SECONDS + 120)
    stop.set()
    for t in threads:
        t.join()
    assert writer.returncode == 0, err[-2000:]
    for line in log.read_text().splitlines():
        g, live = json.loads(line)
        states[g] = set(live)
    assert len(states) > 5 and errors == []
    wrong = []
    for a in answers:
        n, g, ids = a[:3]
        live = states[g]
        want = [f"doc-{n}"] if f"doc-{n}" in live else []
        if len(a) == 4:
            want = sorted({f"doc-{n}", "doc-1"} & live)
        if ids != want:
            wrong.append(a)
    assert len(answers) > 50 and wrong == []
