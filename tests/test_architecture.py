"""The package's shape (bench/architecture.py): every module sits in a layer of the table and
imports only its own layer and those below; no import cycles; no branch on a retriever kind's
name outside ldr/components/ (the kinds are the registry's; training aside: `ldr train dense`
trains a dense model by nature); no other package's private names; no module over 400 lines."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("architecture", ROOT / "bench" / "architecture.py")
arch = importlib.util.module_from_spec(spec)
sys.modules["architecture"] = arch
spec.loader.exec_module(arch)


def test_every_module_has_a_layer_and_imports_only_down_or_across_it():
    mods = arch.modules()
    assert all(arch.layer_of(m) >= 0 for m in mods)       # a module outside the table is an error
    graph = arch.imports(mods)
    assert arch.cycles(graph) == []
    assert arch.upward(graph) == []


def test_the_layer_rule_catches_what_it_should():
    """Storage importing the query side, eval importing the package root, a kind reaching into
    storage: each is an import against the table."""
    graph = {"ldr.index.writer": {"ldr.search.options"}, "ldr.eval.runner": {"ldr"},
             "ldr.components.dense": {"ldr.index.snapshot"}, "ldr.search.plan": {"ldr.components"},
             "ldr.search.options": set(), "ldr": set(), "ldr.index.snapshot": set(), "ldr.components": set()}
    assert arch.upward(graph) == [("ldr.components.dense", "ldr.index.snapshot"), ("ldr.eval.runner", "ldr"),
                                  ("ldr.index.writer", "ldr.search.options")]


def test_no_kind_branches_outside_components():
    import ldr.components as registry

    assert arch.kinds() == registry.names() and "colbert" in arch.kinds()
    found = [line for line in arch.kind_branches(arch.modules()) if not line.startswith("ldr/train/")]
    assert found == []


def test_the_kind_rule_sees_more_than_equality(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("a = comps.get('dense')\nb = comps['sparse']\nc = x if k in ('colbert', 'x') else y\n"
                     "d = 'bm25' == k\n")
    found = arch.kind_branches({"ldr.probe": probe}, ("bm25", "dense", "sparse", "colbert"))
    assert len(found) == 4


def test_no_private_names_across_packages():
    assert arch.private_uses(arch.modules()) == []


def test_modules_stay_small():
    assert [(n, p) for n, p in arch.largest(arch.modules(), 3) if n > 400] == []


def test_arrays_are_read_through_ldr_npy():
    """np.load's header parse races between threads on Python 3.11 (ldr/npy.py): every .npy ldr
    reads goes through ldr.npy.load, which parses again where it raced."""
    found = [f"{p.relative_to(ROOT)}:{i}" for m, p in arch.modules().items() if m != "ldr.npy"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "np.load(" in line or "read_array_header" in line]
    assert found == []


def test_only_components_reach_a_kind_and_the_coordinator_reads_no_storage():
    """Issue 55: the query side, the CLI and the server reach a kind through the registry, never
    by its module's path; the stages that rank gathered candidates import no storage."""
    graph = arch.imports(arch.modules())
    assert arch.kind_reaches(graph) == []
    assert arch.coordinator_storage(graph) == []
    probe = {"ldr.cli.x": {"ldr.components.bm25"}, "ldr.search.y": {"ldr.components.bm25_store.native_backend",
                                                                    "ldr.components.analysis"},
             "ldr.search.stages.z": {"ldr.index.snapshot"}, "ldr.index.w": {"ldr.components.dense"}}
    assert arch.kind_reaches(probe) == [("ldr.cli.x", "ldr.components.bm25"),
                                        ("ldr.search.y", "ldr.components.bm25_store.native_backend")]
    assert arch.coordinator_storage(probe) == [("ldr.search.stages.z", "ldr.index.snapshot")]


def test_one_handle_class():
    """Issue 79: one handle over a shard set (one local index, a sharded index's N local shards, N
    Ray Serve replicas: shard_sets.py, serve/ray_shards.RayShards): search, refresh, info,
    document and close are written once, in api.Index (its search half: handle.Handle). No other
    class has a refresh or derives from the handle, ShardedIndex is the same class, and the
    sharded module keeps no search, write or lifecycle code of its own."""
    import ldr
    from ldr.api import Index
    from ldr.serve.ray_shards import RayShards, open_on_ray  # noqa: F401

    assert arch.handles(arch.modules()) == [("ldr.api", "Index")]
    assert arch.handles({"m": _source("class A(ClusterHandle):\n    pass\nclass B:\n    def refresh(self): pass\n")}) \
        == [("m", "A"), ("m", "B")]
    assert ldr.ShardedIndex is Index
    src = arch.modules()["ldr.sharded"].read_text()
    for name in ("def search(", "def add(", "def delete(", "def merge(", "def search_many(", "def refresh(",
                 "def info(", "def document(", "def close(", "def _open("):
        assert name not in src, name
    # each shard set answers the same calls
    from ldr.shard_sets import LocalShards, OneIndex
    calls = ("open", "newer", "moved", "close", "document", "live_ids", "info", "writer")
    for cls in (OneIndex, LocalShards, RayShards):
        assert all(callable(getattr(cls, c, None)) for c in calls), cls


def test_shard_values_are_dataclasses():
    """Issue 79: what a shard answers is typed, not a dict whose keys live in comments: each call of
    the Shard protocol that carries a search's values returns a dataclass (frozen where it is
    ldr/values.py's), or a list or dict of them, as its annotation says."""
    import dataclasses
    import typing

    from ldr.search.gather import Shard

    def value_types(t) -> list:
        args = typing.get_args(t)
        return [a for a in args if a not in (int, str)] if args else [t]

    for name in ("describe", "stats", "first", "first_many", "windows", "fetch"):
        ret = typing.get_type_hints(getattr(Shard, name))["return"]
        for t in value_types(ret):
            assert dataclasses.is_dataclass(t), (name, t)
            assert t.__module__ != "ldr.values" or t.__dataclass_params__.frozen, (name, t)


def test_the_bench_entry_point_lists_every_maintained_benchmark_and_only_those():
    """bench/run.py names each maintained benchmark once, each exists, and every script beside it
    is listed (a one-off sweep lives in bench/sweeps/; qmsum_eval.py is the sweeps' helpers)."""
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    listed = [script for group in run.GROUPS.values() for _, script, _ in group]
    names = [name for group in run.GROUPS.values() for name, _, _ in group]
    assert len(set(listed)) == len(listed) and len(set(names)) == len(names)
    assert all((ROOT / "bench" / s).is_file() for s in listed)
    beside = {p.name for p in (ROOT / "bench").glob("*.py")} - {"run.py", "qmsum_eval.py"}
    assert beside == set(listed)


def _source(text: str):
    class Source:
        def read_text(self):
            return text
    return Source()
