"""The server's routes: reading (search, documents, info, health, metrics) and writing (add,
delete), over the shared state of app.Served."""
from __future__ import annotations

import math
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException

from ..search.hits import finite
from .state import DocumentsIn, IdsIn, SearchRequest, Served, query_params
from .metrics import CONTENT_TYPE


PAGE = (Path(__file__).parent / "static" / "index.html").read_text(encoding="utf-8")


def add_read_routes(app: FastAPI, served: Served) -> None:
    s = served.settings

    @app.get("/search")
    def search_get(request: Request):
        """`GET /search?q=...&k=10` (Pyserini's REST shape: `query=` and `hits=` work too); the
        scalar options as parameters; weights and filters need POST /search."""
        from pydantic import ValidationError

        try:
            req = SearchRequest.model_validate(query_params(request.query_params))
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
        res = served.index().search(query, **options)
        return {"query": query, "generation": res.generation, "took_ms": round(1e3 * (time.perf_counter() - t), 2),
                "timings_ms": res.timings_ms, "reranker": res.reranker, "rounds": res.rounds,
                **({"missing_shards": res.missing_shards} if res.missing_shards else {}), "hits": [finite(h.to_dict(with_text=req.with_text)) for h in res]}

    @app.get("/documents/{doc_id:path}")
    def document(doc_id: str):
        ix = served.index()
        try:
            doc = ix.document(doc_id)
        except KeyError:
            raise HTTPException(404, f"no document {doc_id!r} in generation {ix.generation}") from None
        from ..search.hits import origin
        return {"id": doc.id, "title": doc.title, "text": doc.text, "meta": finite(doc.meta),
                **({"ldr": origin(doc)} if origin(doc) else {}), "generation": ix.generation}

    @app.get("/fields")
    def fields(top: int = 10):
        """The documents' metadata fields: per field the documents having it, its types, its `top`
        most common values with counts, a number's range (the page's field list; filters take them)."""
        if not 0 <= top <= 100:
            raise HTTPException(400, "top must be between 0 and 100")
        return finite(served.index().facets(top))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page():
        """A search page (plain HTML and a little JavaScript; no build step, nothing from a CDN)."""
        return HTMLResponse(PAGE, headers={"content-security-policy": "default-src 'self'; script-src 'unsafe-inline'; "
                                                                     "style-src 'unsafe-inline'"})

    @app.post("/plan")
    def plan(req: SearchRequest):
        """The plan a search with this request runs: its stages and where each setting came from."""
        from ..search.query import prepare

        p = served.index().plan(prepare(req.query), **req.model_dump(exclude={"query"}))
        return {**p.to_dict(), "explain": p.explain()}

    @app.get("/info")
    def info():
        return served.index().info()

    @app.get("/health")
    def health():
        ix = served.index()
        return {"status": "ok", "generation": ix.generation, "documents": len(ix), "read_only": s.read_only}

    @app.get("/metrics")
    def prometheus():
        ix = served.index()
        served.metrics.generation.set(ix.generation)
        served.metrics.documents.set(len(ix))
        return Response(served.metrics.render(), media_type=CONTENT_TYPE)



def add_write_routes(app: FastAPI, served: Served) -> None:
    s = served.settings

    @app.post("/documents")
    def add_documents(body: DocumentsIn, request: Request):
        served.check_write(request)
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
        with served.write_lock:
            result = served.index().add(docs, wait=s.write_wait_seconds)
            served.warm()
        report = result.pop("report", None)
        # nothing is lost silently: every document is added, replaced or a counted skip with its reason
        reasons = {r: {"count": n, "examples": report.examples.get(r, [])} for r, n in report.skipped.items()} \
            if report is not None else {}
        return {"added": result["added"], "replaced": result["replaced"], "skipped": result["skipped"],
                "skip_reasons": reasons, "generation": result["generation"]}

    @app.post("/documents/delete")
    def delete_documents(body: IdsIn, request: Request):
        """Delete many documents in one commit (the shape of `Index.delete`)."""
        served.check_write(request)
        if len(body.ids) > s.max_documents:
            raise HTTPException(413, f"{len(body.ids)} ids in one request; at most {s.max_documents}")
        with served.write_lock:
            result = served.index().delete(body.ids, wait=s.write_wait_seconds)
            served.warm()
        return {"deleted": result["deleted"], "missing": result["missing"], "generation": result["generation"]}

    @app.delete("/documents/{doc_id:path}")
    def delete_document(doc_id: str, request: Request):
        served.check_write(request)
        with served.write_lock:
            result = served.index().delete([doc_id], wait=s.write_wait_seconds)
            served.warm()
        if result["missing"]:
            raise HTTPException(404, f"no document {doc_id!r}")
        return {"deleted": result["deleted"], "generation": result["generation"]}

