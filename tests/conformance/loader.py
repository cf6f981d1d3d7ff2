"""Run an engine's own functions without importing the engine.

Two tools, both keep the engine's file name and line numbers in code objects, so a traceback or a
mismatch report points at the engine source (e.g. ``sglang-0.5.23/sglang/srt/...py:3130``):

* :func:`compile_defs` extracts named ``def``s (module functions or ``Class.method``) with
  :mod:`ast` and compiles them against a *strict* globals dict: any engine global that the test
  did not provide a stand-in for raises ``NameError`` naming it (never a silent default).
* :func:`exec_module` executes a whole (small, mostly self-contained) module with an import hook
  that serves stand-in modules for the engine's own packages, torch and friends.
"""
from __future__ import annotations

import ast
import builtins
import functools
import sys
import importlib
import types
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple


class StandInMissing(NameError):
    pass


class StrictGlobals(dict):
    """Globals for extracted engine code: unknown names fail loudly."""

    def __init__(self, origin: str, values: Mapping[str, Any]):
        super().__init__(values)
        self["__builtins__"] = builtins
        self["__name__"] = origin
        self.origin = origin

    def __missing__(self, key: str) -> Any:
        if key == "__builtins__":
            return builtins
        if hasattr(builtins, key):
            return getattr(builtins, key)
        raise StandInMissing(f"conformance: no stand-in for engine global {key!r} used in {self.origin}")


@functools.lru_cache(maxsize=64)
def _parse(text: str, origin: str) -> ast.Module:
    return ast.parse(text, filename=origin)


def find_def(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    """``func`` or ``Class.method`` (also finds defs nested in ``if`` blocks at module level)."""
    parts = qualname.split(".")
    scope: Iterable[ast.stmt] = tree.body
    node: Any = None
    for i, part in enumerate(parts):
        want = ast.ClassDef if i < len(parts) - 1 else (ast.FunctionDef, ast.AsyncFunctionDef)
        node = _find_in(scope, part, want)
        if node is None:
            raise KeyError(qualname)
        scope = node.body
    return node


def _find_in(body: Iterable[ast.stmt], name: str, kind: Any) -> Any:
    for stmt in body:
        if isinstance(stmt, kind) and stmt.name == name:
            return stmt
        if isinstance(stmt, (ast.If, ast.Try)):
            inner = list(stmt.body) + list(getattr(stmt, "orelse", []))
            hit = _find_in(inner, name, kind)
            if hit is not None:
                return hit
    return None


def has_def(text: str, origin: str, qualname: str) -> bool:
    try:
        find_def(_parse(text, origin), qualname)
        return True
    except KeyError:
        return False


def def_source(text: str, origin: str, qualname: str) -> str:
    return ast.get_source_segment(text, find_def(_parse(text, origin), qualname)) or ""


def def_lineno(text: str, origin: str, qualname: str) -> int:
    return find_def(_parse(text, origin), qualname).lineno


_KEEP_DECORATORS = {"staticmethod", "classmethod", "property"}


def module_literals(text: str, origin: str) -> Dict[str, Any]:
    """Module-level ``NAME = <literal>`` constants (e.g. ``_SUPPORTED_WORLD_SIZES``)."""
    out: Dict[str, Any] = {}
    for stmt in _parse(text, origin).body:
        targets = []
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            targets, value = [stmt.targets[0].id], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            targets, value = [stmt.target.id], stmt.value
        for name in targets:
            try:
                out[name] = ast.literal_eval(value)
            except ValueError:
                pass
    return out


def _import_hook(modules: Mapping[str, Any], origin: str) -> Dict[str, Any]:
    real_import = builtins.__import__

    def fake_import(name: str, globals_: Any = None, locals_: Any = None,
                    fromlist: Any = (), level: int = 0) -> Any:
        if name in modules:
            return modules[name]
        if name.split(".")[0] in ("sglang", "vllm", "torch", "triton"):
            raise StandInMissing(f"conformance: no stand-in for module {name!r} imported in {origin}")
        return real_import(name, globals_, locals_, fromlist, level)

    fake = dict(vars(builtins))
    fake["__import__"] = fake_import
    return fake


def compile_defs(text: str, origin: str, qualnames: Iterable[str],
                 stand_ins: Mapping[str, Any],
                 modules: Optional[Mapping[str, Any]] = None) -> Dict[str, Callable[..., Any]]:
    """Compile the named defs against ``stand_ins``; return {short name: function}.

    Decorators are dropped (``functools.lru_cache``, ``torch.compile``, tracing wrappers), except
    ``staticmethod``/``classmethod``/``property`` which are kept so the function can be set
    on a stand-in class unchanged.
    """
    tree = _parse(text, origin)
    values = module_literals(text, origin)
    values.update(stand_ins)
    g = StrictGlobals(origin, values)
    g["__builtins__"] = _import_hook(modules or {}, origin)
    out: Dict[str, Callable[..., Any]] = {}
    for qn in qualnames:
        node = find_def(tree, qn)
        clone = ast.parse("")  # fresh module holding a copy of the def
        fn = _copy_node(node)
        fn.decorator_list = [d for d in fn.decorator_list
                             if isinstance(d, ast.Name) and d.id in _KEEP_DECORATORS]
        clone.body = [fn]
        code = compile(clone, origin, "exec")
        local: Dict[str, Any] = {}
        exec(code, g, local)
        out[qn.split(".")[-1]] = local[node.name]
    g.update(out)  # defs extracted together can call each other by name
    return out


def _copy_node(node: ast.AST) -> Any:
    import copy
    return copy.deepcopy(node)


def class_literal_defaults(text: str, origin: str, class_name: str) -> Dict[str, Any]:
    """Dataclass-style field defaults of a class whose value is a literal (``x: int = 3``)."""
    tree = _parse(text, origin)
    cls = _find_in(tree.body, class_name, ast.ClassDef)
    if cls is None:
        raise KeyError(class_name)
    out: Dict[str, Any] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            try:
                out[stmt.target.id] = ast.literal_eval(stmt.value)
            except ValueError:
                pass
    return out


def make_host(name: str, methods: Mapping[str, Any], attrs: Mapping[str, Any]) -> Any:
    """A stand-in ``self``: an instance of a fresh class holding the engine's methods."""
    cls = type(name, (), dict(methods))
    obj = cls.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


# ---------------------------------------------------------------------------------------------
# whole-module execution
# ---------------------------------------------------------------------------------------------

class AutoStub:
    """Permissive stand-in for engine symbols the exercised code never really uses.

    Attribute access and calls return further stubs; used as a base class it vanishes
    (``__mro_entries__``); as a decorator it returns the decorated object unchanged.
    """

    def __init__(self, name: str = "stub"):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, item: str) -> "AutoStub":
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return AutoStub(f"{self._name}.{item}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], type)):
            return args[0]
        return AutoStub(f"{self._name}()")

    def __mro_entries__(self, bases: Tuple[Any, ...]) -> Tuple[type, ...]:
        return (object,)

    def __getitem__(self, item: Any) -> "AutoStub":
        return AutoStub(f"{self._name}[]")

    def __or__(self, other: Any) -> "AutoStub":
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class StubModule(types.ModuleType):
    def __init__(self, name: str, values: Optional[Mapping[str, Any]] = None, strict: bool = False):
        super().__init__(name)
        self.__dict__.update(values or {})
        self.__path__ = []  # so "import a.b" treats it as a package
        self._strict = strict

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        if self._strict:
            raise StandInMissing(f"conformance: stand-in module {self.__name__} lacks {item!r}")
        return AutoStub(f"{self.__name__}.{item}")


def exec_module(text: str, origin: str, modules: Mapping[str, Any],
                stub_prefixes: Tuple[str, ...], module_name: str) -> types.ModuleType:
    """Execute ``text`` as module ``module_name``.

    ``modules`` maps import names to stand-in modules (checked first, by longest prefix);
    imports under ``stub_prefixes`` that are not in ``modules`` get a permissive
    :class:`StubModule`; everything else (the standard library) is imported for real.
    """
    real_import = builtins.__import__

    def resolve(name: str) -> Any:
        if name in modules:
            return modules[name]
        if name.split(".")[0] in stub_prefixes or name in stub_prefixes:
            return StubModule(name)
        return None

    def fake_import(name: str, globals_: Any = None, locals_: Any = None,
                    fromlist: Any = (), level: int = 0) -> Any:
        if level:
            raise ImportError(f"relative import in {origin} not supported by the conformance loader")
        mod = resolve(name)
        if mod is None:
            return real_import(name, globals_, locals_, fromlist, level)
        if fromlist:
            return mod
        top = resolve(name.split(".")[0])
        return top if top is not None else mod

    fake_builtins = dict(vars(builtins))
    fake_builtins["__import__"] = fake_import
    unique = f"_kvscope_conformance.{origin}"
    mod = types.ModuleType(unique)
    sys.modules[unique] = mod  # dataclasses look the module up by name
    mod.__dict__["__builtins__"] = fake_builtins
    mod.__dict__["__file__"] = origin
    code = compile(_parse(text, origin), origin, "exec")
    exec(code, mod.__dict__)
    return mod


def import_real(name: str) -> Any:
    return importlib.import_module(name)
