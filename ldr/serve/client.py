"""A Python client for `ldr serve`: the same hits, passages and errors as a local `ldr.Index`."""
from __future__ import annotations

from ..corpus import Doc
from ..errors import ConfigError, IndexLockedError, LdrError, QueryError
from ..search.hits import Hit, SearchResult
from ..search.passages import Passage


class ServerError(LdrError):
    """The server answered with an error it could not attribute to the request."""


class Client:
    def __init__(self, url: str = "http://127.0.0.1:8080", api_key: str | None = None, timeout: float = 60.0):
        import httpx

        self.url = url.rstrip("/")
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method: str, path: str, **kw) -> dict:
        import httpx

        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise LdrError(f"cannot reach the ldr server at {self.url}: {e}") from None
        if r.status_code < 400:
            return r.json()
        try:
            message = r.json().get("error", r.text)
        except ValueError:
            message = r.text[:300]
        if r.status_code == 404:
            raise KeyError(message)
        if r.status_code == 409:
            raise IndexLockedError(message)
        if r.status_code in (401, 403):
            raise ConfigError(f"{message} ({self.url})")
        if r.status_code < 500:
            raise QueryError(message)
        raise ServerError(f"{self.url}: {message}")

    def search(self, query: str, k: int = 10, *, passages: int = 1, **options) -> SearchResult:
        """As `ldr.Index.search` (the same options: ldr.search.options.QueryOptions), answered by
        the server; a hit carries its passages (1 by default, as the server's)."""
        from ..search.options import QueryOptions, spec

        request = QueryOptions.of(k=k, passages=passages, **options)   # unknown names fail here, not remotely
        body = {"query": query, "k": k, "passages": passages, **request.given()}
        local = [n for n in body if n not in ("query",) and spec(n)["server"] is not True]
        if local:
            raise QueryError(f"a server does not take {', '.join(local)} per request: "
                             + "; ".join(str(spec(n)["server"]) for n in local))
        data = self._call("POST", "/search", json=body)
        hits = [Hit(id=h["id"], score=h["score"], rank=h["rank"], title=h.get("title", ""), text=h.get("text"),
                    scores=h.get("scores", {}), meta=h.get("meta"), origin=h.get("ldr"),
                    passages=[Passage(**p) for p in h.get("passages", [])]) for h in data["hits"]]
        result = SearchResult(hits, data["query"], data.get("timings_ms"), data.get("reranker"),
                              took_ms=data.get("took_ms"))
        result.generation = data.get("generation")
        return result

    def document(self, doc_id: str) -> Doc:
        from urllib.parse import quote

        d = self._call("GET", f"/documents/{quote(doc_id, safe='')}")
        origin = d.get("ldr") or {}
        return Doc(d["id"], d["text"], d.get("title", ""), d.get("meta") or {}, origin.get("source"), origin.get("path"))

    def add(self, docs: list) -> dict:
        """Add or replace documents ({"id", "text", "title"?, other fields: metadata} or ldr.Doc)."""
        payload = [{"id": d.id, "text": d.text, "title": d.title, "meta": d.meta or None} if isinstance(d, Doc) else d
                   for d in docs]
        return self._call("POST", "/documents", json={"documents": payload})

    def delete(self, ids) -> dict:
        """Delete documents by id (one id or a list), in one commit: {deleted, missing, generation},
        as `Index.delete` answers."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        return self._call("POST", "/documents/delete", json={"ids": ids})

    def info(self) -> dict:
        return self._call("GET", "/info")

    def health(self) -> dict:
        return self._call("GET", "/health")
