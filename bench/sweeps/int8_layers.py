"""Which MatMuls of an encoder lose quality in dynamic int8 (issue 28): MiniLM in int8 lost passkeys
at 512 and 1024 tokens (dense Acc@1 76 -> 66, 82 -> 74), so int8 was never its default.

Each variant quantises every MatMul of ldr's fused fp32 graph (per channel, the settings ldr
chooses for this CPU: runtime.quantization_config) except the ones it keeps in fp32, and is run
through ldr's own dense encoder (MaxP windows, its prompts and pooling). Reported per variant:
passkey Acc@1 of the dense leg alone at each length (50 queries, 100 documents), the minimum and
mean cosine of its window vectors to fp32's, and its encoding speed against fp32 in the same run.

    python bench/sweeps/int8_layers.py [--model all-MiniLM-L6-v2] [--lengths 256,512,1024] \
        [--variants all,layers,types] [--keep "attention/output"]
"""
from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def matmuls(graph: Path) -> list[str]:
    """Names of the MatMul nodes whose second input is a weight (what dynamic int8 quantises)."""
    import onnx

    m = onnx.load(str(graph))
    inits = {i.name for i in m.graph.initializer}
    return [n.name for n in m.graph.node if n.op_type == "MatMul" and any(i in inits for i in n.input)]


def quantised(src: Path, dst: Path, exclude: list[str]) -> Path:
    """A copy of the export folder `src` whose graph is int8 (ldr's own quantiser and settings)
    but for the nodes in `exclude`."""
    from ldr.encode.onnx_export import quantise
    from ldr.encode.runtime import quantization_config

    shutil.copytree(src, dst)
    quantise(src / "model.onnx", dst / "model.onnx", quantization_config(), exclude)
    return dst


def passkey_acc(enc, task, lengths) -> tuple[dict, np.ndarray, float, int]:
    """(Acc@1 per length, all window vectors, encoding seconds, tokens encoded)."""
    acc, vecs, seconds, tokens = {}, [], 0.0, 0
    for length in lengths:
        corpus, queries, qrels = task.split(length)
        ids = list(corpus)
        t = time.perf_counter()
        v, owners = enc.encode_documents([corpus[i] for i in ids])[:2]
        seconds += time.perf_counter() - t
        tokens += sum(len(enc.tokenizer(corpus[i], add_special_tokens=False)["input_ids"]) for i in ids)
        qids = list(queries)
        qv = enc.encode_queries([queries[q] for q in qids])
        sims = qv @ v.T
        best = np.full((len(qids), len(ids)), -np.inf, dtype=np.float32)
        for d in range(len(ids)):
            cols = np.flatnonzero(owners == d)
            if len(cols):
                best[:, d] = sims[:, cols].max(1)
        top = best.argmax(1)
        acc[length] = 100 * np.mean([ids[top[i]] in qrels[q] for i, q in enumerate(qids)])
        vecs.append(v)
    return acc, np.concatenate(vecs), seconds, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--lengths", default="256,512,1024")
    ap.add_argument("--variants", default="all,layers,types", help="all: everything int8; layers: one layer "
                    "kept in fp32 at a time; types: one kind of MatMul kept in fp32 in every layer")
    ap.add_argument("--keep", action="append", default=[], help="a variant keeping in fp32 the MatMuls whose "
                    "name contains this (repeatable; each is its own variant, '+' joins several)")
    args = ap.parse_args()

    from ldr.encode.dense import DenseSettings, load_dense
    from ldr.encode.runtime import OrtModel, quantization_config
    from ldr.eval.synthetic import passkey

    lengths = [int(x) for x in args.lengths.split(",")]
    task = passkey(lengths=lengths)
    enc = load_dense(DenseSettings(model=args.model, backend="onnx"))
    fp32_folder = enc.model.folder
    names = matmuls(fp32_folder / "model.onnx")
    layers = sorted({int(m.group(1)) for n in names if (m := re.search(r"layer\.(\d+)/", n))})
    types = sorted({re.sub(r".*layer\.\d+/", "", n) for n in names if "layer." in n})

    variants: list[tuple[str, list[str] | None]] = [("fp32", None)]
    kinds = args.variants.split(",") if args.variants else []
    if "all" in kinds:
        variants.append(("int8 all MatMuls", []))
    if "layers" in kinds:
        variants += [(f"fp32 layer {i}", [n for n in names if f"layer.{i}/" in n]) for i in layers]
    if "types" in kinds:
        variants += [(f"fp32 {t.rsplit('/', 1)[0]} (all layers)", [n for n in names if re.sub(r".*layer\.\d+/", "", n) == t]) for t in types]
    for keep in args.keep:
        parts = keep.split("+")
        variants.append((f"fp32 {keep}", [n for n in names if any(p in n for p in parts)]))

    print(f"{args.model}: {len(names)} quantisable MatMuls; int8 settings {quantization_config()}; "
          f"passkey, 50 queries x 100 documents per length")
    print("| variant | MatMuls in fp32 | " + " | ".join(f"Acc@1 {n}" for n in lengths)
          + " | min cos | mean cos | tokens/s | vs fp32 |")
    print("|---|---|" + "---|" * (len(lengths) + 4))
    ref, ref_speed = None, None
    with tempfile.TemporaryDirectory() as tmp:
        for k, (label, exclude) in enumerate(variants):
            if exclude is not None:
                enc.model = OrtModel(quantised(fp32_folder, Path(tmp) / f"v{k}", exclude))
            acc, vecs, seconds, tokens = passkey_acc(enc, task, lengths)
            speed = tokens / seconds
            if ref is None:
                ref, ref_speed = vecs, speed
            cos = (vecs * ref).sum(1)
            kept = len(names) if exclude is None else len(exclude)
            print(f"| {label} | {kept} | " + " | ".join(f"{acc[n]:.0f}" for n in lengths)
                  + f" | {cos.min():.4f} | {cos.mean():.4f} | {speed:,.0f} | {speed / ref_speed:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
