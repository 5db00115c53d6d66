"""Files whose parsing can blow up (PDF, DOCX, ODT, EPUB, HTML) are parsed in a worker process
under a memory cap and a deadline, as Tika's forked parser and the engines' ingest pipelines do:
a 4 KB file can expand to gigabytes (an ODT's repeated spaces, an EPUB's spine naming one
chapter 20,000 times) or run for an hour (a PDF stream shared by every page, quadratic HTML),
and the parsers' own budgets never cover every case. Whatever happens in the worker, a file
costs at most the cap and the deadline and becomes a counted skip with its reason; the build
goes on. Plain text, JSONL and Parquet are read in the process: they stream, bounded per line,
record or row group by --max-doc-mb.

The worker is `python -m ldr.corpus.worker`: one JSON request a line on its stdin, one
length-prefixed JSON answer on its stdout ({"docs": [...], "events": [...]}: its report's
skips and warnings, replayed into the build's). It ignores Ctrl-C (the build stops it) and
exits when its stdin closes. It is started once per build and again after a file killed it.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from .doc import Doc
from .report import IngestReport

log = logging.getLogger(__name__)

DEFAULT_DOC_TIMEOUT = 120.0     # seconds: a 118-page PDF parses in ~9 s on 2 cores
MEMORY_PER_DOC_MB = 16          # the worker's cap: this many times --max-doc-mb (at least MIN_MEMORY_MB)
MIN_MEMORY_MB = 1024
_HEADER = struct.Struct("<Q")


def memory_cap_mb(max_doc_mb: float) -> int:
    return int(max(MIN_MEMORY_MB, MEMORY_PER_DOC_MB * max_doc_mb))


class ParseWorker:
    """A worker process that parses one file at a time within `timeout` seconds and
    `memory_cap_mb(max_doc_mb)` MB of address space above its own start-up size."""

    def __init__(self, max_doc_mb: float, timeout: float = DEFAULT_DOC_TIMEOUT):
        self.max_doc_mb, self.timeout = float(max_doc_mb), float(timeout)
        self.cap_mb = memory_cap_mb(max_doc_mb)
        self._proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, LDR_PARSE_CAP_MB=str(self.cap_mb), PYTHONUNBUFFERED="1")
        # its own session: a Ctrl-C in the terminal reaches the build, which stops the worker
        return subprocess.Popen([sys.executable, "-m", "ldr.corpus.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)

    def read(self, path: Path, rel: str, report: IngestReport) -> list[Doc]:
        """The documents of one file; a file that fails, runs out of memory or time is a skip."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        proc = self._proc
        request = json.dumps({"path": str(path), "rel": rel, "max_doc_mb": self.max_doc_mb}) + "\n"
        try:
            proc.stdin.write(request.encode("utf-8"))
            proc.stdin.flush()
            answer = self._answer(proc, time.monotonic() + self.timeout)
        except _Timeout:
            self._kill()
            report.skip(f"parsing took longer than --doc-timeout {self.timeout:g}s",
                        f"{rel} (raise --doc-timeout to index it)")
            return []
        except (OSError, ValueError, struct.error):     # the worker died: out of memory, or a parser crashed
            code = self._kill()
            report.skip("parsing ran out of memory or crashed",
                        f"{rel} (worker exit {code}; its memory cap is {self.cap_mb} MB, "
                        f"{MEMORY_PER_DOC_MB}x --max-doc-mb: raise --max-doc-mb to allow more)")
            return []
        for kind, reason, where, n in answer["events"]:
            report.skip(reason, where, n) if kind == "skip" else report.warn(reason, where)
        return [Doc(d["id"], d["text"], d["title"], d["meta"], source=d["source"], path=d["path"])
                for d in answer["docs"]]

    def _answer(self, proc: subprocess.Popen, deadline: float) -> dict:
        out = proc.stdout
        head = _read_exactly(out, _HEADER.size, deadline)
        (n,) = _HEADER.unpack(head)
        return json.loads(_read_exactly(out, n, deadline))

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        try:
            return proc.wait(10)
        finally:
            for fh in (proc.stdin, proc.stdout):
                try:
                    fh.close()
                except OSError:
                    pass

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()          # the worker's signal to exit
            proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            proc.stdout.close()


class _Timeout(Exception):
    pass


def _read_exactly(fh, n: int, deadline: float) -> bytes:
    fd, parts, got = fh.fileno(), [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise _Timeout()
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise ValueError("the parse worker closed its output")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class _Recorder(IngestReport):
    """The worker's report: every skip and warning kept as an event for the build's report."""

    def __init__(self):
        super().__init__()
        self.events: list[list] = []

    def skip(self, reason, where, n=1):
        self.events.append(["skip", reason, where, n])

    def warn(self, reason, where):
        self.events.append(["warn", reason, where, 1])


def _cap_memory() -> None:
    import resource

    cap = int(os.environ.get("LDR_PARSE_CAP_MB", MIN_MEMORY_MB)) << 20
    with open("/proc/self/statm") as fh:             # the worker's own size once its parsers are loaded
        size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + cap, size + cap))


def _serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.disable(logging.CRITICAL)
    from . import readers                                   # noqa: F401  (loaded before the cap)
    import pypdf, docx                                      # noqa: F401,E401
    try:
        _cap_memory()
    except (OSError, ValueError, ImportError):
        pass                                                # no cap where the OS has none; the deadline holds
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        req = json.loads(line)
        rec = _Recorder()
        docs = []
        try:
            for d in readers.read_one(Path(req["path"]), req["rel"], rec, readers.Limits(req["max_doc_mb"])):
                docs.append({"id": d.id, "text": d.text, "title": d.title, "meta": d.meta, "source": d.source,
                             "path": d.path})
        except MemoryError:
            docs = []
            rec.events.append(["skip", "parsing ran out of memory or crashed",
                               f"{req['rel']} (over its memory cap: raise --max-doc-mb to allow more)", 1])
        except Exception as e:     # a parser's bug on a hostile file: a skip, never the build's end
            docs = []
            rec.events.append(["skip", "unreadable file", f"{req['rel']} ({type(e).__name__}: {str(e)[:160]})", 1])
        body = json.dumps({"docs": docs, "events": rec.events}).encode("utf-8")
        out.write(_HEADER.pack(len(body)) + body)
        out.flush()


if __name__ == "__main__":
    _serve()
