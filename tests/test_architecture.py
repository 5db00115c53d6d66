"""The package's shape: no import cycles, storage (ldr/index/) never imports the query side, no
branch on a retriever kind's name outside ldr/components/ (training aside: `ldr train dense`
trains a dense model by nature), and no module over 400 lines."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("architecture", ROOT / "bench" / "architecture.py")
arch = importlib.util.module_from_spec(spec)
sys.modules["architecture"] = arch
spec.loader.exec_module(arch)


def test_no_import_cycles_and_no_upward_imports():
    mods = arch.modules()
    graph = arch.imports(mods)
    assert arch.cycles(graph) == []
    assert arch.upward(graph) == []


def test_no_kind_branches_outside_components():
    found = [line for line in arch.kind_branches(arch.modules()) if not line.startswith("ldr/train/")]
    assert found == []


def test_modules_stay_small():
    assert [(n, p) for n, p in arch.largest(arch.modules(), 3) if n > 400] == []
