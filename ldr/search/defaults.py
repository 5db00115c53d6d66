"""Query-time defaults an index records at build time (`ldr info` shows them); defined in ldr/options.py."""
from ..options import DEFAULT_SEARCH  # noqa: F401
