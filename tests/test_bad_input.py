"""Bad input gets a clear error or a counted skip: documents in = documents indexed + skipped."""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main
from ldr.corpus import IngestReport, iter_corpus
from ldr.errors import QueryError
from ldr.search.query import MAX_QUERY_CHARS, MAX_QUERY_TERMS, prepare

ROOT = Path(__file__).resolve().parents[1]


def build(corpus, path, **kw):
    kw.setdefault("dense", None)
    kw.setdefault("sparse", None)
    return ldr.Index.build(corpus, path, **kw)


def cli(*args):
    """The installed CLI as a user runs it (a real process: signals, argv bytes, stderr)."""
    return subprocess.run([sys.executable, "-m", "ldr.cli", *args], capture_output=True, timeout=120)


def test_fifo_socket_and_device_links_are_skipped(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    (c / "ok.txt").write_text("a regular document about herons")
    os.mkfifo(c / "pipe.txt")                       # reading it would block forever
    os.symlink("/dev/zero", c / "zero.txt")         # reading it would never end
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(c / "sock.txt"))
    try:
        r = cli("index", str(c), "-o", str(tmp_path / "idx"), "-q", "--dense", "none", "--sparse", "none")
    finally:
        s.close()
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    assert "1 documents indexed, 3 skipped (not a regular file: 3)" in out


def test_documents_over_the_size_limit_are_skipped_and_counted(tmp_path, write_jsonl):
    c = tmp_path / "c"
    c.mkdir()
    (c / "small.txt").write_text("small document about kestrels")
    (c / "big.txt").write_text("word " * 5000)                       # 25 kB
    write_jsonl(c / "lines.jsonl", [{"id": "a", "text": "short"}, {"id": "b", "text": "x " * 20000},
                                    {"id": "c", "text": "also short"}])
    report = IngestReport()
    got = [d.id for d in iter_corpus(c, report, max_doc_mb=0.01)]
    assert got == ["a", "c", "small.txt"]
    assert report.skipped["larger than --max-doc-mb 0.01"] == 2
    idx = build(c, tmp_path / "idx", max_doc_mb=0.01)
    assert len(idx) == 3 and idx.report.n_skipped == 2
    # raising the limit indexes them
    assert len(build(c, tmp_path / "idx2", max_doc_mb=1)) == 5


def test_lone_surrogates_in_jsonl_and_queries(tmp_path, write_jsonl):
    write_jsonl(tmp_path / "c" / "d.jsonl", ['{"id": "s1", "text": "broken \\ud800 surrogate about lynx"}',
                                             '{"id": "s2", "title": "t\\udfff", "text": "fine text about otters"}'])
    idx = build(tmp_path / "c", tmp_path / "idx")
    assert idx.report.warnings["lone surrogates replaced"] == 2 and len(idx) == 2
    assert idx.document("s1").text == "broken \ufffd surrogate about lynx"
    assert idx.search("lynx \ud800", k=1)[0].id == "s1"
    # invalid UTF-8 in argv: answered, not a traceback
    r = cli("search", b"otters \xff\xfe", "-i", str(tmp_path / "idx"), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["hits"][0]["id"] == "s2" and "\ufffd" in data["query"]


def test_corrupt_parquet_page_is_skipped_and_counted(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    table = pa.table({"id": [f"p{i}" for i in range(40)], "text": [f"row {i} about pelicans " * 50 for i in range(40)]})
    pq.write_table(table, c / "t.parquet", row_group_size=20, compression="zstd", write_page_checksum=True)
    md = pq.ParquetFile(c / "t.parquet").metadata
    col = md.row_group(1).column(1)
    data = bytearray((c / "t.parquet").read_bytes())
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    end = start + col.total_compressed_size   # the compressed values end the chunk (page headers
    data[end - 48:end - 16] = bytes(32)       # carry min/max statistics before them)
    (c / "t.parquet").write_bytes(bytes(data))
    (c / "ok.txt").write_text("a healthy document about pelicans")
    idx = build(c, tmp_path / "idx")
    rep = idx.report
    assert rep.indexed == 21 and rep.skipped["corrupt parquet data"] == 20   # 41 in = 21 + 20
    assert idx.search("pelicans", k=1)


def test_utf16_utf32_bom_and_html_entities(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    (c / "u16.txt").write_bytes("UTF-16 text about ptarmigans".encode("utf-16"))
    (c / "u32.txt").write_bytes("UTF-32 text about capercaillie".encode("utf-32"))
    (c / "u16.jsonl").write_bytes('{"id": "j16", "text": "json lines in utf-16 about grebes"}\n'.encode("utf-16"))
    (c / "page.html").write_text("<html><title>A &amp; B</title><p>Tom &amp;amp; Jerry &lt;3 storks</p></html>")
    idx = build(c, tmp_path / "idx")
    assert len(idx) == 4 and idx.report.n_skipped == 0
    assert idx.search("ptarmigans", k=1)[0].id == "u16.txt"
    assert idx.search("capercaillie", k=1)[0].id == "u32.txt"
    assert idx.search("grebes", k=1)[0].id == "j16"
    doc = idx.document("page.html")
    assert doc.text == "Tom &amp; Jerry <3 storks" and doc.title == "A & B"


def test_records_without_id_are_reported_with_their_assigned_ids(tmp_path, write_jsonl):
    write_jsonl(tmp_path / "c" / "d.jsonl", [{"text": "first about rooks"}, {"id": "x", "text": "has one"},
                                             {"text": "third about jays"}])
    out = CliRunner().invoke(main, ["index", str(tmp_path / "c"), "-o", str(tmp_path / "idx"), "-q", "--dense", "none",
                                    "--sparse", "none"])
    assert out.exit_code == 0
    assert "records without an id (assigned FILE#LINE ids): 2" in out.output
    assert "d.jsonl#1, d.jsonl#3" in out.output
    assert ldr.open(tmp_path / "idx").search("jays", k=1)[0].id == "d.jsonl#3"


def test_k_is_clamped_and_bad_weights_rejected(tmp_path):
    idx = build([{"id": f"d{i}", "text": f"words {i} about cranes"} for i in range(5)], tmp_path / "idx",
                bm25="native")
    assert len(idx.search("cranes", k=10**18)) == 5
    r = cli("search", "cranes", "-i", str(tmp_path / "idx"), "-k", str(10**18))
    assert r.returncode == 0 and r.stdout.decode().count("cranes") == 5
    for w in (math.nan, math.inf, -1.0):
        with pytest.raises(QueryError, match="finite non-negative"):
            idx.search("cranes", weights={"bm25": w})
    r = cli("search", "cranes", "-i", str(tmp_path / "idx"), "--weights", "bm25=nan")
    assert r.returncode == 2 and b"finite non-negative" in r.stderr and b"Traceback" not in r.stderr


def test_empty_query_gets_the_same_answer_in_every_mode(tmp_path):
    idx = build([{"id": "a", "text": "some text"}], tmp_path / "idx")
    for q in ("", "   ", "\n\t"):
        for mode in (None, "bm25", "dense", "sparse", "hybrid"):
            with pytest.raises(QueryError, match="the query is empty"):
                idx.search(q, mode=mode)
    for mode in ("bm25", "hybrid"):
        r = cli("search", "  ", "-i", str(tmp_path / "idx"), "--mode", mode)
        assert r.returncode == 2 and b"the query is empty" in r.stderr


def test_long_queries_are_bounded(tmp_path, sample_corpus):
    q = prepare("bearing corrosion " * 100_000)
    assert len(q) == MAX_QUERY_CHARS
    idx = build(sample_corpus, tmp_path / "idx")
    words = " ".join(f"w{i}" for i in range(5 * MAX_QUERY_TERMS)) + " lamp"
    assert idx.search(words, k=3) == []         # "lamp" lies past the first MAX_QUERY_TERMS terms
    assert idx.search("lamp " + words, k=3)     # within them: found
    assert idx.search("x" * 1_000_000 + " lamp", k=3) == []


@pytest.mark.lucene
def test_lucene_answers_queries_over_its_clause_limit(tmp_path, sample_corpus):
    pytest.importorskip("pyserini")
    idx = build(sample_corpus, tmp_path / "idx", bm25="lucene")
    words = "lamp " + " ".join(f"w{i}" for i in range(3000))
    assert idx.search(words, k=3)


def _mount_small_fs(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not available")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m none {tmp_path}"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {probe.stderr.decode()[:100]}")


def test_disk_full_is_a_clear_error_and_keeps_the_old_index(tmp_path, write_jsonl):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    _mount_small_fs(mnt)
    big = write_jsonl(tmp_path / "big.jsonl", [{"id": f"b{i}", "text": f"text {i} " + os.urandom(3000).hex()}
                                              for i in range(1500)])   # ~9 MB of text: cannot fit 3 MB
    small = write_jsonl(tmp_path / "small.jsonl", [{"id": "s", "text": "the old index about godwits"}])
    ldr_cmd = f"{sys.executable} -m ldr.cli"
    script = textwrap.dedent(f"""
        set -u
        mount -t tmpfs -o size=3m none {mnt}
        {ldr_cmd} index {small} -o {mnt}/idx -q --dense none --sparse none > /dev/null || exit 90
        {ldr_cmd} index {big} -o {mnt}/idx -q --dense none --sparse none --overwrite
        echo "rc=$?"
        ls -A {mnt}
        {ldr_cmd} search godwits -i {mnt}/idx -k 1
    """)
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert "rc=2" in r.stdout, r.stdout + r.stderr
    assert "no space left on device" in r.stderr and "Traceback" not in r.stderr
    listing = r.stdout.split("rc=2", 1)[1].split()
    assert listing[0] == "idx" and not any(".ldr-tmp-" in x for x in listing)   # no leftovers
    assert "the old index about godwits" in r.stdout   # the old index still answers


def test_sigterm_cleans_up_like_sigint(tmp_path):
    target = tmp_path / "idx"
    build([{"id": "old", "text": "the previous index about curlews"}], target)
    marker = tmp_path / "halfway"
    script = textwrap.dedent(f"""
        import sys, time
        import ldr.corpus
        def slow(path, report, **kw):
            for i in range(10**6):
                if i == 500:
                    open({str(marker)!r}, "w").close()
                    for _ in range(6000):   # short sleeps: the handler runs within 0.1 s wherever the
                        time.sleep(0.1)     # kernel delivers SIGTERM (one 600 s sleep hung the suite once)
                yield ldr.Doc(f"n{{i}}", f"new text {{i}}")
        ldr.corpus.iter_corpus = slow
        from ldr.cli import main
        sys.argv = ["ldr", "index", {str(tmp_path)!r}, "-o", {str(target)!r}, "-q", "--dense", "none", "--sparse", "none",
                    "--overwrite"]
        main()
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and b"terminated" in err and b"Traceback" not in err
    assert not [x for x in tmp_path.iterdir() if ".ldr-tmp-" in x.name]
    # the interrupted write removed what it had started; only the committed segment remains
    assert [p.name for p in (target / "segments").iterdir()] == ["seg-000001"]
    assert ldr.open(target).search("curlews", k=1)[0].id == "old"


def test_equal_scores_are_ordered_by_id(tmp_path):
    same = "identical text about sandpipers"
    ids = ["zeta", "alpha", "mid", "beta"]
    a = build([{"id": i, "text": same} for i in ids], tmp_path / "a")
    b = build([{"id": i, "text": same} for i in reversed(ids)], tmp_path / "b")
    for mode in ("bm25",):
        ra = [h.id for h in a.search("sandpipers", k=4, mode=mode)]
        rb = [h.id for h in b.search("sandpipers", k=4, mode=mode)]
        assert ra == rb == sorted(ids)
    assert [h.id for h in a.search("sandpipers", k=2)] == ["alpha", "beta"]
