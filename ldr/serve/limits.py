"""A server's limits, each written once (`ldr serve`'s flags take their defaults from here).
Imports no server package, so the CLI can read them without the server extra."""
from __future__ import annotations

from dataclasses import dataclass

API_KEY_ENV = "LDR_API_KEY"


@dataclass
class ServerSettings:
    api_key: str | None = None          # required by write endpoints when set
    read_only: bool = False             # write endpoints answer 403
    max_body_bytes: int = 32 << 20      # POST /documents (documents being added)
    max_request_bytes: int = 1 << 20    # any other request (a search, a delete by ids)
    max_pending_bytes: int = 96 << 20   # all unfinished request bodies together
    body_stall_seconds: float = 15.0    # a body that sends nothing for this long is dropped (408)
    max_query_chars: int = 8192
    max_k: int = 1000
    max_passages: int = 20
    max_rerank_depth: int = 1000        # candidates a search may ask the reranker to score
    max_documents: int = 1000           # per POST /documents
    refresh_seconds: float = 1.0        # how often to look for generations committed elsewhere
    write_wait_seconds: float = 30.0    # how long a write waits for another writer's lock
    warm_up: bool = True
    host: str = "127.0.0.1"             # the address it is bound to: the Host a request must name
    allowed_hosts: tuple = ()           # other names it answers to (a proxy's, a machine's DNS name)
