"""The documentation site (docs/, mkdocs.yml) builds with --strict: a broken link between pages,
a missing page or a stale API reference (a renamed or removed name) fails it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[dev]')")
    pytest.importorskip("mkdocstrings")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()
    page = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "compile_plan" in page and "register_stage" in page


def test_the_readme_is_a_landing_page_that_points_into_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    for link in ("docs/search.md", "docs/rag.md", "docs/lifecycle.md", "docs/api.md"):
        assert link in readme and (ROOT / link).is_file()
