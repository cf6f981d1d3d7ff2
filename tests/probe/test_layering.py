"""The probe's layering (issue #11): hook tables are neutral data between the probe and engines.

tests/test_layers.py checks engine <-> probe edges and cycles on the whole graph; this adds:
- ``kvscope.hooks`` imports nothing from kvscope but itself (and, for release boundaries, the
  engines' pure-data ``release`` tables);
- no engine module imports the hook tables;
- the probe agent (``probe/_boot``) imports nothing from kvscope (it runs inside the engine).
Function-local imports count: the check reads every ``import`` statement in the source.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "kvscope"


def _module(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every absolute module name an ``import`` in ``path`` names (relative ones resolved)."""
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _files(package: str) -> list[pathlib.Path]:
    root = SRC.joinpath(*package.split(".")[1:])
    return sorted(root.rglob("*.py"))


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("path", _files("kvscope.engines"), ids=lambda p: _module(p))
def test_engines_do_not_import_the_hook_tables(path):
    bad = {n for n in _imports(path) if _under(n, "kvscope.hooks")}
    assert not bad, f"{_module(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", _files("kvscope.hooks"), ids=lambda p: _module(p))
def test_hooks_are_neutral_data(path):
    def allowed(n: str) -> bool:
        return (_under(n, "kvscope.hooks") or
                (_under(n, "kvscope.engines") and ".release" in n))
    bad = {n for n in _imports(path) if _under(n, "kvscope") and not allowed(n)}
    assert not bad, f"{_module(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sorted((SRC / "probe" / "_boot").glob("*.py")),
                         ids=lambda p: p.name)
def test_agent_is_stdlib_only(path):
    bad = {n for n in _imports(path) if _under(n, "kvscope")}
    assert not bad, f"{path.name} imports {sorted(bad)}"
