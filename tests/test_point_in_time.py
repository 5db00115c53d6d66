"""Every search answers from one point in time (issue 55): a sharded index searched from three
threads, each refreshing as it goes, while another process adds and deletes documents: every
answer equals the state of the cluster generation it names, and no search fails.

Each document `doc-N` holds one term no other document holds (`zqN`); the writer logs which
documents each generation it commits holds, so the right answer of "zqN" at generation G is
[doc-N] when doc-N is live at G, else nothing. LDR_PIT_SECONDS sets how long it runs (the suite:
5 s; bench/README reports a 60 s run)."""
import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest

import ldr
from ldr.sharded import ShardedIndex

SECONDS = float(os.environ.get("LDR_PIT_SECONDS", "5"))
WORDS = ("harbour tide lamp storm keeper gannet reef bearing plate ledger meeting budget clause "
         "licence river bridge sourdough orchard").split()


def doc(n: int) -> ldr.Doc:
    rnd = random.Random(n)
    body = " ".join(rnd.choice(WORDS) for _ in range(40))
    return ldr.Doc(f"doc-{n}", f"{body} zq{n} {body}", f"Document {n}")


MIN_COMMITS = 8      # however slow the machine, the readers meet this many generations

WRITER = r"""
import json, sys, time
sys.path.insert(0, {tests!r})
from test_point_in_time import MIN_COMMITS, doc
from ldr.sharded import ShardedIndex
ix = ShardedIndex({path!r})
log = open({log!r}, "a")
live = set(json.loads(open({start!r}).read()))
n, deadline = {first}, time.monotonic() + {seconds}
while time.monotonic() < deadline or n < {first} + MIN_COMMITS:    # a slow machine: as many commits
    tick = time.monotonic() + {pace}
    if n % 3 == 2 and "doc-%d" % (n - 2) in live:
        g = ix.delete(["doc-%d" % (n - 2)])["generation"]; live.discard("doc-%d" % (n - 2))
    else:
        g = ix.add([doc(n)])["generation"]; live.add("doc-%d" % n)
    log.write(json.dumps([g, sorted(live)]) + "\n"); log.flush()
    n += 1
    time.sleep(max(0.0, tick - time.monotonic()))       # pace: a commit every {pace} s (0: as fast as it can)
print(n)
"""


START = 30


def _build(tmp_path):
    ShardedIndex.build([doc(n) for n in range(START)], tmp_path / "idx", shards=3, dense=None, sparse=None)
    (tmp_path / "start.json").write_text(json.dumps([f"doc-{n}" for n in range(START)]))


def _beside_a_writer(tmp_path, search, seconds: float, threads: int = 3, pace: float = 0.0,
                     generation: int = 1) -> int:
    """Start the writer on the index `_build` made (its documents doc-0 to doc-29 live at
    `generation`) for `seconds`, committing every `pace` seconds (0: as fast as it can); run
    `search(n, rnd)` → [(generation, ids, want(n, live))] from `threads` threads meanwhile;
    assert every answer is its generation's. Returns the number of answers checked."""
    start = START
    states = {generation: {f"doc-{n}" for n in range(start)}}
    log = tmp_path / "log.jsonl"
    script = WRITER.format(tests=os.path.dirname(__file__), path=str(tmp_path / "idx"), log=str(log),
                           start=str(tmp_path / "start.json"), first=start, seconds=seconds, pace=pace)
    answers, errors, stop = [], [], threading.Event()

    def run(seed: int):
        rnd = random.Random(seed)
        while not stop.is_set():
            n = rnd.randrange(0, start + int(4 * seconds) + 40)
            try:
                answers.extend((n, *a) for a in search(n, rnd))
            except Exception as e:          # noqa: BLE001 (every failure is counted)
                errors.append(f"{type(e).__name__}: {e}")

    searchers = [threading.Thread(target=run, args=(s,)) for s in range(threads)]
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    for t in searchers:
        t.start()
    _, err = writer.communicate(timeout=seconds + 120)
    time.sleep(0.5)                         # searches after the last commit too
    deadline = time.monotonic() + 60
    while len(answers) <= 50 and not errors and time.monotonic() < deadline:
        time.sleep(0.1)                     # and enough of them, however slow the machine
    stop.set()
    for t in searchers:
        t.join()
    assert writer.returncode == 0, err[-2000:]
    for line in log.read_text().splitlines():
        g, live = json.loads(line)
        states[g] = set(live)
    assert len(states) > 5 and errors[:3] == [], "\n".join(errors[:3])     # each failure in full
    wrong = [(n, g, ids) for n, g, ids, want in answers if ids != want(n, states[g])]
    assert len(answers) > 50 and wrong == []
    print(f"point in time: {len(answers)} answers checked over {len(states)} generations, {len(wrong)} wrong, "
          f"{len(errors)} errors")
    return len(answers)


def over_http(http):
    """`search(n, rnd)` for `_beside_a_writer` asked of a server (`http`: its client): "zqN" by BM25
    alone; an HTTP error or an answer naming a missing shard raises (it counts as an error)."""
    def search(n, rnd):
        r = http.post("/search", json={"query": f"zq{n}", "k": 3, "mode": "bm25"})
        body = r.json()
        if r.status_code != 200 or body.get("missing_shards"):
            raise RuntimeError(f"HTTP {r.status_code}: {str(body)[:300]}")
        return [(body["generation"], [h["id"] for h in body["hits"]], _one)]
    return search


def _one(n, live):
    return [f"doc-{n}"] if f"doc-{n}" in live else []


def _filtered(n, live):
    return sorted({f"doc-{n}", "doc-1"} & live)


def test_searches_beside_a_writer_answer_from_the_generation_they_name(tmp_path):
    _build(tmp_path)
    ix = ShardedIndex(tmp_path / "idx")        # one handle, shared by the threads

    def search(n, rnd):
        ix.refresh()
        res = ix.search(f"zq{n}", k=3, mode="bm25")
        hybrid = ix.search(f"zq{n} harbour lamp", k=5, filters={"id": [f"doc-{n}", "doc-1"]})
        return [(res.generation, [h.id for h in res], _one),
                (hybrid.generation, sorted(h.id for h in hybrid), _filtered)]

    _beside_a_writer(tmp_path, search, SECONDS)


def test_a_server_beside_a_writer_answers_from_the_generation_it_names(tmp_path):
    """Through `ldr serve` (it follows new generations every second) over real HTTP. A read-only
    server beside a writer is tests/test_ray_serve.py's (on Ray, for 60 s)."""
    pytest.importorskip("fastapi")
    import httpx
    from test_serve import Server

    _build(tmp_path)
    server = Server(tmp_path / "idx")
    http = httpx.Client(base_url=server.url, timeout=60)

    def search(n, rnd):
        r = http.post("/search", json={"query": f"zq{n}", "k": 3, "mode": "bm25"})
        assert r.status_code == 200, r.text
        body = r.json()
        return [(body["generation"], [h["id"] for h in body["hits"]], _one)]

    try:
        _beside_a_writer(tmp_path, search, SECONDS / 2, threads=2)
    finally:
        http.close()
        assert "Traceback" not in server.stop()



def _reads_beside(commit, read, seconds: float) -> None:
    """`commit()` in a loop on a thread while this one calls `read()` for `seconds` on a busy
    machine (a spinning process per core, so the reader is often descheduled between its listing
    and its read; idle, the race was seldom met) and the threads switching every microsecond: no
    read fails."""
    stop, errors, reads = threading.Event(), [], 0

    def writer():
        while not stop.is_set():
            commit()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                read()
                reads += 1
            except ldr.LdrError as e:
                errors.append(str(e))
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
        for p in busy:
            p.kill()
            p.wait()
    assert reads > 100 and errors == [], errors[:3]


def test_a_reader_slow_between_listing_and_reading_takes_the_newer_cluster_generation(tmp_path):
    """A writer keeps the newest few cluster manifests: a reader that listed one the writer then
    collected reads the newer one in its place, never "the sharded index is damaged". Here the
    writer keeps only one and commits as fast as it can, so the race happens within a second."""
    from ldr.index.cluster import collect_cluster, new_cluster, publish_cluster, read_cluster, shard_rel

    shards = [{"path": shard_rel(0), "generation": 1, "docs": 1, "live": 1, "tokens": 3}]
    publish_cluster(tmp_path, new_cluster(1, shards, {}, [], {"op": "index"}))
    gen = [1]

    def commit():
        gen[0] += 1
        publish_cluster(tmp_path, new_cluster(gen[0], shards, {}, [], {"op": "add"}))
        collect_cluster(tmp_path, 1)

    _reads_beside(commit, lambda: read_cluster(tmp_path), 1)


def test_a_reader_slow_between_listing_and_reading_takes_the_newer_generation(tmp_path):
    """The same of an index's own generations: `read_manifest` of the newest (what a writer
    waiting for the lock, `ldr info` and `ldr.open` read first) while a writer commits and collects
    as fast as storage allows (a commit is a publish, then the collection)."""
    from ldr.index import generations as gens
    from ldr.index.manifest import read_manifest, seal
    from ldr.index.stores import collect

    root = tmp_path / "idx"
    ldr.Index.build([ldr.Doc("a", "lamp keeper")], root, dense=None, sparse=None)
    m = [read_manifest(root)]

    def commit():
        m[0] = {k: v for k, v in m[0].items() if k != "checksum"}
        m[0]["generation"] += 1
        gens.publish(root, seal(m[0]))
        collect(root, m[0]["generation"])

    _reads_beside(commit, lambda: read_manifest(root), 2)
