"""What every query goes through before any retriever sees it.

Bounds (documented in the README): a query is cut to MAX_QUERY_CHARS characters; BM25 uses its
first MAX_QUERY_TERMS analysed terms; each encoder reads its first window of tokens. So any
query answers in well under a second, however long the pasted text.
"""
from __future__ import annotations

import logging

from ..corpus.text import has_surrogates, replace_surrogates
from ..errors import QueryError

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 65_536
from ..components.analysis import MAX_QUERY_TERMS  # noqa: F401,E402  (the BM25 component owns it)


def prepare(query) -> str:
    """The query as the retrievers will see it; QueryError when there is nothing to search for."""
    if isinstance(query, bytes):
        query = query.decode("utf-8", errors="replace")
    if not isinstance(query, str):
        raise QueryError(f"the query must be a string (got {type(query).__name__})")
    if has_surrogates(query):
        # undecodable bytes in argv arrive as lone surrogates (surrogateescape): show them as U+FFFD
        log.info("query: undecodable characters replaced with U+FFFD")
        query = replace_surrogates(query)
    if len(query) > MAX_QUERY_CHARS:
        log.info("query of %d characters cut to %d", len(query), MAX_QUERY_CHARS)
        query = query[:MAX_QUERY_CHARS]
    if not query.strip():
        raise QueryError("the query is empty (or only whitespace): give some words to search for")
    return query


def check_weights(weights: dict | None) -> None:
    """Fusion weights must be finite and non-negative, and not all zero."""
    import math

    if not weights:
        return
    for name, w in weights.items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
            raise QueryError(f"fusion weight {name}={w!r} is not a finite non-negative number")
    if not any(weights.values()):
        raise QueryError("all fusion weights are zero: give at least one retriever a positive weight")
