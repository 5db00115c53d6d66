"""The local build's progress bar.

A long document is one item of many seconds of encoding, and a batch holds up to 32 documents,
so a bar counting documents read sits still for minutes while the model works. When a model
encodes, the bar counts model tokens encoded (each encoder reports after every model call), and a
ticker thread redraws it while the feeder waits and while the last batches finish. Its total is
shown only once every document has been read: a total that grew as documents streamed in made
the percentage run backwards (76% → 54%); until then it shows tokens, their rate and the
documents read. A BM25-only build counts documents. Where stderr is not a terminal (a log file,
CI), the bar is a line every LINE_S seconds instead of tqdm's carriage-return redraws, the first
as soon as the first model call has returned (the model is loaded and encoding: a log that waits
30 s for it looks hung)."""
from __future__ import annotations

import sys
import threading
import time

from tqdm.auto import tqdm


REDRAW_S = 0.5      # how often the ticker redraws the bar
LINE_S = 30.0       # how often a log (stderr not a terminal) gets a progress line


class LineBar:
    """tqdm's surface that BuildBar uses, written as whole lines for a log: one every LINE_S
    seconds while work goes on, and a last one when a build that printed any ends."""

    def __init__(self, desc: str, unit: str, total: int | None, every: float | None = None, out=None):
        self.desc, self.unit, self.total, self.out = desc, unit, total, out or sys.stderr
        self.every = LINE_S if every is None else every
        self.n, self.postfix, self.t0 = 0, "", time.monotonic()
        self.last, self.printed = self.t0, False

    def _line(self) -> None:
        secs = time.monotonic() - self.t0
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        total = f"/{self.total:,}" if self.total else ""
        rate = f", {self.n / secs:,.0f} {self.unit}/s" if secs > 0 else ""
        post = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {self.n:,}{total} {self.unit}{share} in {secs:.0f}s{rate}{post}", file=self.out, flush=True)
        self.last, self.printed = time.monotonic(), True

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.every:
            self._line()

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix = s
        # the first line as soon as work has begun (BuildBar redraws: the count, then this)
        if self.n and not self.printed or time.monotonic() - self.last >= self.every:
            self._line()

    def close(self) -> None:
        if self.printed:
            self._line()


class BuildBar:
    def __init__(self, segment, total_docs: int | None, enabled: bool, every: float | None = None):
        self.segment, self.total, self.docs, self.every = segment, total_docs, 0, every or REDRAW_S
        self.tokens = segment.encodes
        desc, unit = ("encoding", "tok") if self.tokens else ("indexing", "doc")
        total = None if self.tokens else total_docs
        if enabled and not sys.stderr.isatty():
            self.bar = LineBar(desc, unit, total)
        else:
            self.bar = tqdm(desc=desc, unit=unit, unit_scale=self.tokens, total=total, disable=not enabled, leave=False)
        self._stop = threading.Event()
        self.read_all = False     # the corpus is read: the tokens to encode are known
        # only the ticker draws the bar (tqdm is not drawn from two threads); the feeder counts
        self._ticker = threading.Thread(target=self._tick, name="ldr-progress", daemon=True) \
            if enabled and self.tokens else None

    def __enter__(self) -> BuildBar:
        if self._ticker is not None:
            self._ticker.start()
        return self

    def fed(self) -> None:
        """One more document read and handed to the encoders."""
        self.docs += 1
        if not self.tokens:
            self.bar.update(1)

    def all_read(self) -> None:
        """Every document was read: from now on the bar has a total (and never runs backwards)."""
        self.read_all = True

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self._draw()

    def _draw(self) -> None:
        encoded, read = self.segment.progress()
        if self.read_all:
            self.bar.total = max(read, 1)
        self.bar.update(encoded - self.bar.n)
        self.bar.set_postfix_str(f"{self.docs}{f'/{self.total}' if self.total else ''} docs read", refresh=True)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            if exc[0] is None:
                self._draw()
        self.bar.close()
