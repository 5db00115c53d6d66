"""One writer at a time: an exclusive `flock` on IDX/write.lock, which also records the writer's pid.

The kernel drops a flock when its process dies, so the lock of a killed writer is taken over by
the next one without any staleness guess; the pid in the file is only there to name the holder.
Writers of one process (threads of a server or a RAG app, `asyncio.gather` of adds) queue on a
lock of the process first, whatever `wait` says: the holder is this process, so its write ends.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path

from ..errors import IndexFormatError, IndexLockedError

log = logging.getLogger(__name__)
LOCK = "write.lock"

try:
    import fcntl
except ImportError:
    fcntl = None


def _holder(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return "unknown"


class _Queue:
    """The writers of one index in this process, one at a time (released from any thread)."""

    def __init__(self):
        self.lock, self.owner = threading.Lock(), None

    def take(self) -> bool:
        """Wait for the other threads' writers; False (nothing taken) when this thread holds it."""
        if self.owner == threading.get_ident():
            return False
        self.lock.acquire()
        self.owner = threading.get_ident()
        return True

    def give(self) -> None:
        self.owner = None
        self.lock.release()


_IN_PROCESS: dict[str, _Queue] = {}
_IN_PROCESS_GUARD = threading.Lock()


def _in_process(path: Path) -> _Queue:
    key = os.path.realpath(path)
    with _IN_PROCESS_GUARD:
        return _IN_PROCESS.setdefault(key, _Queue())


class WriteLock:
    def __init__(self, root: Path, wait: bool | float = False):
        """Take the index's write lock. `wait`: False fails at once when another process holds it;
        True waits for it; a number waits that many seconds. Another thread of this process
        holding it is waited for (re-entered by the same thread, the file lock refuses as before)."""
        self.path = Path(root) / LOCK
        self._fd = None
        queue = _in_process(self.path)
        self._mine = queue if queue.take() else None
        try:
            self._take(root, wait)
        except BaseException:
            self.release()
            raise

    def _take(self, root: Path, wait: bool | float) -> None:
        try:   # never through a link: a write.lock replaced by a symlink must not empty its target
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise IndexFormatError(f"{self.path} is a symbolic link; ldr never follows links inside an index. "
                                       "Remove it (ldr makes its own lock file)") from None
            raise
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            self._fd = None
            raise IndexFormatError(f"{self.path} is not a regular file; remove it (ldr makes its own lock file)")
        if fcntl is None:
            return
        deadline = None if wait is True else time.monotonic() + (0 if wait is False else float(wait))
        said = False
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if wait is not False and not said:     # a CLI user sees why nothing moves
                    log.warning("%s is being written by another process (%s); waiting for it to finish",
                                root, _holder(self.path))
                    said = True
                if deadline is not None and time.monotonic() >= deadline:
                    holder = _holder(self.path)
                    os.close(self._fd)
                    self._fd = None
                    raise IndexLockedError(
                        f"{root} is being written by another process ({holder}); only one writer at a time: "
                        "wait for it to finish, or pass --wait (API: wait=True)") from None
                time.sleep(0.05)
        previous = _holder(self.path)
        if previous != "unknown":
            log.info("took over the write lock of %s, a writer that is gone", previous)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)     # an empty file: nobody holds it
            os.close(self._fd)
            self._fd = None
        mine, self._mine = getattr(self, "_mine", None), None
        if mine is not None:
            mine.give()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        self.release()
