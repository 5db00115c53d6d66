"""The HTTP server of one index (FastAPI; `ldr serve` runs it under uvicorn).

Models load once, at start-up, before the server accepts requests. Search and writes run in the
worker thread pool, never on the event loop. Every search reads one generation from start to end
(the `generation` field of its answer says which); a background task moves the server to
generations other processes commit. Errors are JSON `{"error": ...}` with a 4xx code for a bad
request, and never carry a traceback.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import math
import os
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass


from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from ..errors import ConfigError, CorpusError, IndexLockedError, LdrError, QueryError
from ..search.hits import finite
from .metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("ldr.serve")
API_KEY_ENV = "LDR_API_KEY"


@dataclass
class ServerSettings:
    api_key: str | None = None          # required by write endpoints when set
    read_only: bool = False             # write endpoints answer 403
    max_body_bytes: int = 32 << 20      # any request
    max_query_chars: int = 8192
    max_k: int = 1000
    max_passages: int = 20
    max_rerank_depth: int = 1000        # candidates a search may ask the reranker to score
    max_documents: int = 1000           # per POST /documents
    refresh_seconds: float = 1.0        # how often to look for generations committed elsewhere
    write_wait_seconds: float = 30.0    # how long a write waits for another writer's lock
    warm_up: bool = True


def _search_request_model():
    """The request body of POST /search, derived from the one options schema (QueryOptions)."""
    import typing
    from dataclasses import MISSING

    from pydantic import create_model

    from ..search.options import QueryOptions, server_fields

    hints = typing.get_type_hints(QueryOptions)
    spec = {"query": (str, ...)}
    for f in server_fields():
        default = f.metadata.get("server_default", f.default if f.default is not MISSING else None)
        bounds = {k: v for k, v in (("ge", f.metadata.get("ge")), ("le", f.metadata.get("le"))) if v is not None}
        # strict: `k: true` is not 1, `"10"` is not 10 (JSON numbers only; an int is a valid float)
        strict = hints[f.name] in (int, bool, int | None, bool | None)
        spec[f.name] = (hints[f.name], Field(default, description=f.metadata["help"], strict=strict or None, **bounds))
    return create_model("SearchRequest", __config__=ConfigDict(extra="forbid"), **spec)


SearchRequest = _search_request_model()


def _query_params(params) -> dict:
    """GET /search's parameters as the request model's fields: `q`/`query`, `k`/`hits`, and each
    scalar option converted by its type (a wrong value is then the model's 422)."""
    import typing

    from ..search.options import QueryOptions

    hints = typing.get_type_hints(QueryOptions)
    out = {}
    for name, value in params.items():
        field = {"q": "query", "hits": "k"}.get(name, name)
        hint = hints.get(field)
        try:
            if hint in (int, int | None):
                value = int(value)
            elif hint in (float, float | None):
                value = float(value)
            elif hint in (bool, bool | None, bool | str | None) and value.lower() in ("true", "false", "1", "0"):
                value = value.lower() in ("true", "1")
        except ValueError:
            pass
        out[field] = value
    return out


class IdsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[str] = Field(min_length=1)


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="allow")   # other scalar fields become metadata (filters read them)
    id: str = Field(min_length=1)
    text: str
    title: str = ""
    meta: dict | None = None                   # any JSON values, as files and the API keep them


class DocumentsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[DocumentIn]


class _BodyLimit:
    """Refuses request bodies over `limit` bytes with 413 (declared or streamed), before the
    application parses them."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _send_json(send, 413, {"error": f"request body over {self.limit} bytes"})
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await _send_json(send, 413, {"error": f"request body over {self.limit} bytes"})
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def _send_json(send, status: int, payload: dict) -> None:
    import json

    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _error(status: int, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def create_app(index_path: str, settings: ServerSettings | None = None, *, device: str | None = None,
               trust_remote_code: bool = False) -> FastAPI:
    """The FastAPI application serving the index at `index_path` (opened at start-up)."""
    from .. import api

    s = settings or ServerSettings()
    if s.api_key is None:
        s.api_key = os.environ.get(API_KEY_ENV) or None
    metrics = Metrics()
    state: dict = {}
    write_lock = threading.Lock()   # one write at a time from this server; other processes wait on the index lock

    def index() -> "api.Index":
        return state["index"]

    def warm() -> None:
        """Load the components of the generation just opened, off any user's request."""
        if s.warm_up:
            index().search("warm up", k=1, passages=1)

    async def follow_generations():
        while True:
            await asyncio.sleep(s.refresh_seconds)
            try:
                if await run_in_threadpool(index().refresh):
                    await run_in_threadpool(warm)
            except Exception as e:  # a damaged newer generation: keep serving the one we have
                log.warning("cannot move to the newest generation: %s", e)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state["index"] = await run_in_threadpool(api.open, index_path, False, device, trust_remote_code)
        await run_in_threadpool(warm)   # load every model now, not in the first user's request
        task = asyncio.create_task(follow_generations())
        try:
            yield
        finally:
            task.cancel()
            index().close()

    app = FastAPI(title="ldr", version=_version(), lifespan=lifespan,
                  description="Long-document retrieval: hybrid search with passages, filters, and a living index.")

    @app.middleware("http")
    async def observe(request: Request, call_next):
        t = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"   # templates, not ids: few label values
            metrics.observe(request.method, endpoint, status, time.perf_counter() - t)

    # -- errors: JSON, a 4xx for what the client can fix, never a traceback ------------------
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        problems = [f"{'.'.join(str(x) for x in e.get('loc', ()) if x != 'body')}: {e.get('msg')}" for e in exc.errors()]
        return _error(422, "invalid request: " + "; ".join(problems))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(QueryError)
    @app.exception_handler(ConfigError)
    @app.exception_handler(CorpusError)
    async def bad_request(request: Request, exc: LdrError):
        return _error(400, str(exc))

    @app.exception_handler(IndexLockedError)
    async def locked(request: Request, exc: IndexLockedError):
        return _error(409, str(exc))

    @app.exception_handler(LdrError)
    async def ldr_error(request: Request, exc: LdrError):
        return _error(500, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal error ({type(exc).__name__}); see the server log")

    def check_write(request: Request) -> None:
        if s.read_only:
            raise HTTPException(403, "this server is read-only (started with --read-only)")
        if s.api_key:
            given = request.headers.get("x-api-key") or ""
            auth = request.headers.get("authorization") or ""
            if auth.lower().startswith("bearer "):
                given = given or auth[7:].strip()
            if not hmac.compare_digest(given.encode(), s.api_key.encode()):
                raise HTTPException(401, "a valid API key is required for writes (X-API-Key or Authorization: Bearer)")

    # -- reading ---------------------------------------------------------------------------
    @app.get("/search")
    def search_get(request: Request):
        """`GET /search?q=...&k=10` (Pyserini's REST shape: `query=` and `hits=` work too); the
        scalar options as parameters; weights and filters need POST /search."""
        from pydantic import ValidationError

        try:
            req = SearchRequest.model_validate(_query_params(request.query_params))
        except ValidationError as e:
            raise RequestValidationError(e.errors()) from None
        return search(req)

    @app.post("/search")
    def search(req: SearchRequest):
        if len(req.query) > s.max_query_chars:
            raise HTTPException(413, f"the query has {len(req.query)} characters; this server takes at most "
                                     f"{s.max_query_chars}")
        if req.k > s.max_k:
            raise HTTPException(400, f"k must be at most {s.max_k}")
        if req.passages > s.max_passages:
            raise HTTPException(400, f"passages must be at most {s.max_passages}")
        if req.rerank_depth is not None and req.rerank_depth > s.max_rerank_depth:
            raise HTTPException(400, f"rerank_depth must be at most {s.max_rerank_depth}")
        t = time.perf_counter()
        options = req.model_dump(exclude={"query"})
        from ..search.query import prepare

        query = prepare(req.query)      # lone surrogates ("\ud800") become U+FFFD, as the README says
        res = index().search(query, **options)
        return {"query": query, "generation": res.generation, "took_ms": round(1e3 * (time.perf_counter() - t), 2),
                "reranker": res.reranker, "hits": [finite(h.to_dict(with_text=req.with_text)) for h in res]}

    @app.get("/documents/{doc_id:path}")
    def document(doc_id: str):
        ix = index()
        try:
            doc = ix.document(doc_id)
        except KeyError:
            raise HTTPException(404, f"no document {doc_id!r} in generation {ix.generation}") from None
        from ..search.hits import origin
        return {"id": doc.id, "title": doc.title, "text": doc.text, "meta": finite(doc.meta),
                **({"ldr": origin(doc)} if origin(doc) else {}), "generation": ix.generation}

    @app.get("/info")
    def info():
        return index().info()

    @app.get("/health")
    def health():
        ix = index()
        return {"status": "ok", "generation": ix.generation, "documents": len(ix), "read_only": s.read_only}

    @app.get("/metrics")
    def prometheus():
        ix = index()
        metrics.generation.set(ix.generation)
        metrics.documents.set(len(ix))
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    # -- writing ---------------------------------------------------------------------------
    @app.post("/documents")
    def add_documents(body: DocumentsIn, request: Request):
        check_write(request)
        if not body.documents:
            raise HTTPException(400, "no documents given")
        if len(body.documents) > s.max_documents:
            raise HTTPException(413, f"{len(body.documents)} documents in one request; at most {s.max_documents}")
        ids = [d.id for d in body.documents]
        if len(set(ids)) != len(ids):
            raise HTTPException(400, "the same id appears twice in one request")
        docs = []
        for d in body.documents:
            extra = dict(d.model_extra or {})    # any JSON value, as files and the API keep them
            bad = [k for k, v in {**extra, **(d.meta or {})}.items() if isinstance(v, float) and not math.isfinite(v)]
            if bad:   # NaN/Infinity would be stored and then break every JSON answer naming the document
                raise HTTPException(400, f"document {d.id!r}: metadata {', '.join(sorted(bad))} is not a finite "
                                         "number (NaN and Infinity are not JSON)")
            docs.append({"id": d.id, "text": d.text, "title": d.title, **extra, **(d.meta or {})})
        with write_lock:
            result = index().add(docs, wait=s.write_wait_seconds)
            warm()
        report = result.pop("report", None)
        # nothing is lost silently: every document is added, replaced or a counted skip with its reason
        reasons = {r: {"count": n, "examples": report.examples.get(r, [])} for r, n in report.skipped.items()} \
            if report is not None else {}
        return {"added": result["added"], "replaced": result["replaced"], "skipped": result["skipped"],
                "skip_reasons": reasons, "generation": result["generation"]}

    @app.post("/documents/delete")
    def delete_documents(body: IdsIn, request: Request):
        """Delete many documents in one commit (the shape of `Index.delete`)."""
        check_write(request)
        if len(body.ids) > s.max_documents:
            raise HTTPException(413, f"{len(body.ids)} ids in one request; at most {s.max_documents}")
        with write_lock:
            result = index().delete(body.ids, wait=s.write_wait_seconds)
            warm()
        return {"deleted": result["deleted"], "missing": result["missing"], "generation": result["generation"]}

    @app.delete("/documents/{doc_id:path}")
    def delete_document(doc_id: str, request: Request):
        check_write(request)
        with write_lock:
            result = index().delete([doc_id], wait=s.write_wait_seconds)
            warm()
        if result["missing"]:
            raise HTTPException(404, f"no document {doc_id!r}")
        return {"deleted": result["deleted"], "generation": result["generation"]}

    app.add_middleware(_BodyLimit, limit=s.max_body_bytes)
    return app


def _version() -> str:
    from .._version import __version__
    return __version__


def serve(index_path: str, host: str = "127.0.0.1", port: int = 8080, settings: ServerSettings | None = None,
          device: str | None = None, trust_remote_code: bool = False, log_level: str = "info") -> None:
    """Run the server until interrupted (uvicorn, one process: the models are loaded once)."""
    import uvicorn

    app = create_app(index_path, settings, device=device, trust_remote_code=trust_remote_code)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
