"""Keep the JVM's fault handlers when another native runtime in the process replaces them.

The JVM (the Lucene backend runs one in-process through pyjnius) takes SIGSEGV on purpose: its
compiled code polls safepoints and checks nulls by touching protected pages, and its own handler
turns those faults into ordinary control flow. Ray installs a crash reporter for the same signals at
`ray.init` and resets them to the default at `ray.shutdown`; from then on the JVM's next safepoint
kills the process (exit 139). So the handlers the JVM installed are recorded when it starts, and put
back after anything that may have replaced them: around Ray's init and shutdown, and before each call
into Java (one sigaction per signal, about a microsecond).
"""
from __future__ import annotations

import ctypes
import signal
import sys
from contextlib import contextmanager

# the faults the JVM handles itself (SIGTRAP: its own breakpoints on some CPUs)
_FAULTS = tuple(int(s) for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGTRAP))
_SIZE = 512                  # larger than any libc's struct sigaction: it is saved and restored whole
_jvm: dict[int, bytes] | None = None


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _read(sig: int) -> bytes | None:
    buf = ctypes.create_string_buffer(_SIZE)
    if _LIBC is None or _LIBC.sigaction(sig, None, buf) != 0:
        return None
    return buf.raw


def _handler(action: bytes) -> int:
    return int.from_bytes(action[:ctypes.sizeof(ctypes.c_void_p)], sys.byteorder)


def record_jvm() -> None:
    """Called once the JVM runs: its handlers are the ones to keep."""
    global _jvm
    if _LIBC is not None:
        _jvm = {s: a for s in _FAULTS if (a := _read(s)) is not None}


def restore_jvm() -> int:
    """Put back any JVM handler that was replaced; returns how many were."""
    if not _jvm:
        return 0
    restored = 0
    for sig, action in _jvm.items():
        now = _read(sig)
        if now is not None and _handler(now) != _handler(action):
            _LIBC.sigaction(sig, ctypes.create_string_buffer(action, _SIZE), None)
            restored += 1
    return restored


@contextmanager
def jvm_kept():
    """Run something that installs its own fault handlers (ray.init, ray.shutdown) and keep the JVM's."""
    try:
        yield
    finally:
        restore_jvm()


def jvm_handlers_intact() -> bool:
    """Whether every fault handler the JVM installed is still in place (True when no JVM runs)."""
    return not _jvm or all(_handler(_read(s) or a) == _handler(a) for s, a in _jvm.items())
