"""Peak memory of `ldr index`: one 200 MB file vs. 200 MB in 20k files, BM25 only and the full pipeline.

Each build runs as a separate `ldr index` process; its peak RSS comes from the kernel (wait4's
ru_maxrss). Text is synthetic (Zipf-distributed words, seeded) so no data is needed. A full-
pipeline build of 200 MB takes hours on 2 cores, so `--limit-s` stops a build after that many
seconds and reports the peak reached so far (marked "partial"); the steady state of the encoders
is reached within the first minute.

    python bench/bench_memory.py --out bench/results/memory.json [--mb 200] [--files 20000]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


VOCAB = np.array([f"w{i:x}" for i in range(50_000)])


def words(n_bytes: int, rng: np.random.Generator) -> str:
    ranks = np.minimum(rng.zipf(1.2, size=n_bytes // 3 + 1), len(VOCAB)) - 1
    return " ".join(VOCAB[ranks].tolist())[:n_bytes]


def write_words(path: Path, n_bytes: int, rng: np.random.Generator, chunk: int = 8 << 20) -> None:
    with open(path, "w") as fh:
        for start in range(0, n_bytes, chunk):
            fh.write(words(min(chunk, n_bytes - start), rng) + " ")


def make_corpora(root: Path, mb: int, files: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    single, many = root / "single", root / "many"
    single.mkdir()
    many.mkdir()
    write_words(single / "big.txt", mb << 20, rng)
    per = (mb << 20) // files
    for i in range(files):
        sub = many / f"{i // 1000:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"d{i}.txt").write_text(words(per, rng))
    return single, many


def peak_rss(cmd: list[str], limit_s: float) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # cwd outside the checkout: `python -m` puts the cwd first on sys.path, which would shadow --ldr-src
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=tempfile.gettempdir())
        partial, sent = False, False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)   # reaps it with its rusage
            if pid:
                break
            if not sent and time.perf_counter() - t0 > limit_s:
                p.send_signal(signal.SIGTERM)   # ldr cleans up on SIGTERM
                partial = sent = True
            time.sleep(0.2)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "seconds": round(time.perf_counter() - t0, 1),
            "partial": partial, "exit": p.returncode,
            "summary": (stdout.strip().splitlines() or [""])[0], "stderr_tail": stderr.strip()[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--limit-s", type=float, default=300)
    ap.add_argument("--pipelines", default="tantivy,native,full")
    ap.add_argument("--out", default="bench/results/memory.json")
    ap.add_argument("--ldr-src", default=None,
                    help="Measure another checkout of ldr (e.g. a `git worktree` of an older commit) in the same run.")
    args = ap.parse_args()
    ldr = [sys.executable, "-m", "ldr.cli", "index", "-q"]
    limit_flag = True
    if args.ldr_src:
        os.environ["PYTHONPATH"] = args.ldr_src
        limit_flag = "max-doc-mb" in subprocess.run(ldr[:-2] + ["index", "--help"], capture_output=True, text=True,
                                                     cwd=tempfile.gettempdir()).stdout
    pipelines = {"tantivy": ["--dense", "none", "--sparse", "none"],
                 "native": ["--bm25", "native", "--dense", "none", "--sparse", "none"],
                 "full": []}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        single, many = make_corpora(Path(tmp), args.mb, args.files)
        for name in args.pipelines.split(","):
            for label, corpus in ((f"1 file x {args.mb} MB", single), (f"{args.files} files, {args.mb} MB", many)):
                cmd = ldr + [str(corpus), "-o", str(Path(tmp) / f"idx-{name}")] + pipelines[name]
                if limit_flag:
                    cmd += ["--max-doc-mb", str(args.mb + 64)]
                r = {"pipeline": name, "corpus": label, **peak_rss(cmd, args.limit_s)}
                print(json.dumps(r), flush=True)
                results.append(r)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "mb": args.mb, "files": args.files,
                                          "limit_s": args.limit_s, "results": results}, indent=2))
    print(f"{'pipeline':<9} {'corpus':<24} {'peak RSS':>10} {'seconds':>8}")
    for r in results:
        print(f"{r['pipeline']:<9} {r['corpus']:<24} {r['peak_rss_mb']:>8.0f}MB {r['seconds']:>8.1f}"
              + (" (partial)" if r["partial"] else ""))


if __name__ == "__main__":
    main()
