"""The point-in-time check on Ray Serve (issue 79): a local Ray cluster of two 1-CPU nodes
(ray.cluster_utils.Cluster), `ldr serve --ray ADDRESS --replicas 2 --replica-root FOLDER` over a
3-shard index, and a writer in another process committing an add or a delete as fast as it can
for `--seconds` (tests/test_point_in_time.py's writer: each commit collects what no reader or
lease holds). Client threads search meanwhile; every answer is checked against the generation it
names, and an answer with `missing_shards`, an HTTP error or a timeout counts as an error.

    python bench/stress_ray_point_in_time.py [--seconds 60] [--clients 3] [--replicas 2]

Prints answers, generations, wrong answers and errors (the first three in full).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=2)
    a = ap.parse_args()
    sys.path.insert(0, str(TESTS))
    import httpx
    import ray
    from ray.cluster_utils import Cluster

    import test_point_in_time as pit
    from conftest import wait_healthy
    from test_serve import _free_port

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    proc = http = None
    with tempfile.TemporaryDirectory(prefix="ldr-ray-pit-") as tmp:
        folder = Path(tmp)
        try:
            pit._build(folder)
            (folder / "node-disk").mkdir()
            port = _free_port()
            proc = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(folder / "idx"), "--port",
                                     str(port), "--ray", cluster.address, "--replicas", str(a.replicas),
                                     "--replica-root", str(folder / "node-disk"), "--read-only"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "LDR_API_KEY": ""})
            http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
            t = time.monotonic()
            wait_healthy(http, proc, 300)
            print(f"serving after {time.monotonic() - t:.1f} s", flush=True)

            try:
                pit._beside_a_writer(folder, pit.over_http(http), a.seconds, threads=a.clients)
            except AssertionError as e:
                print(f"FAILED: {str(e)[:3000]}")
        finally:
            if http is not None:
                http.close()
            if proc is not None:
                proc.terminate()
                out, _ = proc.communicate(timeout=60)
                print("server warnings:", [line for line in out.splitlines() if "warning" in line.lower()][:5])
            ray.shutdown()
            cluster.shutdown()


if __name__ == "__main__":
    main()
