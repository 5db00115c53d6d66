"""`python -m ldr.encode.export_child`: one ONNX export in a child Python (onnx_export.isolated);
with `--zygote`, the warm Python such children are forked from (export_zygote).

The parent names the ldr module that registers the kind's wrapper (onnx_export.WRAPPERS); only
one of ldr's own is imported. A reason the user should read goes to stderr after FAILED.
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from ..errors import LdrError
from . import onnx_export


def main(argv: list[str]) -> int:
    kind, model_dir, out, settings, trust, spec, base = argv
    if spec and not base:     # int8 from an fp32 export runs no wrapper
        module, _, name = spec.partition(":")
        if not module.startswith("ldr."):
            print(f"{onnx_export.FAILED}refusing an export wrapper outside ldr: {module}", file=sys.stderr)
            return 2
        onnx_export.WRAPPERS[kind] = getattr(importlib.import_module(module), name)
    try:
        if base:     # int8 from the fp32 export: no torch, no wrapper
            onnx_export.quantised(Path(base), Path(out), json.loads(settings))
        else:
            onnx_export._export(kind, Path(model_dir), Path(out), json.loads(settings), trust == "1")
    except LdrError as e:
        print(f"{onnx_export.FAILED}{e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"{onnx_export.FAILED}out of memory while exporting {model_dir} to ONNX", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--zygote"]:
        from .export_zygote import serve
        sys.exit(serve(main))
    sys.exit(main(sys.argv[1:]))
