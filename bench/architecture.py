"""Architecture figures of the ldr package, asserted by tests/test_architecture.py and printed by
`python bench/architecture.py`:

- the layer table: which package may import which (a module imports its own package and the
  layers below it; lazy imports inside functions count too);
- import cycles between modules;
- branches on a retriever kind's name outside ldr/components/ (the kinds are the registry's);
- another module's private names (`from x import _y`, `x._y`);
- the largest modules.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ldr"

# bottom to top; a package may import its own modules and every package of a lower layer
LAYERS: list[tuple[str, ...]] = [
    ("ldr.errors", "ldr._version", "ldr.stages", "ldr.schema", "ldr.paths",
     "ldr.language_defaults", "ldr.crash_signals", "ldr.ray_session", "ldr.npy", "ldr.arrays", "ldr.values",
     "ldr.pools"),
    # foundations (a language's search defaults: the build records, the query applies; how ldr joins Ray;
    # npy: np.load safe from many threads; arrays: helpers the stages share; pools: a process's threads)
    ("ldr.corpus",),                 # documents in
    ("ldr.encode",),                 # models and engines
    ("ldr.components",),             # retriever kinds as codecs (and the registry)
    ("ldr.index",),                  # storage: segments, generations, the writer, check
    ("ldr.search",),                 # the query side: options, the plan and its stages, fusion
    ("ldr.rerank",),                 # second stages (cross-encoder, passage rescorer) behind the rerank stage's protocol
    ("ldr.eval", "ldr.train"),       # measuring and training, given an Index
    ("ldr.api", "ldr.sharded", "ldr.handle", "ldr.shard", "ldr.shard_sets"),   # the composition root a RAG application imports
    # (api.Index: the one handle; handle: its search half; shard_sets: where its shards come from;
    # shard: a pinned generation answering a search in values)
    ("ldr.serve", "ldr.integrations"),
    ("ldr.cli",),
    ("ldr",),                        # the package root re-exports the API
]


def layer_of(module: str) -> int:
    best, where = -1, None
    for i, layer in enumerate(LAYERS):
        for pkg in layer:
            if (module == pkg or module.startswith(pkg + ".")) and len(pkg) > best:
                best, where = len(pkg), i
    if where is None:
        raise KeyError(f"{module} is in no layer of bench/architecture.py's table")
    return where


def package_of(module: str) -> str:
    return next(p for layer in LAYERS for p in sorted(layer, key=len, reverse=True)
                if module == p or module.startswith(p + "."))


def kinds() -> tuple[str, ...]:
    sys.path.insert(0, str(ROOT.parent))
    from ldr import components as registry
    return registry.names()


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _targets(node, name: str, path: Path, mods) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) of one import statement."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    if node.level:
        base = pkg.split(".")
        base = base[:len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out, plain = [], []
    for a in node.names:
        sub = f"{target}.{a.name}"
        if sub in mods:
            out.append((sub, []))           # `from .. import components`: the submodule
        else:
            plain.append(a.name)
    if plain:
        out.append((target, plain))
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → ldr modules it imports (at any depth of the file: lazy imports count too)."""
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target, _ in _targets(node, name, path, mods):
                    if target in mods and target != name:
                        deps.add(target)
        graph[name] = deps
    return graph


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports the layer table forbids: a module importing a package of a higher layer, or of
    another package on its own layer's: packages of one layer may import each other (no cycles)."""
    return sorted((a, b) for a, ds in graph.items() for b in ds if layer_of(b) > layer_of(a))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan). A package's __init__
    re-exporting its own submodules is not a cycle."""
    g = {n: {d for d in ds if not (d.startswith(n + ".") or n.startswith(d + "."))} for n, ds in graph.items()}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def private_uses(mods: dict[str, Path]) -> list[str]:
    """Another package's private names: `from ldr.x import _y`, or `x._y` where `x` names an
    imported ldr module (modules of one package share its private names)."""
    out = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(ROOT.parent)
        aliases: dict[str, str] = {}      # local name → the ldr module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                for target, names in _targets(node, name, path, mods):
                    if target not in mods:
                        continue
                    if not names:                       # a submodule, bound to its own name
                        short = target.rsplit(".", 1)[1]
                        bound = next((a.asname or a.name for a in node.names if a.name == short), short)
                        aliases[bound] = target
                    for n in names:
                        if n.startswith("_") and not n.startswith("__") and package_of(target) != package_of(name):
                            out.append(f"{rel}:{node.lineno}: {n} from {target}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = aliases[node.value.id]
                if node.attr.startswith("_") and not node.attr.startswith("__") and \
                        package_of(target) != package_of(name):
                    out.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    return out


def kind_branches(mods: dict[str, Path], names: tuple[str, ...] | None = None) -> list[str]:
    """Lines outside ldr/components/ that single out a kind by its name: a comparison with it
    (==, !=, in, not in), a subscript or .get/.pop by it, a match case on it."""
    names = names or kinds()
    lit = "|".join(re.escape(n) for n in names)
    branch = re.compile(
        rf"""(==|!=)\s*["']({lit})["']|["']({lit})["']\s*(==|!=|(not\s+)?in\b)|\bin\s*[(\[{{]\s*["']({lit})["']"""
        rf"""|\[\s*["']({lit})["']\s*\]|\.(get|pop)\(\s*["']({lit})["']|\bcase\s+["']({lit})["']""")
    out = []
    for name, path in mods.items():
        if name.startswith("ldr.components"):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if branch.search(code):
                where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path
                out.append(f"{where}:{i}: {line.strip()}")
    return out


def largest(mods: dict[str, Path], n: int = 5) -> list[tuple[int, str]]:
    sizes = [(len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(ROOT.parent))) for p in mods.values()]
    return sorted(sizes, reverse=True)[:n]


def main() -> None:
    mods = modules()
    graph = imports(mods)
    cyc, up, br, priv = cycles(graph), upward(graph), kind_branches(mods), private_uses(mods)
    print(f"modules: {len(mods)}")
    print(f"import cycles: {len(cyc)}")
    for c in cyc:
        print("  ", " <-> ".join(c))
    print(f"imports against the layer table: {len(up)}")
    for a, b in up:
        print(f"   {a} -> {b}")
    print(f"kind-name branches outside ldr/components/ ({', '.join(kinds())}): {len(br)}")
    for line in br:
        print("  ", line)
    print(f"private names used across packages: {len(priv)}")
    for line in priv:
        print("  ", line)
    print("largest modules:", ", ".join(f"{p} ({n})" for n, p in largest(mods)))
    owners = handles(mods)
    print(f"index handles (classes with their own refresh, or deriving from the handle): {len(owners)}: "
          + ", ".join(f"{m}.{c}" for m, c in owners))
    sizes = {m: len(mods[m].read_text().splitlines()) for m in HANDLE_MODULES if m in mods}
    print(f"the handle and its shards: {sum(sizes.values())} lines ("
          + ", ".join(f"{m} {n}" for m, n in sizes.items()) + ")")


# the modules an opened index is made of (the handle, where its shards come from, a shard)
HANDLE_MODULES = ("ldr.api", "ldr.handle", "ldr.sharded", "ldr.shard_sets", "ldr.shard", "ldr.serve.ray_shards",
                  "ldr.serve.remote_shard")


def handles(mods: dict) -> list[tuple[str, str]]:
    """The classes that implement an index handle's lifecycle: a `refresh` of their own, or the
    handle's search half (handle.Handle) as a base (issue 79: one)."""
    import ast

    found = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                if "refresh" in methods or any(getattr(b, "id", None) in ("Handle", "ClusterHandle") for b in node.bases):
                    found.append((name, node.name))
    return found


if __name__ == "__main__":
    main()


# components/ modules every layer may use: the registry, the protocol, the states a kind is
# handed, top-k, and text analysis; every other module there is one kind's own
SHARED_COMPONENTS = ("ldr.components", "ldr.components.base", "ldr.components.states", "ldr.components.topk",
                     "ldr.components.analysis")
# what ranks gathered candidates: it reads values (candidates, texts, features) through a source,
# never storage, so it runs where no shard's files are
COORDINATOR = ("ldr.search.stages", "ldr.search.fusion", "ldr.search.normalise", "ldr.search.calibration",
               "ldr.search.gather", "ldr.search.searcher", "ldr.search.plan")


def kind_reaches(graph: dict[str, set[str]], outside: tuple[str, ...] = ("ldr.search", "ldr.cli", "ldr.serve",
                                                                           "ldr.api", "ldr.sharded", "ldr.handle",
                                                                           "ldr.shard", "ldr.shard_sets", "ldr.rerank", "ldr.eval", "ldr.integrations")
                 ) -> list[tuple[str, str]]:
    """Imports of one kind's module (components.bm25, components.bm25_store.*, ...) by the layers
    above storage: they reach a kind through the registry's protocol, never by its path."""
    def inside(m, pkgs):
        return any(m == p or m.startswith(p + ".") for p in pkgs)
    return sorted((a, b) for a, ds in graph.items() if inside(a, outside) for b in ds
                  if b.startswith("ldr.components.") and b not in SHARED_COMPONENTS)


def coordinator_storage(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of storage (ldr.index) or of a kind's module by a coordinator-side module."""
    def inside(m, pkgs):
        return any(m == p or m.startswith(p + ".") for p in pkgs)
    return sorted((a, b) for a, ds in graph.items() if inside(a, COORDINATOR) for b in ds
                  if b.startswith("ldr.index") or (b.startswith("ldr.components.") and b not in SHARED_COMPONENTS))
