"""Issue 76 (reliability round 6): every document is parsed under a memory cap and a deadline, a
build never aborts on one file, and property-based tests (hypothesis) hold every reader and the
write commands to their contract: a document or a counted skip, never an exception; an index
written any way answers as a fresh build of the same documents."""
import io
import json
import subprocess
import sys
import textwrap
import zipfile
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ldr
from ldr.corpus import IngestReport, iter_corpus
from ldr.corpus.readers import Limits, read_one

FAST = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _zip(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _under_declare(raw: bytes, size: int) -> bytes:
    """Every member's uncompressed size, in its local header and the central directory, set to
    `size`: a member that holds far more than it declares."""
    import struct

    out = bytearray(raw)
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = out.find(sig)
        while i >= 0:
            struct.pack_into("<I", out, i + at, size)
            i = out.find(sig, i + 4)
    return bytes(out)


def _odt(body: str) -> bytes:
    return _zip({"mimetype": "application/vnd.oasis.opendocument.text", "content.xml":
                 '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
                 'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
                 f'{body}</office:text></office:body></office:document-content>'})


def _epub(spine_repeats: int, chapter: str = "<html><body><p>a chapter about lighthouses</p></body></html>") -> bytes:
    refs = "".join('<itemref idref="c1"/>' for _ in range(spine_repeats))
    return _zip({"mimetype": "application/epub+zip",
                 "META-INF/container.xml": '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
                                           '<rootfiles><rootfile full-path="book.opf"/></rootfiles></container>',
                 "book.opf": '<package xmlns="http://www.idpf.org/2007/opf"><manifest><item id="c1" href="c1.xhtml"/>'
                             f'</manifest><spine>{refs}</spine></package>',
                 "c1.xhtml": chapter})


def _slow_pdf(lines: int = 1500, pages: int = 400) -> bytes:
    """~70 KB: one content stream of `lines` text lines shared by every page; pypdf re-parses it
    per page and its extraction is quadratic in a page's lines (tens of seconds)."""
    z = zlib.compress(b"BT /F1 9 Tf " + b"".join(b"0 -1 Td (w%d) Tj\n" % i for i in range(lines)) + b"ET", 9)
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages)).encode()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(z) + z + b"\nendstream"]
    objs += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
             b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (4 + pages)] * pages
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offs = io.BytesIO(), []
    out.write(b"%PDF-1.4\n")
    for n, o in enumerate(objs, 1):
        offs.append(out.tell())
        out.write(b"%d 0 obj\n" % n + o + b"\nendobj\n")
    x = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offs))
    out.write(b"trailer << /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, x))
    return out.getvalue()


def hostile_folder(c):
    """The files round 6 found, beside good ones (bench/bench_ingest_worker.py builds it too)."""
    c.mkdir()
    (c / "good.txt").write_text("the keeper relit the lamp of the lighthouse at midnight")
    (c / "good.html").write_text("<html><title>Harbour</title><p>the harbour gate opened at dawn</p></html>")
    (c / "spaces.odt").write_bytes(_odt('<text:p>a<text:s text:c="2000000000"/>b</text:p>'))
    (c / "count.odt").write_bytes(_odt('<text:p>tide<text:s text:c="many"/>tables of the estuary</text:p>'))
    (c / "nested.odt").write_bytes(_odt("<text:span>" * 5000 + "deep" + "</text:span>" * 5000))
    (c / "spine.epub").write_bytes(_epub(20000))
    (c / "tiny.html").write_text("<![ x")
    (c / "slow.pdf").write_bytes(_slow_pdf())
    (c / "liar.odt").write_bytes(_under_declare(_odt("<text:p>" + "x" * (64 << 20) + "</text:p>"), 100))
    return c


def test_a_hostile_corpus_builds_within_its_memory_and_time_and_counts_every_bad_file(tmp_path):
    """The files round 6 found, in one folder beside good ones: a 414-byte ODT whose spaces
    expand to 2 GB, one with a non-numeric count, one of 5,000 nested spans, an EPUB whose spine
    names one chapter 20,000 times, a 5-byte HTML that crashed the standard library's parser, an
    ODT whose member under-declares its size, a 70 KB PDF that parses for minutes. The build
    finishes with the good documents and the EPUB, each bad file a counted skip with its reason,
    and the whole process tree's peak memory stays far below what one bomb would take."""
    c = hostile_folder(tmp_path / "c")
    measure = textwrap.dedent(f"""
        import resource, subprocess, sys
        r = subprocess.run([sys.executable, "-m", "ldr.cli", "index", {str(c)!r}, "-o", {str(tmp_path / 'idx')!r}, "-q",
                            "--dense", "none", "--sparse", "none", "--doc-timeout", "4", "--max-doc-mb", "1"],
                           capture_output=True, text=True)
        print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        print(r.stdout)
        print(r.stderr)
    """)
    out = subprocess.run([sys.executable, "-c", measure], capture_output=True, text=True, timeout=300)
    rc, peak_kb = map(int, out.stdout.split("\n", 1)[0].split())
    assert rc == 0, out.stdout
    assert "Traceback" not in out.stdout and "please report" not in out.stdout, out.stdout
    assert "took longer than --doc-timeout 4s" in out.stdout, out.stdout          # slow.pdf
    assert "larger than --max-doc-mb 1" in out.stdout, out.stdout                  # spaces.odt
    assert "unreadable ODT" in out.stdout, out.stdout            # 5,000 nested spans; liar.odt (its CRC)
    assert peak_kb < 1_400_000, f"peak RSS {peak_kb} kB"    # 2 GB of spaces, or an EPUB read 20,000 times, would pass it
    ix = ldr.open(tmp_path / "idx")
    ids = set(ix.live_ids())
    assert {"good.txt", "good.html", "spine.epub", "count.odt"} <= ids, ids
    assert {"spaces.odt", "nested.odt", "slow.pdf", "tiny.html", "liar.odt"}.isdisjoint(ids)
    assert ix.document("spine.epub").text.count("lighthouses") == 1
    assert "tide tables" in ix.document("count.odt").text


# -- property-based: every reader returns documents or counted skips, never raises ---------------

_MARKUP = st.lists(st.sampled_from(list("<>/!?[]-=&#;\"' abcpx\n\x00") + ["<p>", "</p>", "<![", "<!--", "&amp;",
                                                                       "<script>", "<title>", "<![CDATA["]),
                   max_size=120).map("".join)


def _read(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    report = IngestReport()
    docs = list(read_one(p, name, report, Limits(1)))
    for d in docs:
        assert isinstance(d.text, str) and isinstance(d.id, str) and d.id and d.path == name
    return docs, report


@FAST
@given(markup=_MARKUP)
def test_html_reader_never_raises(tmp_path_factory, markup):
    tmp = tmp_path_factory.mktemp("h")
    docs, report = _read(tmp, "page.html", markup.encode("utf-8", "surrogatepass"))
    assert len(docs) == 1 or report.n_skipped == 1


@FAST
@given(members=st.dictionaries(st.sampled_from(["content.xml", "meta.xml", "META-INF/container.xml", "book.opf",
                                                "word/document.xml", "[Content_Types].xml", "c1.xhtml"]),
                               st.one_of(_MARKUP, st.binary(max_size=200).map(lambda b: b.decode("latin-1"))),
                               max_size=5),
       ext=st.sampled_from([".odt", ".epub", ".docx"]))
def test_packed_readers_never_raise(tmp_path_factory, members, ext):
    tmp = tmp_path_factory.mktemp("z")
    docs, report = _read(tmp, "doc" + ext, _zip(members))
    assert len(docs) == 1 or report.n_skipped == 1


@FAST
@given(data=st.binary(max_size=600), ext=st.sampled_from([".pdf", ".txt", ".md", ".jsonl", ".json", ".parquet",
                                                          ".odt", ".epub", ".docx", ".html"]))
def test_every_reader_takes_any_bytes(tmp_path_factory, data, ext):
    tmp = tmp_path_factory.mktemp("b")
    docs, report = _read(tmp, "f" + ext, data)
    assert docs or report.n_skipped or not data.strip() or ext in (".jsonl", ".json")


@FAST
@given(lines=st.lists(st.one_of(st.text(max_size=40), st.builds(json.dumps, st.dictionaries(
    st.sampled_from(["id", "text", "title", "lang", "_id"]), st.one_of(st.text(max_size=20), st.integers(), st.none(),
                                                                      st.lists(st.integers(), max_size=3))))),
                      max_size=8))
def test_jsonl_reader_counts_every_line(tmp_path_factory, lines):
    tmp = tmp_path_factory.mktemp("j")
    docs, report = _read(tmp, "r.jsonl", "\n".join(lines).encode("utf-8", "surrogatepass"))
    assert len(docs) + report.n_skipped <= sum(1 for x in lines if x.strip())


def test_the_worker_path_skips_what_the_in_process_reader_would(tmp_path):
    """The same files through iter_corpus (the bounded worker) and through the readers in the
    process: the same documents, the same skips."""
    c = tmp_path / "c"
    c.mkdir()
    (c / "a.html").write_text("<p>tide tables</p>")
    (c / "b.odt").write_bytes(_odt("<text:p>estuary</text:p>"))
    (c / "c.epub").write_bytes(b"not a zip")
    (c / "d.txt").write_text("plain words")
    report = IngestReport()
    docs = {d.id: d.text for d in iter_corpus(c, report)}
    assert docs == {"a.html": "tide tables", "b.odt": "estuary", "d.txt": "plain words"}
    assert report.skipped == {"unreadable EPUB": 1} and report.partial == {"c.epub"}


# -- property-based: any sequence of writes answers as a fresh build of the same documents -------

_WORDS = ["tide", "lamp", "keeper", "harbour", "gate", "estuary", "bearing", "plates", "corrosion", "north"]


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(st.integers(0, 7), st.lists(st.sampled_from(_WORDS), min_size=1,
                                                                              max_size=6)), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 7), min_size=1, max_size=2)),
    st.tuples(st.just("merge"), st.just(None))), min_size=1, max_size=4))
def test_any_sequence_of_writes_answers_as_a_fresh_build(tmp_path_factory, ops):
    tmp = tmp_path_factory.mktemp("w")
    ix = ldr.Index.create(tmp / "idx", dense=None, sparse=None)
    want: dict[str, str] = {}
    for op, arg in ops:
        if op == "add":
            docs = {f"d{i}": " ".join(words) for i, words in arg}
            ix.add([ldr.Doc(i, t, "") for i, t in docs.items()])
            want.update(docs)
        elif op == "delete":
            ids = [f"d{i}" for i in arg]
            ix.delete(ids)
            for i in ids:
                want.pop(i, None)
        else:
            ix.merge()
    assert sorted(ix.live_ids()) == sorted(want)
    if not want:
        return
    fresh = ldr.Index.build([ldr.Doc(i, t, "") for i, t in want.items()], tmp / "fresh", dense=None, sparse=None)
    for q in ("tide lamp", "harbour gate north", "corrosion"):
        got = [(h.id, round(h.score, 5)) for h in ix.search(q, k=8, mode="bm25")]
        assert got == [(h.id, round(h.score, 5)) for h in fresh.search(q, k=8, mode="bm25")], q


def test_a_sharded_index_says_what_its_build_skipped(tmp_path):
    """Issue 76: `ldr info` on a sharded index said "skipped: none" after a build that skipped 2 files."""
    from click.testing import CliRunner

    from ldr.cli import main

    c = tmp_path / "c"
    c.mkdir()
    for i in range(4):
        (c / f"n{i}.txt").write_text(f"note {i} on the tides of the estuary")
    (c / "bad.epub").write_bytes(b"not a zip")
    (c / "empty.txt").write_text("   ")
    r = CliRunner().invoke(main, ["index", str(c), "-o", str(tmp_path / "idx"), "--shards", "2", "-q",
                                  "--dense", "none", "--sparse", "none"])
    assert r.exit_code == 0, r.output
    info = CliRunner().invoke(main, ["info", str(tmp_path / "idx")])
    assert "unreadable EPUB: 1" in info.output and "empty document: 1" in info.output, info.output


def test_ctrl_c_during_encoding_stops_within_seconds(tmp_path):
    """Issue 76: the first Ctrl-C during `ldr index` froze the bar and stopped ~110 s later (the
    running batch, up to 4 MB of text, was encoded to its end); a second printed `terminate called
    without an active exception` / `Aborted`. The batch now stops at its next model call."""
    import os
    import signal
    import time

    c = tmp_path / "c"
    c.mkdir()
    words = "the keeper relit the lamp and logged the tides of the estuary before the storm came ".split()
    for i in range(6):
        (c / f"log{i}.txt").write_text(" ".join(words[(j * 7 + i) % len(words)] for j in range(90_000)))
    env = dict(os.environ, LDR_LOG_LEVEL="INFO")
    p = subprocess.Popen([sys.executable, "-m", "ldr.cli", "index", str(c), "-o", str(tmp_path / "idx"),
                          "--sparse", "none", "-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         text=True)
    # a log's first progress line comes when the first model call returns: the model is loaded and
    # the first batch (all six documents, 3.6 MB) is being encoded
    seen = []
    while not (seen and seen[-1].startswith("encoding: ")) and len(seen) < 5:
        seen.append(p.stdout.readline())
    assert seen[-1].startswith("encoding: ") and p.poll() is None, seen
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    took = time.monotonic() - t
    assert p.returncode == 130, out
    assert "interrupted" in out and "terminate called" not in out and "Traceback" not in out, out
    assert took < 20, f"stopped {took:.1f} s after Ctrl-C"
    assert not (tmp_path / "idx").exists() or not list((tmp_path / "idx").glob("manifest*.json"))


def test_a_markdown_title_past_its_badges(tmp_path):
    """Issue 76: Markdown titles fell back to the file name when badges preceded the heading."""
    p = tmp_path / "README.md"
    p.write_text("[![CI](https://x/ci.svg)](https://x) [![PyPI](https://x/v.svg)](https://x)\n\n"
                 "<p align=center><img src=logo.png></p>\n\n# bm25s: fast lexical search\n\nBody text.\n")
    docs, _ = _read(tmp_path, "README.md", p.read_bytes())
    assert docs[0].title == "bm25s: fast lexical search"
    docs, _ = _read(tmp_path, "notes.md", b"Some intro paragraph.\n\n# A later heading\n")
    assert docs[0].title == "notes"


def test_llamaindex_passage_scores_read_as_similarities(tmp_path):
    """Issue 76: LlamaIndex passage scores passed 1 (a similarity cutoff read 1.25 as certain)."""
    from ldr.integrations.llamaindex import LdrRetriever

    docs = [{"id": f"d{i}", "text": f"the harbour lamp was relit; tide tables {i}; bearing plates " * 20} for i in range(6)]
    ldr.Index.build(docs, tmp_path / "i", sparse=None)
    nodes = LdrRetriever(str(tmp_path / "i"), k=3, passages=2).retrieve("harbour lamp relit")
    assert nodes and all(0.0 <= n.score <= 1.0 for n in nodes)
    assert all(n.score == n.node.metadata["relevance"] and "passage_score" in n.node.metadata for n in nodes)


def test_a_folder_of_files_has_type_and_folder_facets_and_filters(tmp_path):
    """Issue 76: the page listed "no metadata fields" for a folder of files, though `path` filters
    worked: each file's type and folder are fields to count and filter on."""
    c = tmp_path / "c"
    (c / "notes").mkdir(parents=True)
    (c / "a.txt").write_text("tide tables of the estuary")
    (c / "notes" / "b.md").write_text("# Tides\n\ntide tables for May")
    (c / "notes" / "c.html").write_text("<p>tide tables for June</p>")
    ix = ldr.Index.build(c, tmp_path / "idx", dense=None, sparse=None)
    fields = {f["name"]: dict((str(v), n) for v, n in f["values"]) for f in ix.facets()["fields"]}
    assert fields["ldr.type"] == {".txt": 1, ".md": 1, ".html": 1}
    assert fields["ldr.folder"] == {".": 1, "notes": 2}
    assert [h.id for h in ix.search("tide tables", filters={"ldr.folder": "notes", "ldr.type": ".md"})] == ["notes/b.md"]


@pytest.mark.parametrize("shards", [0, 2])
def test_a_no_op_add_reads_no_unchanged_file(tmp_path, shards):
    """Issue 76: a no-op `ldr add` parsed every PDF again before finding it unchanged (11.9 s for
    20 files, 9 s of it one 118-page PDF). A file whose bytes are those the index read (size and
    digest, whatever its time) is not parsed: here no parse may run at all. A file that changed is
    read and replaced."""
    import os

    from click.testing import CliRunner

    from ldr.cli import main

    c = tmp_path / "c"
    c.mkdir()
    (c / "minutes.odt").write_bytes(_odt("<text:p>the board elected a treasurer of the rowing club</text:p>"))
    (c / "notes.txt").write_text("tide tables of the estuary for May")
    (c / "page.html").write_text("<p>the harbour gate opened at dawn</p>")
    args = ["--shards", str(shards)] if shards else []
    r = CliRunner().invoke(main, ["index", str(c), "-o", str(tmp_path / "idx"), "-q", "--dense", "none",
                                  "--sparse", "none", *args])
    assert r.exit_code == 0, r.output
    import ldr.corpus.worker as worker

    os.utime(c / "minutes.odt", ns=(1, 1))                              # touched: the same bytes
    (c / "notes.txt").write_text("tide tables of the estuary for June")  # changed
    real, worker.ParseWorker.read = worker.ParseWorker.read, None     # a parse would fail: none may run
    try:
        (c / "page.html").unlink()
        (c / "page.html").write_text("<p>the harbour gate opened at dawn</p>")   # rewritten alike
        out = CliRunner().invoke(main, ["add", str(c), "-i", str(tmp_path / "idx"), "--prune"])
    finally:
        worker.ParseWorker.read = real
    assert out.exit_code == 0, out.output
    assert "0 added, 1 replaced, 2 unchanged" in out.output and "0 skipped" in out.output, out.output
    ix = ldr.open(tmp_path / "idx")
    assert "rowing club" in ix.document("minutes.odt").text and "June" in ix.document("notes.txt").text


def test_ray_serves_log_of_the_coordinators_own_cancels_is_quiet():
    """Issue 76: `ldr serve --ray` logged "Cancelling request ..." every few seconds though every
    answer was whole: the coordinator cancels, on purpose, the calls of every shard but the first to
    answer. Those lines are filtered; Ray Serve's other lines are not."""
    import logging

    pytest.importorskip("ray")
    import ldr.serve.ray_shards  # noqa: F401  (installs the filter)

    serve_log, seen = logging.getLogger("ray.serve"), []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    keep, level = Keep(logging.INFO), serve_log.level
    serve_log.addHandler(keep)
    serve_log.setLevel(logging.INFO)
    try:
        serve_log.info("Cancelling request that has already been assigned to a replica.")
        serve_log.info("Deployed app 'shard-0' successfully.")
    finally:
        serve_log.removeHandler(keep)
        serve_log.setLevel(level)
    assert seen == ["Deployed app 'shard-0' successfully."]
