"""What a framework retriever searches: a local index or a running server, behind one call."""
from __future__ import annotations

import os


def open_source(index=None, url: str | None = None, api_key: str | None = None):
    """An object with `.search(query, k=, passages=, filters=, **options)`: an `ldr.Index` as given,
    an index directory (opened here), or `url` / an "http(s)://" string (a `ldr serve` client)."""
    from ..errors import ConfigError

    if (index is None) == (url is None):
        raise ConfigError("give either index= (an ldr.Index or an index directory) or url= (a running `ldr serve`)")
    if url is None and isinstance(index, str) and index.startswith(("http://", "https://")):
        url, index = index, None
    if url is not None:
        from ..serve.client import Client
        return Client(url, api_key=api_key)
    if isinstance(index, (str, os.PathLike)):
        from .. import sharded
        return sharded.open(index)
    if not hasattr(index, "search"):
        raise ConfigError(f"index= must be an ldr.Index, an index directory or a server URL (got {type(index).__name__})")
    return index


def passage_records(hits, with_text_fallback: bool = True) -> list[dict]:
    """One record per passage of each hit, in hit order (each hit's passages best first): the
    text, the passage's score and what a citation
    needs (document id, title, character offsets, metadata)."""
    out = []
    for h in hits:
        base = {"doc_id": h.id, "title": h.title, "doc_score": float(h.score), "doc_rank": h.rank,
                "relevance": getattr(h, "relevance", None),
                **{f"ldr_{k}": v for k, v in (h.origin or {}).items()},
                **{f"meta_{k}" if k in ("doc_id", "title", "start", "end") else k: v for k, v in (h.meta or {}).items()}}
        if h.origin and "source" in h.origin:
            base.setdefault("source", h.origin["source"])   # LangChain's citation key, unless the user has one
        if h.passages:
            for p in h.passages:
                out.append({"text": p.text, "score": float(p.score), "id": f"{h.id}#{p.start}-{p.end}",
                            "metadata": {**base, "start": p.start, "end": p.end, "stage": p.stage}})
        elif with_text_fallback and h.text is not None:
            out.append({"text": h.text, "score": float(h.score), "id": h.id,
                        "metadata": {**base, "start": 0, "end": len(h.text), "stage": "document"}})
    return out
