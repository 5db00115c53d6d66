"""Typed exceptions. Every message says what went wrong and what to do about it."""


class LdrError(Exception):
    """Base class: the CLI prints these without a traceback (they are user-facing)."""


class ConfigError(LdrError):
    """An option or combination of options that cannot work."""


class CorpusError(LdrError):
    """The corpus cannot be indexed as given (empty, duplicate ids, unreadable root)."""


class IndexFormatError(LdrError):
    """An index directory is missing, incomplete, corrupted or from a newer ldr."""


class NotAnIndex(IndexFormatError):
    """The path is no ldr index at all (missing, empty, a folder of documents): nothing to repair."""


class BackendUnavailable(LdrError):
    """An optional backend (e.g. Lucene via pyserini) is not installed or cannot start."""


class ModelError(LdrError):
    """A model cannot be found or loaded."""


class DataError(LdrError):
    """Benchmark data is missing or not in the expected layout."""


class IndexWriteError(LdrError):
    """Writing an index failed for a reason outside ldr (disk full, permissions)."""


class QueryError(ConfigError):
    """A query that cannot be answered as given (empty, bad weights)."""


class IndexLockedError(LdrError):
    """Another process holds an index's write lock."""
