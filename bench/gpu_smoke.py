"""ldr's GPU paths end to end, for a lent GPU machine (the suite runs where there is none): the
CLI builds an index on `--device cuda` (PyTorch fp16) and on `--device cpu --backend torch`
(fp32), and the two answer alike in every mode; a cross-encoder reranks on the GPU as on the CPU;
a 2-shard index built on the GPU answers as the unsharded one; `ldr train dense|reranker
--device cuda` run. Each check prints PASS or FAIL with its figures and the script goes on; a JSON
report is written to --out.

Models: a tiny random BERT (dense) and BERT classifier (cross-encoder) made here with a real
tokenizer (--tokenizer: a folder holding tokenizer.json, vocab.txt, ...), and the real SPLADE-tiny
(--splade: its model folder), so nothing is downloaded and little has to travel.

    python bench/gpu_smoke.py --tokenizer TOK_DIR --splade SPLADE_DIR --work /tmp/gpu-smoke --out report.json
    python bench/gpu_smoke.py ... --device cpu     # the script's own check on a machine without a GPU
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUERIES = ["corrosion of the bearing plates", "who relit the lamp", "when can the licence be terminated",
           "sourdough starter feeding", "harbour master tides", "quarterly revenue forecast"]
RESULTS: list[dict] = []


def check(name):
    def wrap(fn):
        def run(*a, **kw):
            t = time.perf_counter()
            try:
                ok, figures = fn(*a, **kw)
            except Exception as e:     # a smoke test reports and goes on
                ok, figures = False, {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
            figures["seconds"] = round(time.perf_counter() - t, 2)
            RESULTS.append({"check": name, "ok": ok, **figures})
            print(("PASS " if ok else "FAIL ") + name + " " + json.dumps(figures)[:1500], flush=True)
            return ok
        return run
    return wrap


def tiny(kind: str, path: Path, tokenizer: Path) -> Path:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, pad_token_id=0, max_position_embeddings=512)
    model = tf.BertModel(tf.BertConfig(**common)) if kind == "bert" else \
        tf.BertForSequenceClassification(tf.BertConfig(num_labels=1, **common))
    model.eval().save_pretrained(path)
    for f in tokenizer.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(f, path / f.name)
    return path


def ldr_cli(*args) -> str:
    r = subprocess.run([sys.executable, "-m", "ldr.cli", *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ldr {' '.join(map(str, args))} exited {r.returncode}: {r.stdout[-1500:]} {r.stderr[-1500:]}")
    return r.stdout


def top(index, q, **opts):
    return [(h.id, h.score) for h in index.search(q, k=5, **opts)]


def compare(a, b, rel_tol: float) -> dict:
    """Top-5 lists of two indexes over QUERIES: ids equal, and the largest score difference
    relative to the list's top score (fp16 against fp32)."""
    same_ids, worst = 0, 0.0
    for q in QUERIES:
        x, y = a(q), b(q)
        same_ids += [i for i, _ in x] == [i for i, _ in y]
        sy = dict(y)
        scale = max([abs(s) for _, s in x] or [1.0]) or 1.0
        worst = max([worst] + [abs(s - sy[i]) / scale for i, s in x if i in sy])
    return {"queries": len(QUERIES), "same_top5_ids": same_ids, "max_rel_score_diff": round(worst, 6),
            "ok": worst <= rel_tol}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--splade", required=True)
    ap.add_argument("--work", default="/tmp/gpu-smoke")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch

    import ldr

    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    print("environment", env, flush=True)
    dense, cross = tiny("bert", work / "dense", Path(a.tokenizer)), tiny("cls", work / "cross", Path(a.tokenizer))
    corpus = ROOT / "corpora" / "sample"
    common = ["--dense", dense, "--sparse", a.splade, "--language", "en", "-q"]
    gpu, cpu = work / "gpu", work / "cpu"

    @check("build on the GPU and on the CPU (CLI)")
    def build():
        t = time.perf_counter()
        ldr_cli("index", corpus, "-o", gpu, "--device", a.device, *common)
        t_gpu = time.perf_counter() - t
        ldr_cli("index", corpus, "-o", cpu, "--device", "cpu", "--backend", "torch", *common)
        info = json.loads(ldr_cli("info", gpu, "--json"))
        return len(ldr.open(gpu)) == len(ldr.open(cpu)) > 0, {"docs": len(ldr.open(gpu)), "gpu_build_s": round(t_gpu, 2),
                                                             "recorded": json.dumps(info)[:800]}

    if not build():
        return finish(a, env)
    g, c = ldr.open(gpu, device=a.device), ldr.open(cpu, device="cpu")

    for mode, tol in (("bm25", 1e-6), ("sparse", 2e-2), ("dense", 2e-2), (None, 2e-2)):
        @check(f"GPU and CPU indexes answer alike: mode {mode or 'default'}")
        def same(mode=mode, tol=tol):
            opts = {"mode": mode} if mode else {}
            r = compare(lambda q: top(g, q, **opts), lambda q: top(c, q, **opts), tol)
            return r.pop("ok"), r
        same()

    @check("a cross-encoder reranks on the GPU as on the CPU")
    def rerank():
        opts = {"rerank_model": str(cross), "rerank_depth": 10}
        r = compare(lambda q: top(g, q, **opts), lambda q: top(c, q, **opts), 2e-2)
        res = g.search(QUERIES[0], k=3, **opts)
        r["reranker"] = str(res.reranker)
        return r.pop("ok") and bool(res.reranker), r
    rerank()

    @check("2 shards built on the GPU answer as the unsharded GPU index")
    def shards():
        two = work / "two"
        ldr_cli("index", corpus, "-o", two, "--shards", "2", "--device", a.device, *common)
        s = ldr.open(two, device=a.device)
        r = compare(lambda q: top(s, q), lambda q: top(g, q), 1e-3)
        return r.pop("ok") and len(s) == len(g), r
    shards()

    @check("GPU search speed (default mode, warm)")
    def speed():
        for q in QUERIES:
            g.search(q, k=10)
        t = time.perf_counter()
        n = 0
        for _ in range(5):
            for q in QUERIES:
                g.search(q, k=10)
                n += 1
        return True, {"ms_per_query": round((time.perf_counter() - t) / n * 1000, 2)}
    speed()

    data = work / "beir"
    (data / "qrels").mkdir(parents=True)
    rng = random.Random(0)
    words = "tide harbour lamp keeper bridge bearing corrosion lease licence bread starter meeting budget".split()
    docs, queries = [], {}
    for i in range(24):
        body = " ".join(rng.choice(words) for _ in range(60))
        docs.append({"id": f"d{i:03d}", "text": f"{body} ref{i:03d}k {body[:60]}"})
        queries[f"q{i:03d}"] = f"{rng.choice(words)} ref{i:03d}k"
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i:03d}\td{i:03d}\t1\n" for i in range(24)))
    small = work / "small"
    from ldr.encode.dense import DenseSettings
    ldr.Index.build(docs, small, dense=DenseSettings(model=str(dense), device=a.device), sparse=None, progress=False)

    @check("ldr train dense --device cuda (tiny model)")
    def train_dense():
        out = work / "trained-dense"
        ldr_cli("train", "dense", "--data", data, "--split", "train", "-i", small, "-o", out,
                "--epochs", "1", "--batch-size", "4", "--max-seq-length", "64", "--device", a.device, "-q")
        card = json.loads((out / "ldr-train.json").read_text())
        return card["kind"] == "dense", {"loss_curve": card.get("loss_curve", [])[:4]}
    train_dense()

    @check("ldr train reranker --device cuda (tiny model)")
    def train_rerank():
        out = work / "trained-cross"
        ldr_cli("train", "reranker", "--data", data, "--split", "train", "-i", small, "-o", out, "--base", cross,
                "--epochs", "1", "--batch-size", "4", "--max-length", "64", "--loss", "bce", "--device", a.device, "-q")
        card = json.loads((out / "ldr-train.json").read_text())
        return card["kind"] == "reranker", {"loss_curve": card.get("loss_curve", [])[:4]}
    train_rerank()
    finish(a, env)


def finish(a, env) -> None:
    report = {"environment": env, "checks": RESULTS, "passed": sum(r["ok"] for r in RESULTS), "of": len(RESULTS)}
    print(f"{report['passed']} of {report['of']} checks passed", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
