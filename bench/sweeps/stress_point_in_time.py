"""The server point-in-time test (tests/test_point_in_time.py) as a long stress, with the server's
and the writer's threads switching as often as asked: how the rare "cannot be loaded: SystemError:
AST constructor recursion depth mismatch" 500 was reproduced (bench/README.md, twelfth session).

    python bench/sweeps/stress_point_in_time.py [--seconds 150] [--switch 2e-5] [--runs 2] [--clients 3]

Each run builds a 3-shard index in a temporary folder, starts `ldr serve` on it and a writer that
adds and deletes one document per commit, and checks every answer against the generation it names.
`--switch 0` leaves Python's default (5 ms). Prints one line per run: answers, generations, wrong,
errors (the first three in full), and the server log's warnings.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"


def run(folder: Path, seconds: float, clients: int) -> str:
    os.environ["LDR_PIT_SECONDS"] = str(seconds)
    sys.path.insert(0, str(TESTS))
    import httpx
    import test_point_in_time as pit
    from test_serve import Server

    pit._build(folder)
    server = Server(folder / "idx")
    http = httpx.Client(base_url=server.url, timeout=60)

    def search(n, rnd):
        r = http.post("/search", json={"query": f"zq{n}", "k": 3, "mode": "bm25"})
        assert r.status_code == 200, r.text
        body = r.json()
        return [(body["generation"], [h["id"] for h in body["hits"]], pit._one)]

    try:
        answers = pit._beside_a_writer(folder, search, seconds, threads=clients)
        out = f"OK: {answers} answers, 0 wrong, 0 errors"
    except AssertionError as e:
        out = f"FAILED: {str(e)[:3000]}"
    finally:
        http.close()
        log = server.stop()
    warnings = [line for line in log.splitlines() if "warning" in line.lower()]
    return out + f"\nserver warnings: {warnings[:5]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--switch", type=float, default=2e-5, help="sys.setswitchinterval of the server and the writer")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--clients", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ldr-pit-") as tmp:
        if a.switch:
            site = Path(tmp) / "site"
            site.mkdir()
            (site / "sitecustomize.py").write_text(f"import sys\nsys.setswitchinterval({a.switch!r})\n")
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        for i in range(a.runs):
            print(f"run {i + 1}: " + run(Path(tmp) / f"run{i}", a.seconds, a.clients), flush=True)


if __name__ == "__main__":
    main()
