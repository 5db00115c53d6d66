"""What a write does when things go wrong: fault injection for the crash tests, a full disk
recognised whatever library reports it, writers aborted without losing the first error."""
from __future__ import annotations

import errno
import logging
import os

log = logging.getLogger(__name__)


def crash_point(name: str) -> None:
    """Fault injection for the crash-safety tests: with LDR_CRASH_AT=name the process is killed
    (SIGKILL, as `kill -9`) at this moment of a write."""
    if os.environ.get("LDR_CRASH_AT") == name:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def no_space(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    # tantivy, pyarrow and faiss report a full disk in their own exception types
    msg = str(e).lower()
    return "no space left" in msg or "disk quota exceeded" in msg or "(os error 28)" in msg


def abort_all(*writers) -> None:
    """Abort the writers that were opened, keeping the error that made us abort them."""
    for w in writers:
        if w is not None:
            try:
                w.abort()
            except Exception as e:  # cleanup: keep the original error
                log.debug("abort failed: %s", e)
