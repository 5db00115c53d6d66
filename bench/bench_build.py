"""Index build cost.

Scaling: 1×, 4×, 16× a base corpus, wall time and peak RSS, each build in its own process. Linear
time and bounded memory are the targets (documents are streamed).

    python bench/bench_build.py [--base 6] [--scales 1,4,16] [--components bm25,dense,sparse]

Against an earlier commit: a full default `ldr index` of the corpus by that commit's code (a git
worktree) and by this one, one after the other in the same run, each from the shell in its own
process (model loading and, for ONNX, the one-time export into an empty cache included); the
stages this commit records; then nDCG@10 of both indexes over the corpus's queries and qrels.

    python bench/bench_build.py --compare 69f9b3b [--data ../shared/data/qmsum-train/corpus.jsonl]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(corpus: Path, out: Path, components: str) -> dict:
    import ldr
    c = set(components.split(","))
    t = time.perf_counter()
    idx = ldr.Index.build(corpus, out, bm25="tantivy" if "bm25" in c else None,
                          **({} if "dense" in c else {"dense": None}), **({} if "sparse" in c else {"sparse": None}))
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {"seconds": time.perf_counter() - t, "docs": len(idx), "peak_rss_mb": peak / 1024}   # ONNX export children too


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--base", type=int, default=6, help="documents in the 1x corpus")
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--components", default="bm25,dense,sparse")
    ap.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--compare", default=None, metavar="REF", help="compare a full default build with commit REF")
    ap.add_argument("--json", default=None, help="--compare: also write the figures here")
    args = ap.parse_args()
    if args.compare:
        compare(args)
        return
    if args.one:
        print(json.dumps(one(Path(args.one[0]), Path(args.one[1]), args.components)))
        return
    lines = open(args.data, encoding="utf-8").read().splitlines()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in [int(x) for x in args.scales.split(",")]:
            corpus = Path(tmp) / f"c{s}.jsonl"
            with open(corpus, "w") as fh:
                for r in range(s):           # distinct ids; documents cycle through the data
                    for i in range(args.base):
                        rec = json.loads(lines[(r * args.base + i) % len(lines)])
                        rec["_id"] = f"{rec['_id']}-{r}-{i}"
                        fh.write(json.dumps(rec) + "\n")
            out = subprocess.run([sys.executable, __file__, "--one", str(corpus), str(Path(tmp) / f"i{s}"),
                                  "--components", args.components], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(scale=s, mb=corpus.stat().st_size / 1e6)
            rows.append(r)
    b = rows[0]
    print(f"components: {args.components}; base corpus {args.base} qmsum documents")
    print("| scale | docs | MB | build s | s per MB | peak RSS MB | time vs 1x |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scale']}x | {r['docs']} | {r['mb']:.1f} | {r['seconds']:.1f} | {r['seconds'] / r['mb']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {r['seconds'] / b['seconds']:.1f}x |")


# `ldr ARGS` with the ldr package of folder SRC: an editable install's import hook would otherwise
# win over PYTHONPATH and run the checkout's code for both builds
LAUNCH = ("import sys; src = sys.argv[1]; "
          "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
          "sys.path.insert(0, src); import ldr; assert ldr.__file__.startswith(src), ldr.__file__; "
          "sys.argv = ['ldr'] + sys.argv[2:]; from ldr.cli import main; main()")


def _ldr(src: Path, *args) -> list[str]:
    return [sys.executable, "-c", LAUNCH, str(src), *map(str, args)]


def _timed_build(src: Path, corpus: Path, out: Path, cache: Path) -> dict:
    env = dict(os.environ, LDR_CACHE_DIR=str(cache))
    t = time.perf_counter()
    proc = subprocess.Popen(_ldr(src, "index", corpus, "-o", out, "-q"), env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)       # this build's peak RSS, its export children's included (KiB)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"ldr index failed with {src} (exit {proc.returncode})")
    wall = time.perf_counter() - t
    manifest = json.loads(sorted(out.glob("manifest-*.json"))[-1].read_text())
    comps = manifest["components"]
    qfile = corpus.parent / "queries.jsonl"
    run = out.parent / f"{out.name}.trec"
    t = time.perf_counter()
    subprocess.run(_ldr(src, "search", "-i", out, "--queries", qfile, "-k", "100", "-o", run), env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    search_s = time.perf_counter() - t
    from ldr.eval.beir import load_qrels
    from ldr.eval.metrics import evaluate
    from ldr.eval.runs import read_run
    qrels = load_qrels(corpus.parent)
    scores = evaluate(qrels, {q: r for q, r in read_run(run).items() if q in qrels}, metrics=("ndcg@10",))
    return {"wall_s": wall, "build_s": manifest["settings"]["build"]["seconds"], "peak_rss_mb": usage.ru_maxrss / 1024,
            "stages": manifest["settings"]["build"].get("stages", {}), "search_s": search_s,
            "ndcg@10": 100 * scores["ndcg@10"],
            "backend": {k: (comps[k]["model"].get("settings", {}).get("backend") or "torch")
                        for k in ("dense", "sparse") if k in comps}}


def compare(args) -> None:
    corpus = Path(args.data).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ref = tmp / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(ref), args.compare], check=True,
                       capture_output=True)
        try:
            rows = {}
            for label, src in ((f"previous default ({args.compare})", ref), ("this commit", ROOT)):
                print(f"building with {label} ...", flush=True)
                rows[label] = _timed_build(src, corpus, tmp / f"idx-{len(rows)}", tmp / f"cache-{len(rows)}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref)], capture_output=True)
    (old_label, old), (new_label, new) = rows.items()
    print(f"\nFull default build of {corpus.parent.name} ({corpus.stat().st_size / 1e6:.1f} MB), same machine, same run")
    print("| code | backends | ldr index wall s | build s (manifest) | peak RSS MB | batch search of all queries s "
          "| nDCG@10 |")
    print("|---|---|---|---|---|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {r['backend']} | {r['wall_s']:.1f} | {r['build_s']:.1f} | {r['peak_rss_mb']:.0f} | "
              f"{r['search_s']:.1f} | {r['ndcg@10']:.2f} |")
    print(f"speed-up end to end: {old['wall_s'] / new['wall_s']:.2f}x; nDCG@10 difference "
          f"{new['ndcg@10'] - old['ndcg@10']:+.2f}")
    if new["stages"]:
        print("this commit's build stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in new["stages"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
