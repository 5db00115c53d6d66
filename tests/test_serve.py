"""`ldr serve` as users start it (a real uvicorn process on 127.0.0.1), spoken to over real HTTP."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import ldr
from conftest import start_server, stop_server, wait_healthy

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

KEY = "test-key-123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, index, *args):
        env = {**os.environ, "LDR_API_KEY": ""}
        self.proc, self.url = start_server([sys.executable, "-m", "ldr.cli", "serve", "-i", str(index), *args], env)
        self.port = int(self.url.rsplit(":", 1)[1])
        self.http = httpx.Client(base_url=self.url, timeout=60)
        wait_healthy(self.http, self.proc)

    def stop(self) -> str:
        self.http.close()
        return stop_server(self.proc, 30)


def _docs(n=20):
    return [{"id": f"doc{i}", "text": f"report {i} on topic{i % 4} with bridges and rivers. " * 30
             + ("The secret word is ZEBRA-99. " if i == 7 else ""), "title": f"Report {i}",
             "team": "red" if i % 2 else "blue"} for i in range(n)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    idx = tmp_path_factory.mktemp("serve") / "idx"
    ldr.Index.build(_docs(), idx, bm25="native")      # every retriever: the models load in the server
    s = Server(idx, "--api-key", KEY, "--max-body-mb", "1")
    s.index = idx
    yield s
    log = s.stop()
    assert "Traceback" not in log, log


def _no_traceback(r):
    assert "Traceback" not in r.text and "File \"" not in r.text
    return r


def test_search_with_passages_filters_and_generation(server):
    r = server.http.post("/search", json={"query": "secret word zebra", "k": 3, "passages": 2})
    assert r.status_code == 200
    body = r.json()
    hit = body["hits"][0]
    assert hit["id"] == "doc7" and "ZEBRA-99" in hit["passages"][0]["text"] and "text" not in hit
    text = server.http.get("/documents/doc7").json()["text"]
    assert all(text[p["start"]:p["end"]] == p["text"] for p in hit["passages"])
    assert isinstance(body["generation"], int) and body["took_ms"] > 0
    r = server.http.post("/search", json={"query": "bridges rivers", "k": 20, "filters": {"team": "red"}})
    assert {h["meta"]["team"] for h in r.json()["hits"]} == {"red"} and len(r.json()["hits"]) == 10
    r = server.http.post("/search", json={"query": "bridges", "k": 2, "mode": "bm25", "with_text": True, "passages": 0})
    assert r.json()["hits"][0]["text"].startswith("report") and "passages" not in r.json()["hits"][0]


def test_min_score_is_honoured_by_the_server(server):
    every = server.http.post("/search", json={"query": "secret word zebra", "k": 10}).json()["hits"]
    rel = sorted(h["relevance"] for h in every)
    cut = rel[len(rel) // 2]
    kept = server.http.post("/search", json={"query": "secret word zebra", "k": 10, "min_score": cut}).json()["hits"]
    assert [h["id"] for h in kept] == [h["id"] for h in every if h["relevance"] >= cut] and 0 < len(kept) < len(every)
    r = _no_traceback(server.http.post("/search", json={"query": "zebra", "min_score": 2}))
    assert r.status_code in (400, 422) and "min_score" in r.text


@pytest.mark.parametrize("payload,status,words", [
    ({"query": ""}, 400, "empty"),
    ({"query": "x", "k": 0}, 422, "k"),
    ({"query": "x", "k": 5000}, 400, "at most"),
    ({"query": "x" * 9000}, 413, "characters"),
    ({"query": "x", "passages": 99}, 400, "passages"),
    ({"query": "x", "mode": "magic"}, 400, "unknown mode"),
    ({"query": "x", "filters": {"colour": "red"}}, 400, "no document has the field"),
    ({"query": "x", "filters": {"team": {"~": 1}}}, 400, "operator"),
    ({"query": "x", "weights": {"bm25": -1}}, 400, "weight"),
    ({"qeury": "x"}, 422, "query"),
])
def test_bad_searches_get_json_errors(server, payload, status, words):
    r = _no_traceback(server.http.post("/search", json=payload))
    assert r.status_code == status and words in r.json()["error"]


def test_malformed_and_oversized_requests(server):
    r = _no_traceback(server.http.post("/search", content=b"{not json", headers={"content-type": "application/json"}))
    assert r.status_code == 422 and "error" in r.json()
    big = json.dumps({"query": "x", "filters": {"team": "y" * (2 << 20)}})
    r = _no_traceback(server.http.post("/search", content=big, headers={"content-type": "application/json"}))
    assert r.status_code == 413
    r = _no_traceback(server.http.get("/no/such/endpoint"))
    assert r.status_code == 404 and "error" in r.json()
    r = _no_traceback(server.http.get("/documents/nope"))
    assert r.status_code == 404 and "nope" in r.json()["error"]


def test_writes_need_the_key_and_are_searchable_at_once(server):
    doc = {"id": "new/1", "text": "a memo about the quokka colony on the island", "team": "green"}
    r = _no_traceback(server.http.post("/documents", json={"documents": [doc]}))
    assert r.status_code == 401
    r = server.http.post("/documents", json={"documents": [doc]}, headers={"X-API-Key": "wrong"})
    assert r.status_code == 401
    r = server.http.post("/documents", json={"documents": [doc, {"id": "empty", "text": "  "}]},
                         headers={"X-API-Key": KEY})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["added"] == 1 and body["skipped"] == 1 and "empty document" in body["skip_reasons"]
    hits = server.http.post("/search", json={"query": "quokka colony", "k": 1}).json()
    assert hits["hits"][0]["id"] == "new/1" and hits["generation"] == body["generation"]
    assert server.http.get("/documents/new%2F1").json()["meta"]["team"] == "green"
    # replace, then delete (Bearer works too)
    auth = {"Authorization": f"Bearer {KEY}"}
    r = server.http.post("/documents", json={"documents": [dict(doc, text="now about wombats")]}, headers=auth)
    assert r.json()["replaced"] == ["new/1"]
    r = server.http.delete("/documents/new%2F1", headers=auth)
    assert r.status_code == 200 and r.json()["deleted"] == ["new/1"]
    assert server.http.delete("/documents/new%2F1", headers=auth).status_code == 404
    assert server.http.delete("/documents/doc1").status_code == 401
    r = _no_traceback(server.http.post("/documents", json={"documents": [doc, doc]}, headers=auth))
    assert r.status_code == 400 and "twice" in r.json()["error"]
    r = _no_traceback(server.http.post("/documents", json={"documents": [{"id": "x"}]}, headers=auth))
    assert r.status_code == 422


def test_info_health_metrics_and_openapi(server):
    health = server.http.get("/health").json()
    assert health["status"] == "ok" and health["documents"] >= 20
    info = server.http.get("/info").json()
    assert info["generation"] == health["generation"] and "dense" in info["components"]
    m = server.http.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    assert 'ldr_requests_total{endpoint="/search",method="POST",status="200"}' in text
    assert "ldr_request_seconds_bucket" in text and "ldr_errors_total" in text
    assert f"ldr_index_generation {float(health['generation'])}" in text
    docs = server.http.get("/docs")      # Swagger UI from the installed package: nothing from a CDN
    assert docs.status_code == 200 and "/docs-assets/swagger-ui-bundle.js" in docs.text and "cdn" not in docs.text.lower()
    js = server.http.get("/docs-assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    assert "/search" in server.http.get("/openapi.json").json()["paths"]


def test_the_server_follows_generations_committed_by_other_processes(server, tmp_path):
    before = server.http.get("/health").json()["generation"]
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "platypus.txt").write_text("the platypus lays eggs and hunts under water")
    subprocess.run([sys.executable, "-m", "ldr.cli", "add", str(corpus), "-i", str(server.index), "--wait"],
                   check=True, capture_output=True)
    deadline = time.time() + 30
    while server.http.get("/health").json()["generation"] == before and time.time() < deadline:
        time.sleep(0.2)
    r = server.http.post("/search", json={"query": "platypus eggs", "k": 1}).json()
    assert r["generation"] > before and r["hits"][0]["id"] == "platypus.txt"


def test_searches_during_concurrent_adds_never_mix_generations(server):
    """Searches run while POST /documents commits: every answer is whole and from one generation
    (its hits are exactly the documents that generation holds)."""
    live_at: dict[int, set] = {}
    g0 = server.http.get("/health").json()["generation"]
    errors, answers, stop = [], [], threading.Event()

    def searcher():
        with httpx.Client(base_url=server.url, timeout=60) as c:
            while not stop.is_set():
                r = c.post("/search", json={"query": "batch marker", "k": 50, "mode": "bm25", "passages": 0})
                if r.status_code != 200:
                    errors.append(r.text)
                else:
                    answers.append(r.json())

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    for t in threads:
        t.start()
    added = set()
    try:
        for b in range(3):
            batch = [{"id": f"batch{b}-{i}", "text": f"batch marker {b} document {i}"} for i in range(5)]
            r = server.http.post("/documents", json={"documents": batch}, headers={"X-API-Key": KEY})
            assert r.status_code == 200, r.text
            added |= {d["id"] for d in batch}
            live_at[r.json()["generation"]] = set(added)
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors and len(answers) > 10
    seen = set()
    for a in answers:
        ids = {h["id"] for h in a["hits"]}
        g = a["generation"]
        seen.add(g)
        if g in live_at:
            assert ids == live_at[g]
        elif g < min(live_at):
            assert ids == set() or g == g0
    assert len(seen) >= 2      # the searches did cross commits


def test_client_and_framework_retrievers_against_the_server(server):
    from ldr.integrations.langchain import LdrRetriever as LangchainRetriever
    from ldr.integrations.llamaindex import LdrRetriever as LlamaRetriever
    from ldr.serve.client import Client

    with Client(server.url, api_key=KEY) as c:
        hits = c.search("secret word zebra", k=2, passages=1)
        assert hits[0].id == "doc7" and "ZEBRA-99" in hits[0].passages[0].text and hits.generation >= 1
        assert c.document("doc7").title == "Report 7"
        with pytest.raises(KeyError):
            c.document("nope")
        with pytest.raises(ldr.ConfigError):
            Client(server.url).add([{"id": "z", "text": "no key"}])
        with pytest.raises(ldr.errors.QueryError):
            c.search("")
    docs = LangchainRetriever(url=server.url, k=2, passages=1).invoke("secret word zebra")
    assert docs[0].metadata["doc_id"] == "doc7" and "ZEBRA-99" in docs[0].page_content
    nodes = LlamaRetriever(url=server.url, k=2, passages=1, filters={"team": "red"}).retrieve("secret word zebra")
    assert nodes[0].node.metadata["doc_id"] == "doc7" and all(n.node.metadata["team"] == "red" for n in nodes)
    with pytest.raises(ldr.LdrError, match="cannot reach"):
        Client("http://127.0.0.1:1").search("x")


def _wait_for_generation_after(server, before):
    deadline = time.time() + 30
    while server.http.get("/health").json()["generation"] == before and time.time() < deadline:
        time.sleep(0.2)


def test_rerank_settings_travel_with_a_request(server):
    """rerank_depth / rerank_weight / rerank_windows reach the search: with the index reranking by
    default, depth says which candidates get a rerank score and weight 0 keeps the first stage's order."""
    from ldr.serve.client import Client

    ix = ldr.open(server.index)
    old = dict(ix.manifest.get("search", {}))
    before = server.http.get("/health").json()["generation"]
    ix.set_search_defaults({**old, "rerank": "passage"})
    _wait_for_generation_after(server, before)
    try:
        q = {"query": "bridges and rivers on topic3", "k": 8, "passages": 0}
        first_stage = [h["id"] for h in server.http.post("/search", json={**q, "rerank": False}).json()["hits"]]
        reranked = server.http.post("/search", json=q).json()
        assert reranked["reranker"] and all("reranked" in h["scores"] for h in reranked["hits"])
        shallow = server.http.post("/search", json={**q, "rerank_depth": 3}).json()["hits"]
        assert [("reranked" in h["scores"]) for h in shallow] == [True] * 3 + [False] * 5
        kept = server.http.post("/search", json={**q, "rerank_weight": 0, "rerank_windows": 2}).json()["hits"]
        assert [h["id"] for h in kept] == first_stage
        with Client(server.url) as c:
            assert sum("reranked" in h.scores for h in c.search(q["query"], k=8, rerank_depth=2)) == 2
        for bad, status in [({"rerank_depth": 5000}, 400), ({"rerank_weight": 1.5}, 422), ({"rerank_windows": 0}, 422)]:
            r = _no_traceback(server.http.post("/search", json={**q, **bad}))
            assert r.status_code == status and next(iter(bad)) in r.text
    finally:
        before = server.http.get("/health").json()["generation"]
        ix.set_search_defaults(old)
        _wait_for_generation_after(server, before)


def test_a_read_only_server_refuses_writes(tmp_path):
    idx = tmp_path / "ro"
    ldr.Index.build(_docs(4), idx, dense=None, sparse=None)
    s = Server(idx, "--read-only")
    try:
        r = _no_traceback(s.http.post("/documents", json={"documents": [{"id": "a", "text": "b"}]}))
        assert r.status_code == 403 and "read-only" in r.json()["error"]
        assert s.http.delete("/documents/doc1").status_code == 403
        assert s.http.post("/search", json={"query": "bridges", "k": 1}).status_code == 200
    finally:
        assert "Traceback" not in s.stop()


def test_serve_says_which_option_to_change_when_it_cannot_bind(tmp_path):
    # 198.51.100.7 (TEST-NET-2, for documentation) is no address of this machine
    r = subprocess.run([sys.executable, "-m", "ldr.cli", "serve", "-i", str(tmp_path), "--host", "198.51.100.7",
                        "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--host" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_serve_reports_a_bad_index_before_starting(tmp_path):
    r = subprocess.run([sys.executable, "-m", "ldr.cli", "serve", "-i", str(tmp_path / "missing"), "--port",
                        str(_free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr


def test_get_search_and_deleting_many_ids_in_one_shape(server):
    """`curl '.../search?q=...'` works (Pyserini's REST shape too); Client.delete takes one id or a
    list and answers as Index.delete does."""
    from ldr.serve.client import Client

    r = server.http.get("/search", params={"q": "secret word zebra", "k": 2, "passages": 1})
    assert r.status_code == 200 and r.json()["hits"][0]["id"] == "doc7" and len(r.json()["hits"]) == 2
    r = server.http.get("/search", params={"query": "secret word zebra", "hits": 1})
    assert r.status_code == 200 and len(r.json()["hits"]) == 1
    r = server.http.get("/search", params={"q": "zebra", "k": "many"})
    assert r.status_code == 422 and "error" in r.json()
    with Client(server.url, api_key=KEY) as c:
        c.add([{"id": "del-a", "text": "a pangolin"}, {"id": "del-b", "text": "another pangolin"}])
        out = c.delete(["del-a", "del-b", "del-none"])
        assert out["deleted"] == ["del-a", "del-b"] and out["missing"] == ["del-none"] and out["generation"] >= 1
        assert c.delete("del-none")["missing"] == ["del-none"]
        assert all(h.id not in ("del-a", "del-b") for h in c.search("pangolin", k=5))


def test_the_front_door_refuses_other_hosts_and_cross_site_writes(server):
    """Issue 57 item 6 (DNS rebinding): on 127.0.0.1 a request naming another host is refused before
    any route runs, and a write from another site's page (its Origin) too, key or not; the server's
    own names and pages still work."""
    doc = {"documents": [{"id": "rebind", "text": "a page tried to write this"}]}
    r = server.http.post("/documents", json=doc, headers={"Host": "attacker.example", "X-API-Key": KEY,
                                                          "Origin": "http://attacker.example"})
    assert r.status_code == 400 and "does not answer to the host" in r.json()["error"]
    r = server.http.post("/documents", json=doc, headers={"X-API-Key": KEY, "Origin": "http://attacker.example"})
    assert r.status_code == 403 and "another site" in r.json()["error"]
    assert server.http.get("/search", params={"q": "rebind"}, headers={"Host": "attacker.example"}).status_code == 400
    assert server.http.get("/health", headers={"Host": f"localhost:{server.port}"}).status_code == 200
    r = server.http.post("/search", json={"query": "bridges", "k": 1},
                         headers={"Origin": f"http://127.0.0.1:{server.port}"})
    assert r.status_code == 200
    assert server.http.get("/documents/rebind").status_code == 404


def _raw(port: int, path: str, declared: int, send: int):
    import socket

    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {declared}\r\n\r\n".encode() + b" " * send)
    return s


def _status(s, timeout: float = 10.0) -> int:
    s.settimeout(timeout)
    got = s.recv(200).decode("latin-1")
    s.close()
    return int(got.split()[1])


def test_slow_and_large_bodies_cannot_take_the_servers_memory(tmp_path):
    """Issue 57 item 2: a body that stalls is dropped (408); all unfinished bodies together are
    bounded (503 past it); a request other than POST /documents takes at most 1 MB (413)."""
    idx = tmp_path / "idx"
    ldr.Index.build(_docs(4), idx, dense=None, sparse=None)
    s = Server(idx, "--max-body-mb", "4", "--max-pending-mb", "2", "--body-stall-seconds", "1.5")
    try:
        t = time.time()
        stalled = _raw(s.port, "/documents", 3 << 20, 1 << 20)            # 1 of 3 MB, then nothing
        assert _status(stalled) == 408 and time.time() - t < 8
        a = _raw(s.port, "/documents", 3 << 20, 3 << 19)                  # 1.5 MB held, still sending
        time.sleep(0.3)
        b = _raw(s.port, "/documents", 3 << 20, 1 << 20)                 # past the 2 MB all bodies may hold
        assert _status(b) == 503
        assert _status(a) == 408
        big_search = _raw(s.port, "/search", 2 << 20, 2 << 20)
        assert _status(big_search) == 413
        assert s.http.post("/search", json={"query": "bridges", "k": 1}).status_code == 200
    finally:
        assert "Traceback" not in s.stop()
