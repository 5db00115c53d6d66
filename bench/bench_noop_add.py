"""A no-op `ldr add FOLDER` (issue 76): a folder of 19 notes and a 150-page PDF whose extraction
takes seconds, indexed BM25 only; then `ldr add` of the same folder (nothing parsed: every file's
bytes are as the index read them) against `ldr add` of a copy of it (every file parsed, as every
add did before), twice each, one after the other.

    python bench/bench_noop_add.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    from test_hostile_input import _slow_pdf

    ldr = [sys.executable, "-m", "ldr.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        c = root / "c"
        c.mkdir()
        (c / "big.pdf").write_bytes(_slow_pdf(lines=1200, pages=150))
        for i in range(19):
            (c / f"n{i}.txt").write_text(f"note {i} on the tides " * 50)
        subprocess.run([*ldr, "index", str(c), "-o", str(root / "idx"), "-q", "--dense", "none", "--sparse", "none"],
                       check=True, capture_output=True)

        def timed(folder: Path) -> str:
            t = time.perf_counter()
            out = subprocess.run([*ldr, "add", str(folder), "-i", str(root / "idx"), "-q"], capture_output=True,
                                 text=True, check=True).stdout.strip().splitlines()[-1]
            return f"{time.perf_counter() - t:.2f} s ({out})"
        for _ in range(2):
            print("ldr add FOLDER (unchanged, unparsed):", timed(c))
            copy = root / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(c, copy)
            print("ldr add COPY (every file parsed):   ", timed(copy))


if __name__ == "__main__":
    main()
