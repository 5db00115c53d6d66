"""`ldr` command line: a thin layer over the library (one library call per command), one module
per command group."""
from __future__ import annotations

import sys

from . import admin, adapt, evaluate, search, write  # noqa: F401  (each registers its commands)
from .app import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
