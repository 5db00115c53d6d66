import json

from click.testing import CliRunner

from ldr.cli import main


def test_index_search_info(tmp_path, sample_corpus):
    r = CliRunner()
    out = r.invoke(main, ["index", str(sample_corpus), "-o", str(tmp_path / "idx"), "-q", "--dense", "none"])
    assert out.exit_code == 0, out.output
    assert "6 documents indexed, 0 skipped" in out.output
    out = r.invoke(main, ["search", "corrosion of the bearing plates", "-i", str(tmp_path / "idx"), "-k", "2"])
    assert out.exit_code == 0
    lines = out.output.splitlines()
    assert lines[0].split()[:3] == ["rank", "id", "score"]
    assert "bridge-inspection-report.html" in lines[1] and "Millbrook" in lines[1]
    out = r.invoke(main, ["search", "sourdough starter", "-i", str(tmp_path / "idx"), "--json"])
    data = json.loads(out.output)
    assert data["query"] == "sourdough starter" and data["hits"][0]["id"] == "sourdough-guide"
    assert {"id", "score", "rank"} <= set(data["hits"][0])
    out = r.invoke(main, ["info", str(tmp_path / "idx")])
    assert out.exit_code == 0 and "documents   6" in out.output and "backend=native" in out.output


def test_skips_are_reported(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("fine")
    (tmp_path / "c" / "b.txt").write_text("")
    out = CliRunner().invoke(main, ["index", str(tmp_path / "c"), "-o", str(tmp_path / "i"), "-q", "--dense", "none"])
    assert out.exit_code == 0
    assert "1 documents indexed, 1 skipped (empty document: 1)" in out.output


def test_user_errors_exit_2_without_traceback(tmp_path):
    r = CliRunner()
    out = r.invoke(main, ["search", "x", "-i", str(tmp_path / "missing")])
    assert out.exit_code == 2 and "error: no index at" in out.output and "Traceback" not in out.output
    (tmp_path / "empty").mkdir()
    out = r.invoke(main, ["index", str(tmp_path / "empty"), "-o", str(tmp_path / "i")])
    assert out.exit_code == 2 and "no indexable documents" in out.output


def test_cli_start_is_light():
    """`ldr --help` must stay instant: no torch, transformers or pyserini at import time."""
    import subprocess
    import sys
    code = ("import sys, ldr, ldr.cli; heavy = [m for m in ('torch', 'transformers', 'pyserini', 'faiss') "
            "if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
