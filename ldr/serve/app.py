"""The HTTP server of one index (FastAPI; `ldr serve` runs it under uvicorn).

Models load once, at start-up, before the server accepts requests. Search and writes run in the
worker thread pool, never on the event loop. Every search reads one generation from start to end
(the `generation` field of its answer says which); a background task moves the server to
generations other processes commit. Errors are JSON `{"error": ...}` with a 4xx code for a bad
request, and never carry a traceback.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from contextlib import asynccontextmanager


from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import ConfigError, CorpusError, IndexLockedError, LdrError, QueryError
from .origin import send_json
from .state import (API_KEY_ENV, DocumentIn, DocumentsIn, IdsIn, SearchRequest, Served,  # noqa: F401  (re-exported)
                    ServerSettings, query_params)

log = logging.getLogger("ldr.serve")


class _BodyLimit:
    """Request bodies, read before the application parses them: over `limit` bytes (POST
    /documents) or `small` (every other request: a search, a delete by ids) is 413; a body that
    stalls for `stall_s` is 408; and all unfinished bodies together hold at most `pending` bytes
    (503 past it), so slow clients withholding their last bytes cannot take the server's memory.
    A large body's memory goes back to the system once its request is done."""

    def __init__(self, app, limit: int, small: int, pending: int, stall_s: float):
        self.app, self.limit, self.small, self.pending, self.stall_s = app, limit, small, pending, stall_s
        self.held = 0          # bytes buffered by unfinished requests (one event loop: no lock)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit if scope.get("method") == "POST" and scope.get("path") == "/documents" else self.small
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await send_json(send, 413, {"error": f"request body over {limit} bytes"})
        chunks, size, more = [], 0, True
        try:
            while more:
                try:
                    message = await asyncio.wait_for(receive(), self.stall_s)
                except asyncio.TimeoutError:
                    return await send_json(send, 408, {"error": f"the request body stalled for {self.stall_s:g} s"})
                if message["type"] != "http.request":
                    return
                chunk = message.get("body", b"")
                if size + len(chunk) > limit:
                    return await send_json(send, 413, {"error": f"request body over {limit} bytes"})
                if self.held + len(chunk) > self.pending:
                    return await send_json(send, 503, {"error": "too many unfinished request bodies; retry later"})
                chunks.append(chunk)
                size += len(chunk)
                self.held += len(chunk)
                more = message.get("more_body", False)
            body, replayed = b"".join(chunks), False
            chunks.clear()

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await self.app(scope, replay, send)
        finally:
            self.held -= size
            if size > 1 << 20:
                chunks.clear()
                _trim()


def _trim() -> None:
    """Hand freed heap back to the system (glibc keeps a large body's pages otherwise)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _error(status: int, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def create_app(index_path: str, settings: ServerSettings | None = None, *, device: str | None = None,
               trust_remote_code: bool = False, opener=None) -> FastAPI:
    """The FastAPI application serving the index at `index_path` (opened at start-up; `opener()`
    opens it instead: `ldr serve --ray` searches the shards on a Ray Serve application)."""
    from .. import sharded

    opener = opener or (lambda: sharded.open(index_path, False, device, trust_remote_code))
    from .routes import add_read_routes, add_write_routes

    s = settings or ServerSettings()
    if s.api_key is None:
        s.api_key = os.environ.get(API_KEY_ENV) or None
    served = Served(s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        served.state["index"] = await run_in_threadpool(opener)
        await run_in_threadpool(served.warm)   # load every model now, not in the first user's request
        if not s.read_only and s.warm_up:
            await run_in_threadpool(served.index().load_write_encoders)     # and the writers' models
        task = asyncio.create_task(served.follow_generations())
        try:
            yield
        finally:
            task.cancel()
            served.index().close()

    # /docs is served from fastapi-offline's Swagger UI files, not FastAPI's CDN: it works offline
    app = FastAPI(title="ldr", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Long-document retrieval: hybrid search with passages, filters, and a living index.")
    add_api_docs(app)

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
            served.metrics.observe(request.method, endpoint, status, time.perf_counter() - t)

    add_error_handlers(app)
    add_read_routes(app, served)
    add_write_routes(app, served)
    app.add_middleware(_BodyLimit, limit=s.max_body_bytes, small=min(s.max_body_bytes, s.max_request_bytes),
                       pending=s.max_pending_bytes, stall_s=s.body_stall_seconds)
    from .origin import HostCheck, allowed_hosts
    app.add_middleware(HostCheck, hosts=allowed_hosts(s.host, s.allowed_hosts))    # outermost: checked first
    return app


def add_api_docs(app: FastAPI) -> bool:
    """Swagger UI at /docs from the files of the locally installed fastapi-offline (the [server]
    extra; its static folder is read as data, its code is not used); without it there is no /docs
    (the OpenAPI schema stays at /openapi.json). True when served."""
    assets = swagger_assets()
    if assets is None:
        return False
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    app.mount("/docs-assets", StaticFiles(directory=str(assets)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title="ldr API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png")
    return True


def swagger_assets():
    """The folder of Swagger UI 5's files (fastapi-offline's static folder), or None."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def add_error_handlers(app: FastAPI) -> None:
    """Errors as JSON: a 4xx for what the client can fix, never a traceback."""

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


def _version() -> str:
    from .._version import __version__
    return __version__


def serve(index_path: str, host: str = "127.0.0.1", port: int = 8080, settings: ServerSettings | None = None,
          device: str | None = None, trust_remote_code: bool = False, log_level: str = "info", opener=None,
          sock=None) -> None:
    """Run the server until interrupted (uvicorn, one process: the models are loaded once). `sock`: a
    socket already bound (`ldr serve` binds before it loads anything); else uvicorn binds host:port."""
    import uvicorn

    app = create_app(index_path, settings, device=device, trust_remote_code=trust_remote_code, opener=opener)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
