"""What parsing in a bounded worker costs (ldr/corpus/worker.py), and what it holds.

    python bench/bench_ingest_worker.py [--files 300]

1. Overhead: the same folder of small HTML pages and ODT files read through `iter_corpus` (each
   file a round trip to the worker process) and through the readers in this process; seconds and
   the ratio, medians of 3 runs, one run after the other.
2. Hostile corpus (tests/test_hostile_input.py's files): `ldr index` of it, BM25 only, its wall
   time and the peak RSS of the whole process tree (RUSAGE_CHILDREN of a fresh parent).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _folder(root: Path, n: int) -> Path:
    from test_hostile_input import _odt

    c = root / "small"
    c.mkdir()
    for i in range(n):
        if i % 3:
            (c / f"p{i}.html").write_text(f"<html><title>Page {i}</title><p>{'tide tables of the estuary ' * 40}</p>")
        else:
            (c / f"d{i}.odt").write_bytes(_odt(f"<text:p>{'harbour dues and ferry times ' * 40}</text:p>"))
    return c


def overhead(n: int) -> dict:
    from ldr.corpus import IngestReport, iter_corpus, list_files
    from ldr.corpus.readers import Limits, read_one

    with tempfile.TemporaryDirectory() as tmp:
        c = _folder(Path(tmp), n)

        def worker():
            return sum(1 for _ in iter_corpus(c, IngestReport()))

        def in_process():
            report, lim = IngestReport(), Limits()
            return sum(1 for f in list_files(c, report) for _ in read_one(f, f.name, report, lim))
        got = {"worker": [], "in_process": []}
        for _ in range(3):
            for name, fn in (("worker", worker), ("in_process", in_process)):
                t = time.perf_counter()
                assert fn() == n
                got[name].append(time.perf_counter() - t)
    w, p = statistics.median(got["worker"]), statistics.median(got["in_process"])
    return {"files": n, "worker_s": round(w, 3), "in_process_s": round(p, 3), "ratio": round(w / p, 2),
            "per_file_ms": round(1000 * (w - p) / n, 2)}


def hostile() -> dict:
    from test_hostile_input import hostile_folder

    with tempfile.TemporaryDirectory() as tmp:
        c = hostile_folder(Path(tmp) / "c")
        code = textwrap.dedent(f"""
            import resource, subprocess, sys, time
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "ldr.cli", "index", {str(c)!r}, "-o", {str(Path(tmp) / 'idx')!r},
                                "-q", "--dense", "none", "--sparse", "none"], capture_output=True, text=True)
            print(r.returncode, round(time.perf_counter() - t, 1), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
            print(r.stdout.strip().splitlines()[0])
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.splitlines()
    rc, secs, peak = out[0].split()
    return {"rc": int(rc), "seconds": float(secs), "peak_rss_mb": round(int(peak) / 1024), "summary": out[1]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=300)
    args = ap.parse_args()
    print(overhead(args.files))
    print(hostile())


if __name__ == "__main__":
    main()
