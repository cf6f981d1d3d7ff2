"""The layers of docs/design.md, checked on the import graph (top-level and function-local imports).

No engine imports another engine, no engine imports the probe (nor the probe an engine), the layers
below the use-cases never import upwards, argparse lives only in commands/, printing only at the
edges, and the module graph has no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "kvscope"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py") if "_boot" not in p.parts}


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mod: str) -> set[str]:
    path = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, path.name == "__init__.py", node)
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in MODULES else target)
    return {m for m in out if m == "kvscope" or m.startswith("kvscope.")}


GRAPH = {m: _imports(m) for m in MODULES}


def _edges(src_prefix: str, dst_prefix: str) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in GRAPH.items() if a.startswith(src_prefix)
                  for b in deps if b.startswith(dst_prefix))


@pytest.mark.parametrize("a,b", [("kvscope.engines.sglang", "kvscope.engines.vllm"),
                                 ("kvscope.engines.vllm", "kvscope.engines.sglang")])
def test_engines_never_import_each_other(a, b):
    assert _edges(a, b) == []


def test_engines_and_probe_do_not_import_each_other():
    assert _edges("kvscope.engines", "kvscope.probe") == []
    assert _edges("kvscope.probe", "kvscope.engines") == []


# what each layer may import from kvscope (the leaves: model, hardware, catalog, units, errors, record,
# timeline, logs grammar); use-cases, commands and report sit above.
LOWER = ("kvscope.engines", "kvscope.model", "kvscope.hardware", "kvscope.catalog", "kvscope.perf",
         "kvscope.logs", "kvscope.probe", "kvscope.hooks")
UPPER = ("kvscope.plan", "kvscope.fit", "kvscope.doctor", "kvscope.commands", "kvscope.cli", "kvscope.report",
         "kvscope.schema")


def test_lower_layers_never_import_upwards():
    bad = [e for low in LOWER for up in UPPER for e in _edges(low, up)]
    assert bad == []


def test_argparse_only_in_commands_and_cli():
    users = sorted(m for m, p in MODULES.items() if "argparse" in {a for n in ast.walk(ast.parse(p.read_text()))
                                                                   if isinstance(n, ast.Import)
                                                                   for a in (x.name for x in n.names)})
    assert [m for m in users if not (m.startswith("kvscope.commands") or m == "kvscope.cli")] == []


def test_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
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
                cycles.append(sorted(comp))

    for m in sorted(GRAPH):
        if m not in index:
            visit(m)
    # a package __init__ that re-exports its own submodules is not a cycle of meaning
    cycles = [c for c in cycles if not all(x == c[0] or x.startswith(c[0] + ".") for x in c)]
    assert cycles == []
