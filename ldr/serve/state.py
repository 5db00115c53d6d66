"""What the server's routes share: its limits (ServerSettings), the request models derived from
the options schema, and the served index (Served)."""
from __future__ import annotations

import asyncio
import hmac
import logging
import threading

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from .metrics import Metrics

from .limits import API_KEY_ENV, ServerSettings  # noqa: F401  (re-exported)

log = logging.getLogger("ldr.serve")


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


def query_params(params) -> dict:
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


class Served:
    """What the routes share: the open index (moved to newer generations in the background), the
    server's limits, its metrics and the one-write-at-a-time lock."""

    def __init__(self, settings: ServerSettings):
        self.settings, self.metrics = settings, Metrics()
        self.state: dict = {}
        self.write_lock = threading.Lock()   # one write at a time here; other processes wait on the index lock

    def index(self):
        return self.state["index"]

    def warm(self) -> None:
        """Load the components of the generation just opened, off any user's request."""
        if self.settings.warm_up:
            self.index().search("warm up", k=1, passages=1)

    def check_write(self, request: Request) -> None:
        s = self.settings
        if s.read_only:
            raise HTTPException(403, "this server is read-only (started with --read-only)")
        if s.api_key:
            given = request.headers.get("x-api-key") or ""
            auth = request.headers.get("authorization") or ""
            if auth.lower().startswith("bearer "):
                given = given or auth[7:].strip()
            if not hmac.compare_digest(given.encode(), s.api_key.encode()):
                raise HTTPException(401, "a valid API key is required for writes (X-API-Key or Authorization: Bearer)")

    async def follow_generations(self):
        while True:
            await asyncio.sleep(self.settings.refresh_seconds)
            try:
                if await run_in_threadpool(self.index().refresh):
                    await run_in_threadpool(self.warm)
            except Exception as e:  # a damaged newer generation: keep serving the one we have
                log.warning("cannot move to the newest generation: %s", e)


