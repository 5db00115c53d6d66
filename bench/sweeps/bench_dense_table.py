"""A dense ONNX export with its token embedding table inside the graph against one that takes the
table's rows (`meta["embeds"]`, a memory-mapped .npy beside it): load time, resident memory after
loading and after queries, batch and query speed, and the largest difference of their outputs.

    python bench/sweeps/bench_dense_table.py OLD_EXPORT_FOLDER NEW_EXPORT_FOLDER [--text FILE]

Each folder is measured in a fresh Python (memory is the process's), A B A B, and the figures are
the medians. The folders are ldr exports (`$LDR_CACHE_DIR/onnx/dense-*`): an export made by the
commit before the table moved out is the old one.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
from pathlib import Path
from ldr.encode.runtime import OrtModel, pad_np

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024

folder, text = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
before = rss()
t = time.perf_counter()
m = OrtModel(folder)
m.session
load_s, load_mb = time.perf_counter() - t, rss() - before
import tokenizers
tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
ids = tok.encode(text, add_special_tokens=False).ids
pieces = [ids[i:i + 510] for i in range(0, len(ids) - 510, 510)][:16]
batch = pad_np(pieces, int(m.meta.get("pad_token_id") or 0))
words = text.split()
queries = [tok.encode(" ".join(words[i:i + 8])).ids for i in range(0, 8 * 200, 8)]
out = m.run(*batch)
t = time.perf_counter()
for _ in range(3):
    m.run(*batch)
batch_s = (time.perf_counter() - t) / 3
t = time.perf_counter()
for q in queries:
    m.run(*pad_np([q], 0))
query_ms = (time.perf_counter() - t) / len(queries) * 1000
np.save(sys.argv[3], out)
print(json.dumps({"load_s": load_s, "load_mb": load_mb, "batch_s": batch_s, "query_ms": query_ms,
                  "rss_mb": rss() - before, "batch": list(batch[0].shape)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--text", type=Path, default=Path(__file__).resolve().parents[2] / "corpora" / "sample"
                    / "product-meeting-transcript.txt")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs = {"old": [], "new": []}
    outs = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-dense-table-"))
    for _ in range(args.rounds):
        for name in ("old", "new"):
            npy = tmp / f"{name}.npy"
            r = subprocess.run([sys.executable, "-c", CHILD, str(getattr(args, name)), str(args.text), str(npy)],
                               capture_output=True, text=True, check=True)
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
            outs[name] = npy
    import numpy as np
    diff = float(np.abs(np.load(outs["old"]) - np.load(outs["new"])).max())
    shutil.rmtree(tmp)
    print(f"batch {runs['old'][0]['batch']}, {args.rounds} rounds, medians; max |old - new| {diff:.2e}")
    print("| | old (table in the graph) | new (table beside it) |\n|---|---|---|")
    for key, unit in (("load_s", "s"), ("load_mb", "MB"), ("rss_mb", "MB"), ("batch_s", "s"), ("query_ms", "ms")):
        a, b = (statistics.median(r[key] for r in runs[n]) for n in ("old", "new"))
        print(f"| {key} | {a:.3g} {unit} | {b:.3g} {unit} |")


if __name__ == "__main__":
    main()
