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


def _base(h) -> dict:
    base = {"doc_id": h.id, "title": h.title, "doc_score": float(h.score), "doc_rank": h.rank,
            "relevance": getattr(h, "relevance", None),
            **{f"ldr_{k}": v for k, v in (h.origin or {}).items()},
            **{f"meta_{k}" if k in ("doc_id", "title", "start", "end", "page", "passages") else k: v
               for k, v in (h.meta or {}).items()}}
    if h.origin and "source" in h.origin:
        base.setdefault("source", h.origin["source"])   # LangChain's citation key, unless the user has one
    return base


def _where(p) -> dict:
    d = {"start": p.start, "end": p.end, "stage": p.stage}
    if getattr(p, "page", None) is not None:
        d["page"] = p.page
    return d


def search_options(options: dict) -> dict:
    """The options of a framework's search: with no passages, the documents' whole texts."""
    return {**options, "with_text": True} if not options.get("passages") else options


def passage_records(hits) -> list[dict]:
    """One record per passage of each hit, in hit order (each hit's passages best first): the
    text, the passage's score and what a citation needs (document id, title, character offsets,
    the page of a PDF, metadata); a hit without passages is one record of its whole text."""
    out = []
    for h in hits:
        base = _base(h)
        for p in h.passages:
            out.append({"text": p.text, "score": float(p.score), "id": f"{h.id}#{p.start}-{p.end}",
                        "metadata": {**base, **_where(p)}})
        if not h.passages and h.text is not None:
            out.append({"text": h.text, "score": float(h.score), "id": h.id,
                        "metadata": {**base, "start": 0, "end": len(h.text), "stage": "document"}})
    return out


def document_records(hits) -> list[dict]:
    """One record per hit (k hits: k records): its passages in the document's order, joined by a
    line holding "…" (or its whole text when no passages were asked), the document's score, and
    each passage's offsets, score and page under "passages"; "start"/"end" are the best one's."""
    out = []
    for h in hits:
        base = _base(h)
        if h.passages:
            best = h.passages[0]
            ordered = sorted(h.passages, key=lambda p: p.start)
            text = "\n…\n".join(p.text for p in ordered)
            where = {**_where(best), "passages": [{**_where(p), "score": float(p.score)} for p in ordered]}
        elif h.text is not None:
            text, where = h.text, {"start": 0, "end": len(h.text), "stage": "document", "passages": []}
        else:
            continue
        out.append({"text": text, "score": float(h.score), "id": h.id, "metadata": {**base, **where}})
    return out
