"""SIGKILL at random moments of a sharded `ldr add` (issue 41): after each kill, a reader answers
exactly as the generation before the add or the one after, never a mix; `ldr check` passes once
the next writer has run (it brings back a shard the killed add left ahead of the cluster).

    python bench/sweeps/attack_shards.py --trials 20 --work /tmp/ldr-attack-shards
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.sharded import ShardedIndex  # noqa: E402

BM25 = {"dense": None, "sparse": None}
QUERIES = ["corrosion of the bearing plates", "lamp lighthouse storm", "licence termination notice", "tides harbour"]


def answers(path: Path) -> dict:
    ix = ldr.open(path)
    try:
        return {q: [(h.id, round(h.score, 6)) for h in ix.search(q, k=10)] for q in QUERIES}
    finally:
        ix.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--work", default="/tmp/ldr-attack-shards")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    more = work / "more"
    more.mkdir(parents=True)
    for i in range(300):       # enough to take a few hundred ms to add, on 4 shards
        (more / f"extra-{i:03d}.txt").write_text(f"harbour log {i}: the tides rose at dawn and the lamp was relit "
                                                 f"after storm number {i}. " * 20)
    base = work / "base"
    ShardedIndex.build(ROOT / "corpora" / "sample", base, shards=4, **BM25)
    after_dir = work / "after"
    shutil.copytree(base, after_dir)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ldr.cli", "add", str(more), "-i", str(after_dir), "-q"], check=True,
                   capture_output=True)
    duration = time.perf_counter() - t      # the whole add, from the process's start: kills land anywhere in it
    before, after = answers(base), answers(after_dir)
    results = {"trials": a.trials, "add_seconds": round(duration, 2), "killed": 0, "before": 0, "after": 0,
               "mixed": 0, "check_right_after": 0, "check_after_next_write": 0}
    for trial in range(a.trials):
        idx = work / f"t{trial}"
        shutil.copytree(base, idx)
        p = subprocess.Popen([sys.executable, "-m", "ldr.cli", "add", str(more), "-i", str(idx), "-q"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.1 * duration))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            results["killed"] += 1
        p.wait()
        got = answers(idx)
        verdict = "before" if got == before else "after" if got == after else "mixed"
        results[verdict] += 1
        check = subprocess.run([sys.executable, "-m", "ldr.cli", "check", str(idx), "-q"], capture_output=True)
        results["check_right_after"] += check.returncode == 0
        # the next writer reconciles, then adds: the answers are the after state and check passes
        subprocess.run([sys.executable, "-m", "ldr.cli", "add", str(more), "-i", str(idx), "-q"], check=True,
                       capture_output=True)
        ok = subprocess.run([sys.executable, "-m", "ldr.cli", "check", str(idx), "-q"], capture_output=True)
        results["check_after_next_write"] += ok.returncode == 0 and answers(idx) == after
        print(trial, verdict, file=sys.stderr)
        shutil.rmtree(idx)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
