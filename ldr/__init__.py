"""ldr: long-document retrieval (extended-context dense, learned sparse and BM25; fusion; rerank)."""
from ._version import __version__  # noqa: F401

from .api import Index  # noqa: E402
from .corpus import Doc, IngestReport  # noqa: E402
from .errors import (BackendUnavailable, ConfigError, CorpusError, DataError, IndexFormatError,  # noqa: E402
                     LdrError, ModelError)
from .index.build import BuildConfig  # noqa: E402
from .index.ray_build import RayOptions  # noqa: E402
from .search.hits import Hit  # noqa: E402
from .sharded import ShardedIndex, open, reshard  # noqa: E402,A004

__all__ = ["Index", "ShardedIndex", "open", "reshard", "Doc", "Hit", "IngestReport", "BuildConfig", "RayOptions", "LdrError", "ConfigError",
           "CorpusError", "IndexFormatError", "BackendUnavailable", "ModelError", "DataError", "__version__"]
