import json
import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "corpora" / "sample"
SHARED = ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# ONNX exports go to a cache of this test session, not the user's (and CLI subprocesses inherit it)
if "LDR_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    os.environ["LDR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ldr-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LDR_CACHE_DIR"], True)   # exports are 100s of MB


@pytest.fixture
def sample_corpus() -> Path:
    return SAMPLE


@pytest.fixture
def write_jsonl():
    def _write(path: Path, records) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        return path
    return _write


def shared_path(name: str) -> Path:
    p = SHARED / name
    if not p.exists():
        pytest.skip(f"../shared/data/{name} not present")
    return p


def newest_manifest(idx: Path) -> Path:
    """The newest generation's manifest file of an index."""
    return sorted(Path(idx).glob("manifest-*.json"))[-1]


def manifest_of(idx: Path) -> dict:
    return json.loads(newest_manifest(idx).read_text())


def segment_dir(idx: Path, i: int = 0) -> Path:
    """The i-th segment folder of the newest generation."""
    return Path(idx) / manifest_of(idx)["segments"][i]["path"]


def bm25_dir(idx: Path) -> Path:
    """The tantivy/Lucene folder of the newest generation."""
    return Path(idx) / manifest_of(idx)["components"]["bm25"]["path"]
