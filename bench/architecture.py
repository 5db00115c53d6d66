"""Architecture figures of the ldr package: import cycles, upward imports, kind-name branches
outside ldr/components/, and the largest modules. `python bench/architecture.py` prints them;
tests/test_architecture.py asserts on them."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ldr"
KINDS = ("bm25", "dense", "sparse")
# a branch on a kind name: `== "dense"`, `in ("dense", ...)`, `"dense" in comps`, `if name == 'bm25'`
_BRANCH = re.compile(r"""(==|!=)\s*["'](%s)["']|["'](%s)["']\s*(not\s+)?in\b|\bin\s*\(["'](%s)["']"""
                     % (("|".join(KINDS),) * 3))


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → ldr modules it imports (at any depth of the file: lazy imports count too)."""
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                cands = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                cands = [a.name for a in node.names]
            else:
                continue
            for c in cands:
                if c in mods and c != name:
                    deps.add(c)
        graph[name] = deps
    return graph


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


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """index/ (storage) importing search/ or api: the storage layer must not know the query side."""
    return sorted((a, b) for a, ds in graph.items() for b in ds
                  if a.startswith("ldr.index") and (b.startswith("ldr.search") or b == "ldr.api"))


def kind_branches(mods: dict[str, Path]) -> list[str]:
    """Lines outside ldr/components/ that branch on a kind name."""
    out = []
    for name, path in mods.items():
        if name.startswith("ldr.components"):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _BRANCH.search(code):
                out.append(f"{path.relative_to(ROOT.parent)}:{i}: {line.strip()}")
    return out


def largest(mods: dict[str, Path], n: int = 5) -> list[tuple[int, str]]:
    sizes = [(len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(ROOT.parent))) for p in mods.values()]
    return sorted(sizes, reverse=True)[:n]


def main() -> None:
    mods = modules()
    graph = imports(mods)
    cyc, up, br = cycles(graph), upward(graph), kind_branches(mods)
    print(f"modules: {len(mods)}")
    print(f"import cycles: {len(cyc)}")
    for c in cyc:
        print("  ", " <-> ".join(c))
    print(f"upward imports (index -> search/api): {len(up)}")
    for a, b in up:
        print(f"   {a} -> {b}")
    print(f"kind-name branches outside ldr/components/: {len(br)}")
    for line in br:
        print("  ", line)
    print("largest modules:", ", ".join(f"{p} ({n})" for n, p in largest(mods)))


if __name__ == "__main__":
    main()
