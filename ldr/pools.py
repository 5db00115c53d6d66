"""Thread pools that belong to one process. A forked child (gunicorn --preload, multiprocessing's
fork) holds none of its parent's threads, but their pool's state says they wait for work: a task
handed to it would never run. So each process makes its own pool on first use."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


class ProcessPool:
    """A ThreadPoolExecutor of `workers` threads named `name`, made again in a forked child."""

    def __init__(self, workers: int, name: str):
        self.workers, self.name = workers, name
        self._pool: ThreadPoolExecutor | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name)
                    self._pid = pid
        return self._pool

    def close(self) -> None:
        """Let this process's threads end once idle (a pool of another process is left alone)."""
        if self._pool is not None and self._pid == os.getpid():
            self._pool.shutdown(wait=False)
        self._pool, self._pid = None, -1
