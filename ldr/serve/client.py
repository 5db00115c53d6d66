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

    def search(self, query: str, k: int = 10, *, passages: int = 1, filters: dict | None = None,
               mode: str | None = None, fusion: str | None = None, weights: dict | None = None,
               rerank: bool | None = None, depth: int | None = None, rerank_depth: int | None = None,
               rerank_weight: float | None = None, rerank_windows: int | None = None,
               with_text: bool = False) -> SearchResult:
        body = {"query": query, "k": k, "passages": passages, "filters": filters, "mode": mode, "fusion": fusion,
                "weights": weights, "rerank": rerank, "depth": depth, "rerank_depth": rerank_depth,
                "rerank_weight": rerank_weight, "rerank_windows": rerank_windows, "with_text": with_text}
        data = self._call("POST", "/search", json={n: v for n, v in body.items() if v is not None})
        hits = [Hit(id=h["id"], score=h["score"], rank=h["rank"], title=h.get("title", ""), text=h.get("text"),
                    scores=h.get("scores", {}), meta=h.get("meta"),
                    passages=[Passage(**p) for p in h.get("passages", [])]) for h in data["hits"]]
        result = SearchResult(hits, data["query"], {}, data.get("reranker"))
        result.generation = data.get("generation")
        return result

    def document(self, doc_id: str) -> Doc:
        from urllib.parse import quote

        d = self._call("GET", f"/documents/{quote(doc_id, safe='')}")
        return Doc(d["id"], d["text"], d.get("title", ""), d.get("meta") or {})

    def add(self, docs: list) -> dict:
        """Add or replace documents ({"id", "text", "title"?, other fields: metadata} or ldr.Doc)."""
        payload = [{"id": d.id, "text": d.text, "title": d.title, "meta": d.meta or None} if isinstance(d, Doc) else d
                   for d in docs]
        return self._call("POST", "/documents", json={"documents": payload})

    def delete(self, doc_id: str) -> dict:
        from urllib.parse import quote
        return self._call("DELETE", f"/documents/{quote(doc_id, safe='')}")

    def info(self) -> dict:
        return self._call("GET", "/info")

    def health(self) -> dict:
        return self._call("GET", "/health")
