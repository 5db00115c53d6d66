"""The server's front door against DNS rebinding and cross-site requests (as Jupyter and dev
servers do): a request must name this server in its Host header (the address it is bound to, its
local names, or one the user allows with `--allowed-host`), and a write that carries an Origin
must come from one of those hosts. A page on attacker.example whose name was rebound to 127.0.0.1
sends `Host: attacker.example` and is refused before any route runs."""
from __future__ import annotations

from urllib.parse import urlsplit

LOCAL = ("127.0.0.1", "localhost", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")
SAFE_METHODS = (b"GET", b"HEAD", b"OPTIONS")


def allowed_hosts(bound: str, extra: tuple[str, ...] = ()) -> set[str] | None:
    """Host names a request may use (None: any, for a server bound to every interface with no
    `--allowed-host`: its writes need an API key there)."""
    if bound in WILDCARD_BINDS and not extra:
        return None
    hosts = {h.lower().strip("[]") for h in extra}
    hosts.add(bound.lower().strip("[]"))
    if bound in LOCAL:
        hosts.update(LOCAL)
    return hosts


def _host_of(value: str) -> str:
    """`name`, `name:port`, `[v6]:port` → the name alone, lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.index("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


async def send_json(send, status: int, payload: dict) -> None:
    """A JSON answer straight from ASGI middleware (before any route runs)."""
    import json

    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HostCheck:
    """ASGI middleware: 400 for a Host this server does not answer to, 403 for a cross-origin write."""

    def __init__(self, app, hosts: set[str] | None):
        self.app, self.hosts = app, hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.hosts is None:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        host = _host_of(headers.get(b"host", b"").decode("latin-1"))
        if host not in self.hosts:
            return await send_json(send, 400, {"error": f"this server does not answer to the host {host!r} "
                                                "(start it with --allowed-host NAME to allow a name)"})
        origin = headers.get(b"origin")
        if origin is not None and scope.get("method", "GET").encode() not in SAFE_METHODS:
            name = urlsplit(origin.decode("latin-1")).hostname or ""
            if name.lower() not in self.hosts:
                return await send_json(send, 403, {"error": "writes from another site's page are refused "
                                                    f"(Origin {origin.decode('latin-1')!r})"})
        return await self.app(scope, receive, send)
