import json
import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "corpora" / "sample"
SHARED = ROOT.parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# `ldr search`'s table fits COLUMNS when it is set: tests that read the table see it uncut unless
# they set a width themselves
os.environ.pop("COLUMNS", None)
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")     # the tests' own clusters too (as ldr's)
# ONNX exports go to the checkout's own cache (git-ignored), not the user's, and stay there between
# runs: an export is keyed by the weights' hash, the export code's version and the int8 settings,
# so a changed model or exporter exports again and an unchanged one is never exported twice. CLI
# subprocesses inherit it. LDR_TEST_FRESH_CACHE=1 uses a throwaway cache instead.
if "LDR_CACHE_DIR" not in os.environ:
    if os.environ.get("LDR_TEST_FRESH_CACHE"):
        import atexit
        import shutil
        os.environ["LDR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ldr-test-cache-")
        atexit.register(shutil.rmtree, os.environ["LDR_CACHE_DIR"], True)   # exports are 100s of MB
    else:
        os.environ["LDR_CACHE_DIR"] = str(ROOT / ".pytest_cache" / "ldr")


# The README runs the suite on two xdist workers: one mostly waits (Ray clusters, servers, child
# processes) while the other computes. Each worker's encoders get its share of the CPUs: on 2 cores,
# two threads per worker ran no faster than one (307.8 s against 306.9 s, bench/README.md).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    _cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _share = str(max(1, _cpus // WORKERS))
    os.environ.setdefault("LDR_THREADS", _share)
    os.environ.setdefault("OMP_NUM_THREADS", _share)

# Modules that run in sequence on one worker, the lanes first and in this order, each lane's
# modules in its order; every other module is a unit of its own (LONGEST_FIRST, then file order). "models": the
# modules that load the large models (multilingual-e5 and its one-time export first, the trainings
# of MiniLM, the exports), so that their memory peaks never meet. "light": modules that load no
# PyTorch model, beside e5's export (a 2.7 GB child process). "ray": one local Ray cluster at a time.
LANES = {
    "models": ("test_language_defaults", "test_multilingual", "test_bf16", "test_onnx", "test_train", "test_tune"),
    "light": ("test_architecture", "test_bounds", "test_cli", "test_compare", "test_components", "test_corpus",
              "test_docs", "test_fusion", "test_index", "test_open", "test_options", "test_runs_edges",
              "test_sync_and_messages", "test_window_stage", "test_bad_input", "test_bm25"),
    "ray": ("test_ray", "test_ray_processes", "test_ray_serve"),
}
LANE_OF = {m: lane for lane, mods in LANES.items() for m in mods}
# The other modules go out longest first (their order in a 2-core run: 37 s down to 3 s), so that the
# run does not end on one worker with a long module while the other has finished.
LONGEST_FIRST = ("test_sharded", "test_living_index", "test_serve", "test_point_in_time", "test_dense",
                 "test_compressed", "test_rag", "test_eval", "test_colbert", "test_relevance", "test_reliability",
                 "test_page", "test_threads", "test_documents", "test_extend", "test_frameworks",
                 "test_check_beside_a_writer", "test_first_hour", "test_safety", "test_hybrid")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rpartition("/")[2].removesuffix(".py")


def _unit(nodeid: str) -> str:
    return LANE_OF.get(_module(nodeid), _module(nodeid))


def pytest_collection_modifyitems(config, items):
    lanes = list(LANES)

    def place(item):
        module = _module(item.nodeid)
        lane = LANE_OF.get(module)
        if lane:
            return lanes.index(lane), LANES[lane].index(module)
        return len(lanes), LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=place)       # stable: a module's tests, and the other modules, keep their order


@pytest.hookimpl(tryfirst=True, optionalhook=True)     # before xdist's own, which schedules by --dist
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        """xdist's --dist loadfile, with a lane of modules as one unit and the units in order."""

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False      # xdist would sort the units by their count of tests
    return Lanes(config, log)


def pytest_configure(config):
    # the suite meets some 20 model settings in one process; ldr keeps 8 loaded by default, which
    # held the suite's peak at 4.7 GB. Three hold what one test module uses at once.
    from ldr.components import ENCODERS
    ENCODERS.max_models = 3
    if "PYTEST_XDIST_WORKER" not in os.environ:
        # ldr's bytecode, written once: the suite starts some 100 Python processes (CLI runs, export
        # children, Ray workers, servers), and with PYTHONDONTWRITEBYTECODE set each compiled ldr again
        import compileall
        compileall.compile_dir(str(ROOT / "ldr"), quiet=1)
    # pytest rewrites the asserts of every package that declares a pytest plugin, whenever it is
    # imported, plugin disabled or not: langsmith (which langchain imports) is 223 modules, 0.6 s of
    # each worker's collection. Their asserts are not tests (langchain-tests' are, and stay).
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    if isinstance(getattr(hook, "_must_rewrite", None), set):
        hook._must_rewrite.difference_update(NOT_TESTS)
        getattr(hook, "_marked_for_rewrite_cache", {}).clear()


NOT_TESTS = ("langsmith", "anyio", "platformdirs", "faker", "syrupy", "pytest_recording", "pytest_socket")


def release_memory(everything: bool = False) -> None:
    """Collect garbage and hand the freed memory back to the OS (glibc keeps it otherwise). What
    survives is frozen: later collections, automatic ones included, do not scan it again. A full
    collection in this process (torch, loaded models, Ray) took ~0.4 s, and the suite ran 95 of
    them (bench/README.md). `everything`: also what earlier calls froze (encoders let go)."""
    import ctypes
    import gc
    if everything:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):      # not glibc
        pass


@pytest.fixture(scope="module", autouse=True)
def _release_memory_between_modules():
    """A module's indexes go with its fixtures: hand the freed memory back to the OS, or the next
    module's peak stacks on top. Loaded encoders stay: clearing them after every module made the
    suite slower and its peak higher, since a fixture that outlives the module keeps its copy
    while the next module loads another. Modules that load the 470 MB multilingual model ask for
    `fresh_encoders`."""
    yield
    release_memory()


_RAY = {}


@pytest.fixture(scope="session")
def ray_cluster() -> str:
    """A real local Ray cluster of two 1-CPU nodes (ray.cluster_utils.Cluster) that this process
    has joined; its address. Started once for the "ray" lane, whose modules run in sequence on one
    worker, and stopped when the lane ends: a cluster's start and stop took ~6 s per module."""
    if "cluster" not in _RAY:
        ray = pytest.importorskip("ray")
        from ray.cluster_utils import Cluster

        # no dashboard (as ldr starts its own clusters): its processes held ~320 MB
        # each node holds one shard's files (`ldr serve --ray` places that shard's replicas there)
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                          "resources": {"ldr_shard_1": 1000}})
        c.add_node(num_cpus=1, resources={"ldr_shard_0": 1000})
        ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
        _RAY["cluster"] = c
    yield _RAY["cluster"].address
    _stop_ray_cluster()


def _stop_ray_cluster() -> None:
    c = _RAY.pop("cluster", None)
    if c is not None:
        import ray
        ray.shutdown()
        c.shutdown()


@pytest.hookimpl(trylast=True)     # after the test's own fixtures are torn down
def pytest_runtest_teardown(item, nextitem):
    if "cluster" in _RAY and (nextitem is None or _unit(nextitem.nodeid) != "ray"):
        _stop_ray_cluster()      # its processes and their memory are not kept beside the next modules


class ServerOutput:
    """A started server's stdout, drained as it comes (a full pipe would stall the server), and the
    address its "serving ... on URL" line names: tests start `ldr serve --port 0`, so no port is
    chosen here and taken by another process before the server binds it."""

    def __init__(self, proc):
        import threading

        self.proc, self.lines, self.url = proc, [], None
        self.named, self.ended = threading.Event(), threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        import re

        for line in self.proc.stdout:
            self.lines.append(line)
            found = self.url is None and re.search(r"serving .* on (http://[^ ]+) \(", line)
            if found:
                self.url = found.group(1)
                self.named.set()
        self.named.set()
        self.ended.set()

    def wait_url(self, seconds: float = 120) -> str:
        self.named.wait(seconds)
        assert self.url, "the server did not say where it serves: " + self.text(1)
        return self.url

    def text(self, seconds: float = 30) -> str:
        """What it printed; once it exited, all of it."""
        if self.proc.poll() is not None:
            self.ended.wait(seconds)
        return "".join(self.lines)


def start_server(cmd: list, env=None, seconds: float = 120):
    """Start `cmd` (an `ldr serve` command without --port) on a free port the server picks; returns
    the process (its `.output` a ServerOutput) and the URL it serves on."""
    import subprocess

    proc = subprocess.Popen([*cmd, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    proc.output = ServerOutput(proc)
    try:
        return proc, proc.output.wait_url(seconds)
    except BaseException:
        proc.kill()
        raise


def stop_server(proc, seconds: float = 60) -> str:
    """Terminate a server from `start_server` (killed if it does not exit); returns all it printed."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.output.text()


def wait_healthy(http, proc, seconds: float = 120) -> None:
    """Poll a started server's GET /health through the client `http` (one client: each `httpx.get`
    builds a TLS context, ~40 ms of CPU) until it answers 200; the process exiting first, or
    `seconds` passing, fails the test."""
    import time

    import httpx

    deadline = time.time() + seconds
    while True:
        if proc.poll() is not None:
            out = proc.output.text() if hasattr(proc, "output") else proc.stdout.read() if proc.stdout else ""
            raise AssertionError("the server exited: " + out)
        assert time.time() < deadline, "the server did not start"
        try:
            if http.get("/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)


@pytest.fixture(scope="module")
def fresh_encoders():
    """No encoder of earlier modules kept beside this module's large ones (the suite's peak was
    multilingual-e5 loaded beside three English models), nor this module's after it."""
    from ldr.components import ENCODERS
    ENCODERS.clear()
    release_memory(everything=True)
    yield
    ENCODERS.clear()
    release_memory(everything=True)


@pytest.fixture
def sample_corpus() -> Path:
    return SAMPLE


@pytest.fixture
def write_jsonl():
    def _write(path: Path, records) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        return path
    return _write


def shared_path(name: str) -> Path:
    p = SHARED / name
    if not p.exists():
        pytest.skip(f"../shared/data/{name} not present")
    return p


def search_in_child(idx: Path, query: str, k: int = 3, mode: str | None = None,
                    absent: tuple = ("torch", "transformers", "pandas")) -> list[str]:
    """The hit ids of a search run in a fresh interpreter (the cold path of `ldr search`), which
    must not have imported any of `absent`."""
    import subprocess
    import sys

    code = ("import sys, ldr\n"
            f"hits = ldr.Index(sys.argv[1]).search({query!r}, k={k}, mode={mode!r})\n"
            f"assert not [m for m in {list(absent)!r} if m in sys.modules], 'heavy import'\n"
            "print(','.join(h.id for h in hits))")
    r = subprocess.run([sys.executable, "-c", code, str(idx)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().split(",")


def newest_manifest(idx: Path) -> Path:
    """The newest generation's manifest file of an index."""
    return sorted(Path(idx).glob("manifest-*.json"))[-1]


def manifest_of(idx: Path) -> dict:
    return json.loads(newest_manifest(idx).read_text())


def segment_dir(idx: Path, i: int = 0) -> Path:
    """The i-th segment folder of the newest generation."""
    return Path(idx) / manifest_of(idx)["segments"][i]["path"]


def bm25_dir(idx: Path) -> Path:
    """The tantivy/Lucene folder of the newest generation."""
    return Path(idx) / manifest_of(idx)["components"]["bm25"]["path"]


class CliResult:
    """What a CLI run gives a test: the exit code and the separate stdout/stderr text."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def cli_run(*args, check: bool = False) -> CliResult:
    """`ldr ARGS` in this process through click's CliRunner: no interpreter and import start-up per
    call. Tests of the process boundary itself (signals, kill -9, argv bytes, locks held by
    another process, a server) start a real process instead."""
    import signal

    from click.testing import CliRunner
    from ldr.cli import main

    old = signal.getsignal(signal.SIGTERM)      # the CLI installs its own SIGTERM handler
    try:
        r = CliRunner().invoke(main, [str(a) for a in args])
    finally:
        signal.signal(signal.SIGTERM, old)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    if check and r.exit_code != 0:
        raise AssertionError(f"ldr {' '.join(map(str, args))} exited {r.exit_code}: {r.stderr[-2000:]}")
    return CliResult(r.exit_code, r.stdout, r.stderr)
