"""Shared by the encoder-backed components: documents are buffered and encoded in batches.

With a `Pipeline`, a batch is tokenised on the calling thread and encoded on one worker thread,
so reading, the docstore and BM25 writing (and the next batch's tokenisation) go on while the
model runs: the encoder's cores do not wait for them. ONNX Runtime, PyTorch and `tokenizers`
release the GIL while they work.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from ..corpus import Doc


def doc_text(doc: Doc) -> str:
    """What the encoders see of a document: title and body."""
    return f"{doc.title}\n{doc.text}" if doc.title else doc.text


class Cancelled(Exception):
    """A batch stopped because its pipeline was cancelled (the build is being interrupted)."""


class Pipeline:
    """One encode worker for all of a segment's encoders, in submission order; at most `depth`
    batches in flight (memory stays bounded; the feeder waits when it is that far ahead)."""

    def __init__(self, depth: int = 2):
        self._worker = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ldr-encode", initializer=self._started)
        # set by close(cancel=True): the running batch stops at its next model call (a batch of
        # long documents is up to ~100 s of encoding on 2 cores; Ctrl-C waited all of it)
        self.cancelled = threading.Event()
        self._inflight: deque = deque()
        self._depth = depth
        self._lock = threading.Lock()
        self.seconds = {"tokenise": 0.0, "encode": 0.0, "wait": 0.0}

    def timed(self, stage: str, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            with self._lock:
                self.seconds[stage] += time.perf_counter() - t

    def submit(self, fn, *args) -> None:
        while len(self._inflight) >= self._depth:
            self._wait_oldest()
        self._inflight.append(self._pool.submit(self.timed, "encode", fn, *args))

    def call(self, fn, *args):
        """fn(*args) on the worker, now (after the batches in flight): a model loaded where it runs
        gives PyTorch one OpenMP team. Loaded on the feeding thread it had two, more threads than a
        2-core machine's cores, and libgomp then sleeps after 100 spins at every product's join:
        encoding on the worker ran 1.3x slower (encode/omp_wait.py)."""
        if threading.get_ident() == self._worker:      # asked by a batch: waiting for itself would hang
            return fn(*args)
        return self._pool.submit(fn, *args).result()

    def _started(self) -> None:
        self._worker = threading.get_ident()

    def _wait_oldest(self) -> None:
        self.timed("wait", self._inflight.popleft().result)   # a failed batch fails the build here

    def drain(self) -> None:
        while self._inflight:
            self._wait_oldest()

    def close(self, cancel: bool = False) -> None:
        if cancel:
            self.cancelled.set()
            for f in self._inflight:
                f.cancel()
            self._inflight.clear()
        self._pool.shutdown(wait=True)


# a batch by default (BatchedWriter._full): at least MIN_DOCS documents and FULL_CHARS of text
MIN_DOCS, FULL_CHARS, MAX_DOCS = 32, 1 << 20, 4096


class BatchedWriter:
    """`encoder`: the encoder, or a zero-argument loader called when the first batch needs it (a
    writer that sees no document loads no model)."""

    max_docs = MAX_DOCS     # documents per batch at most, by default (_full)

    def __init__(self, docs_per_batch: int | None = None, chars_per_batch: int = 4 << 20,
                 pipeline: Pipeline | None = None, encoder=None):
        if encoder is not None and callable(encoder) and not hasattr(encoder, "prepare_documents"):
            self._encoder, self._load = None, encoder
        else:
            self._encoder, self._load = encoder, None
        self._pending: list[tuple[int, str, int]] = []
        self._per_batch, self._chars, self._max_chars = docs_per_batch, 0, chars_per_batch
        self._pipe = pipeline
        self.tokens = 0     # model input tokens prepared so far (progress: tokens per second)
        self.encoded = 0    # ... and encoded (the progress bar moves with it)

    def _full(self) -> bool:
        """A batch closes at `docs_per_batch` documents when given; by default once it holds both
        MIN_DOCS documents and FULL_CHARS of text (or max_docs documents): a bf16 engine runs its
        windows in passes of one shape, and only a call's last pass of each width is part copies
        (encode/batching.py, shape_groups). At 32 documents a batch of short passages was ~40
        windows in 4 widths, a third of the computed rows copies. Long documents keep batches of
        32 (1 MB batches built qmsum-train in 1.06x the time)."""
        n = len(self._pending)
        if self._chars >= self._max_chars:      # 32 long documents would hold GBs of tokens
            return True
        if self._per_batch is not None:
            return n >= self._per_batch
        return (n >= MIN_DOCS and self._chars >= min(FULL_CHARS, self._max_chars)) or n >= self.max_docs

    def _count(self, n: int) -> None:
        """Progress callback of the encoders (on the pipeline's worker, after each model call); a
        cancelled pipeline's batch ends here, between two model calls."""
        self.encoded += n
        if self._pipe is not None and self._pipe.cancelled.is_set():
            raise Cancelled("the build was interrupted")

    @property
    def encoder(self):
        if self._encoder is None and self._load is not None:
            self._encoder = self._pipe.call(self._load) if self._pipe is not None else self._load()
        return self._encoder

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def add(self, docno: int, doc: Doc) -> None:
        # the body starts after "title\n": spans into the encoded text shift by that much
        self._pending.append((docno, doc_text(doc), len(doc.title) + 1 if doc.title else 0))
        self._chars += len(doc.text)
        if self._full():
            self._flush()

    def flush(self) -> None:
        """The documents held for a batch tokenised and sent to the encoder now (their tokens
        counted: a progress total read after this does not grow)."""
        self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        batch = ([d for d, _, _ in self._pending], [t for _, t, _ in self._pending],
                 [b for _, _, b in self._pending])
        self._pending, self._chars = [], 0
        if self._pipe is None:
            self._write_prepared(self._prepare_batch(*batch))
        else:
            self._pipe.submit(self._write_prepared, self._pipe.timed("tokenise", self._prepare_batch, *batch))

    def _finish(self) -> None:
        """Everything added is encoded and written (call before reading what was written)."""
        self._flush()
        if self._pipe is not None:
            self._pipe.drain()
        release = getattr(self._encoder, "release_memory", None)     # the batches' memory, not the model
        if release is not None:
            release()

    def _prepare_batch(self, docnos: list[int], texts: list[str], body_starts: list[int]):
        """Tokenise (on the feeding thread); returns what _write_prepared needs."""
        raise NotImplementedError

    def _write_prepared(self, prepared) -> None:
        """Encode and append to disk (on the pipeline's worker, in batch order)."""
        raise NotImplementedError
