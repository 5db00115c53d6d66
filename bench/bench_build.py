"""Index build cost vs corpus size (1×, 4×, 16× a base corpus): wall time and peak RSS, each build
in its own process. Linear time and bounded memory are the targets (documents are streamed).

    python bench/bench_build.py [--base 6] [--scales 1,4,16] [--components bm25,dense,sparse]
"""
from __future__ import annotations

import argparse
import json
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
    return {"seconds": time.perf_counter() - t, "docs": len(idx),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--base", type=int, default=6, help="documents in the 1x corpus")
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--components", default="bm25,dense,sparse")
    ap.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
