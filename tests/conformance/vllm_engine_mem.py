"""vLLM's own startup-budget and argument-default code, per release, runnable without torch or a GPU.

Engine side (read from the release wheel, see ``loader.py``; nothing is re-typed here):

* requested memory and its startup check: ``Worker.init_device`` (inline, 0.10-0.11) or
  ``vllm/v1/worker/utils.py::request_memory`` (0.14+), with the engine's own ``MemorySnapshot``;
* available KV memory: ``Worker.determine_available_memory`` + ``memory_profiling`` /
  ``MemorySnapshot`` / ``MemoryProfilingResult`` (``vllm/utils/__init__.py`` in 0.10-0.11,
  ``vllm/utils/mem_utils.py`` from 0.14), ``reserve_mm_ipc_gpu_memory`` and the startup-plan hook;
* batch defaults: ``EngineArgs._set_default_args[_v1]`` (0.10-0.11) or ``get_batch_defaults`` +
  ``_set_default_chunked_prefill_and_prefix_caching_args`` +
  ``_set_default_max_num_seqs_and_batched_tokens_args`` (0.19+);
* ``CacheConfig.gpu_memory_utilization`` default and bounds (``vllm/config/cache.py``);
* env defaults (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` ...) evaluated from ``vllm/envs.py``.

Stand-ins replace only what is not arithmetic: a simulated CUDA device (:class:`FakeDevice`) stands
behind ``torch.cuda`` / ``torch.accelerator`` (``mem_get_info``, ``memory_stats``,
``memory_reserved``, ``empty_cache``); ``profile_run`` / ``profile_cudagraph_memory`` allocate on it
what the case says; the platform is CUDA; logging is silent.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import gc
import math
import re
import os
import sys
import time
import types
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import loader
from .wheels import EngineSource, engine_source

GiB = 1 << 30
MiB = 1 << 20
# gc.collect() in the engine code only frees Python objects; on the simulated device it is a no-op
# (and the real one costs 30 ms a call).
_GC = types.SimpleNamespace(collect=lambda *a: 0)


def vtuple(version: str) -> tuple:
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3])


# ---------------------------------------------------------------------------------------------
# the simulated device
# ---------------------------------------------------------------------------------------------

class FakeDevice:
    """Driver free/total, torch's caching allocator (reserved/allocated/peak) and non-torch memory.

    ``empty_cache`` returns reserved-but-unused memory to the driver except ``pinned`` bytes
    (fragmented segments the allocator cannot release)."""

    def __init__(self, total: int = 0, free: int = 0):
        self.reset(total, free)

    def reset(self, total: int, free: int) -> "FakeDevice":
        self.total = total
        self.free = free
        self.reserved = 0
        self.allocated = 0
        self.peak = 0
        self.pinned = 0
        return self

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.peak = max(self.peak, self.allocated)
        if self.allocated + self.pinned > self.reserved:
            grow = self.allocated + self.pinned - self.reserved
            self.reserved += grow
            self.free -= grow

    def release(self, n: int) -> None:
        self.allocated -= n

    def pin(self, n: int) -> None:
        """n bytes of reserved memory stay with torch after empty_cache (fragmentation)."""
        self.pinned += n
        self.alloc(0)

    def non_torch(self, n: int) -> None:
        self.free -= n

    def empty_cache(self) -> None:
        keep = self.allocated + self.pinned
        self.free += self.reserved - keep
        self.reserved = keep

    def reset_peak(self) -> None:
        self.peak = self.allocated


class _Dev:
    def __init__(self, spec: Any = "cuda:0"):
        s = spec if isinstance(spec, str) else getattr(spec, "_s", "cuda:0")
        if isinstance(spec, int):
            s = f"cuda:{spec}"
        self._s = s
        self.type = s.split(":")[0]
        self.index = int(s.split(":")[1]) if ":" in s else 0

    def __str__(self) -> str:
        return self._s

    __repr__ = __str__

    def __eq__(self, other: Any) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(self._s)


def fake_torch(dev: FakeDevice) -> types.SimpleNamespace:
    """``torch`` with the memory queries of ``torch.cuda`` and ``torch.accelerator`` on ``dev``."""

    def mem_get_info(*_a: Any) -> Tuple[int, int]:
        return dev.free, dev.total

    def memory_stats(*_a: Any) -> Dict[str, int]:
        return {"allocated_bytes.all.peak": dev.peak, "allocated_bytes.all.current": dev.allocated}

    api = types.SimpleNamespace(
        mem_get_info=mem_get_info, get_memory_info=mem_get_info, memory_stats=memory_stats,
        memory_reserved=lambda *_a: dev.reserved, empty_cache=lambda *_a: dev.empty_cache(),
        reset_peak_memory_stats=lambda *_a: dev.reset_peak(),
        max_memory_allocated=lambda *_a: dev.peak,
    )
    return types.SimpleNamespace(cuda=api, accelerator=api, device=_Dev,
                                 types=types.SimpleNamespace(Device=object))


class _Logger:
    def __getattr__(self, item: str) -> Any:
        return lambda *a, **k: None


class _Platform:
    """``current_platform`` = CUDA; device name/memory from the case."""

    def __init__(self, name: str = "NVIDIA H100 80GB HBM3", total: int = 80 * GiB,
                 capability: Tuple[int, int] = (9, 0)):
        self.name, self.total, self.capability = name, total, capability
        self.device_name = "cuda"
        self.dist_backend = "nccl"
        self.dev: Optional[FakeDevice] = None

    def current_device(self) -> int:
        return 0

    def is_integrated_gpu(self, *_a: Any) -> bool:
        return False

    def is_rocm(self) -> bool:
        return False

    def is_cuda_alike(self) -> bool:
        return True

    def is_cuda(self) -> bool:
        return True

    def is_xpu(self) -> bool:
        return False

    def is_tpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False

    def get_device_total_memory(self, *_a: Any) -> int:
        return self.total

    def get_device_name(self, *_a: Any) -> str:
        return self.name

    def get_device_capability(self, *_a: Any) -> Tuple[int, int]:
        return tuple(self.capability)

    def mem_get_info(self, *_a: Any) -> Tuple[int, int]:
        if self.dev is None:
            raise loader.StandInMissing("conformance: platform mem_get_info without a device")
        return self.dev.free, self.dev.total

    def is_device_capability(self, cap: Any, *_a: Any) -> bool:
        return tuple(cap) == tuple(self.capability)

    # 0.12-0.18 mem_utils.py ask the platform (not torch.accelerator) for torch's own counters
    def _api(self) -> Any:
        if self.dev is None:
            raise loader.StandInMissing("conformance: platform memory query without a device")
        return fake_torch(self.dev).cuda

    def memory_stats(self, *a: Any) -> Dict[str, int]:
        return self._api().memory_stats(*a)

    def memory_reserved(self, *a: Any) -> int:
        return self._api().memory_reserved(*a)

    def empty_cache(self, *a: Any) -> None:
        return self._api().empty_cache(*a)

    def reset_peak_memory_stats(self, *a: Any) -> None:
        return self._api().reset_peak_memory_stats(*a)

    def set_device(self, *_a: Any) -> None:
        pass

    def check_if_supports_dtype(self, *_a: Any) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# source helpers
# ---------------------------------------------------------------------------------------------

def compile_classes(text: str, origin: str, names: List[str], stand_ins: Dict[str, Any],
                    modules: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Execute module-level ``class``es (with their decorators, e.g. ``@dataclass``) under one
    strict globals dict (they can name each other); they keep the engine's file name and lines.
    ``modules``: what function-local imports get (``from vllm.platforms import current_platform``
    inside ``MemorySnapshot.measure``, mem_utils.py @ v0.12.0)."""
    tree = loader._parse(text, origin)
    mod_name = f"_kvscope_conformance.{origin}"
    sys.modules.setdefault(mod_name, types.ModuleType(mod_name))
    values = loader.module_literals(text, origin)
    values.update(stand_ins)
    g = loader.StrictGlobals(mod_name, values)
    if modules:
        g["__builtins__"] = loader._import_hook(modules, origin)
    out: Dict[str, Any] = {}
    for name in names:
        node = loader._find_in(tree.body, name, ast.ClassDef)
        if node is None:
            raise KeyError(name)
        clone = ast.Module(body=[loader._copy_node(node)], type_ignores=[])
        exec(compile(clone, origin, "exec"), g)
        out[name] = g[name]
    return out


def env_default(text: str, origin: str, key: str) -> Any:
    """The value of ``environment_variables[key]()`` in ``vllm/envs.py`` with the variable unset."""
    tree = loader._parse(text, origin)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == key and isinstance(v, ast.Call) and \
                        getattr(v.func, "id", "") == "env_with_choices":
                    return ast.literal_eval(v.args[1])  # env_with_choices(name, default, choices)
                if isinstance(k, ast.Constant) and k.value == key and isinstance(v, ast.Lambda):
                    expr = ast.Expression(body=loader._copy_node(v))
                    fake_os = types.SimpleNamespace(environ={}, getenv=lambda _n, d=None: d,
                                                    path=os.path)
                    g = loader.StrictGlobals(origin, {"os": fake_os})
                    return eval(compile(expr, origin, "eval"), g)()
    raise KeyError(f"{origin}: no env var {key}")


def field_spec(text: str, origin: str, class_name: str, field_name: str) -> Dict[str, Any]:
    """``x: float = 0.9`` -> {"default": 0.9}; ``x: float = Field(default=0.92, gt=0, le=1)`` ->
    its literal keywords."""
    tree = loader._parse(text, origin)
    cls = loader._find_in(tree.body, class_name, ast.ClassDef)
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field_name:
            v = stmt.value
            if isinstance(v, ast.Call):
                return {kw.arg: ast.literal_eval(kw.value) for kw in v.keywords}
            return {"default": ast.literal_eval(v)}
    raise KeyError(f"{class_name}.{field_name}")


def def_line(text: str, origin: str, qualname: str) -> int:
    return loader.def_lineno(text, origin, qualname)


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BudgetCase:
    """One worker start, physically: what the device holds at each step."""

    total: int
    init_free: int  # cudaMemGetInfo free at init_snapshot (context, NCCL, co-tenants already out)
    util: float
    torch_at_init: int = 0  # torch tensors alive before init_snapshot
    weights: int = 0  # "Model loading took" (torch-allocated, persistent)
    non_torch_before_profile: int = 0  # e.g. lazily created NCCL/cuBLAS buffers after init
    activation: int = 0  # transient torch peak of profile_run above its start
    persistent: int = 0  # torch tensors profile_run keeps (allocated before its peak)
    non_torch_profile: int = 0  # non-torch growth during profile_run (attention workspaces ...)
    pinned: int = 0  # torch memory empty_cache cannot release after profile_run (fragmentation)
    cudagraph: int = 0  # profile_cudagraph_memory() estimate
    cudagraph_torch_peak: int = 0  # transient torch peak while profiling graphs
    cudagraph_mode_none: bool = False  # --enforce-eager
    kv_cache_memory_bytes: Optional[int] = None
    external_weights: int = 0  # weights held by another process (request_memory, 0.33+)


@dataclass
class BudgetResult:
    requested: Any  # int (0.14+) or float
    request_error: Optional[str]
    available: Optional[int] = None
    torch_peak_increase: Optional[int] = None
    non_torch_increase: Optional[int] = None
    weights_memory: Optional[int] = None
    cudagraph_estimate: Optional[int] = None


class _Cfg(types.SimpleNamespace):
    pass


class _Stop(Exception):
    """Raised by the model-runner stand-in: init_device got past the memory check."""


class VllmMem:
    """One vLLM release's budget and argument-default code."""

    def __init__(self, version: str):
        self.version = version
        self.v = vtuple(version)
        self.src: EngineSource = engine_source("vllm", version)
        self._cache: Dict[str, Any] = {}
        self.dev = FakeDevice()
        self.case: Optional[BudgetCase] = None

    def _cached(self, key: str, build: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    # -- members ------------------------------------------------------------------------------
    def origin(self, member: str) -> str:
        return f"{self.src.label}/{member}"

    def text(self, member: str) -> str:
        return self.src.read(member)

    @property
    def mem_member(self) -> str:
        return "vllm/utils/mem_utils.py" if self.v >= (0, 12) else "vllm/utils/__init__.py"

    @property
    def old_request(self) -> bool:
        return self._cached("old_request", lambda: not self.src.has("vllm/v1/worker/utils.py") or
                            "def request_memory" not in self.text("vllm/v1/worker/utils.py"))

    def transformers_v5(self) -> bool:
        """The wheel's ``Requires-Dist: transformers>=5.5.3`` (METADATA @ v0.24.0+; 0.19-0.23 allow 4.56+)."""
        def read() -> bool:
            meta = f"vllm-{self.version}.dist-info/METADATA"
            if not self.src.has(meta):
                return False
            m = re.search(r"^Requires-Dist: transformers(\S*)", self.text(meta), re.M)
            return bool(m) and bool(re.search(r">=([5-9]|\d\d)\.", m.group(1)))
        return self._cached("transformers_v5", read)

    def has_external_weights(self) -> bool:
        return "external_weight_memory" in self.text("vllm/v1/worker/utils.py")

    def env(self, key: str) -> Any:
        ck = "env:" + key
        if ck not in self._cache:
            self._cache[ck] = env_default(self.text("vllm/envs.py"), self.origin("vllm/envs.py"), key)
        return self._cache[ck]

    def util_field(self) -> Dict[str, Any]:
        m = "vllm/config/cache.py"
        return field_spec(self.text(m), self.origin(m), "CacheConfig", "gpu_memory_utilization")

    # -- memory classes on a device -------------------------------------------------------------
    def _mem_classes(self, dev: Optional[FakeDevice] = None) -> Dict[str, Any]:
        return self._cached("mem_classes", lambda: self._build_mem_classes(self.dev))

    def _build_mem_classes(self, dev: FakeDevice) -> Dict[str, Any]:
        m = self.mem_member
        text, origin = self.text(m), self.origin(m)
        torch = fake_torch(dev)
        platform = _Platform()
        platform.dev = dev
        fmt = None
        base = {"torch": torch, "time": time, "gc": _GC, "dataclass": dataclasses.dataclass,
                "field": dataclasses.field, "current_platform": platform, "psutil": None,
                "GiB_bytes": GiB, "contextlib": contextlib, "Generator": Any, "Optional": Optional,
                "logger": _Logger()}
        if loader.has_def(text, origin, "format_gib"):  # mem_utils.py format_gib (0.14+)
            fmt = loader.compile_defs(text, origin, ["format_gib"], base)["format_gib"]
            base["format_gib"] = fmt
        classes = compile_classes(text, origin, ["MemorySnapshot", "MemoryProfilingResult"], base,
                                  {"vllm.platforms": types.SimpleNamespace(current_platform=platform)})
        snap, res = classes["MemorySnapshot"], classes["MemoryProfilingResult"]
        base.update(classes)
        prof = loader.compile_defs(text, origin, ["memory_profiling"], base)["memory_profiling"]
        return {"MemorySnapshot": snap, "MemoryProfilingResult": res,
                "memory_profiling": contextlib.contextmanager(prof), "format_gib": fmt,
                "torch": torch, "platform": platform}

    # -- requested memory ---------------------------------------------------------------------
    def _init_snapshot(self, c: BudgetCase, dev: FakeDevice, mc: Dict[str, Any]) -> Any:
        if self.v >= (0, 14):
            return mc["MemorySnapshot"](device=0)
        return mc["MemorySnapshot"]()

    def request(self, c: BudgetCase, dev: FakeDevice, mc: Dict[str, Any]) -> Tuple[Any, Any, Optional[str]]:
        """(init_snapshot, requested_memory, ValueError text or None)."""
        cache_config = _Cfg(gpu_memory_utilization=c.util, kv_cache_memory_bytes=c.kv_cache_memory_bytes)
        if not self.old_request:
            m = "vllm/v1/worker/utils.py"
            fn = self._cached("request_memory", lambda: loader.compile_defs(
                self.text(m), self.origin(m), ["request_memory"], {
                    "math": math, "format_gib": mc["format_gib"], "logger": _Logger(),
                    "MemorySnapshot": mc["MemorySnapshot"], "CacheConfig": Any})["request_memory"])
            snap = self._init_snapshot(c, dev, mc)
            try:
                if c.external_weights:
                    return snap, fn(snap, cache_config, c.external_weights), None
                return snap, fn(snap, cache_config), None
            except ValueError as exc:
                return snap, None, str(exc)
        # 0.10 / 0.11: inline in Worker.init_device; stop at the model-runner construction.
        m = "vllm/v1/worker/gpu_worker.py"

        def runner(*_a: Any, **_k: Any) -> Any:
            raise _Stop()

        fn = self._cached("init_device", lambda: loader.compile_defs(self.text(m), self.origin(m), ["Worker.init_device"], {
            "os": types.SimpleNamespace(environ={}), "torch": mc["torch"], "current_platform": mc["platform"],
            "init_worker_distributed_environment": lambda *a, **k: None, "set_random_seed": lambda *a: None,
            "_check_if_gpu_supports_dtype": lambda *a: None,
            "gc": _GC, "MemorySnapshot": mc["MemorySnapshot"], "GiB_bytes": GiB, "GPUModelRunner": runner,
            "report_usage_stats": lambda *a: None, "init_workspace_manager": lambda *a, **k: None,
        }, {"vllm.v1.worker.gpu_model_runner": types.SimpleNamespace(GPUModelRunner=runner)})["init_device"])
        worker = loader.make_host("Worker", {}, {
            # 0.12/0.13 test ``isinstance(device, torch.device)``: the fake torch's device class
            "device_config": _Cfg(device=mc["torch"].device("cuda:0")), "local_rank": 0, "rank": 0,
            "parallel_config": _Cfg(data_parallel_size=1, data_parallel_size_local=1, local_world_size=1,
                                    distributed_executor_backend=None),
            "use_v2_model_runner": False,
            "model_config": _Cfg(dtype="bfloat16", seed=0), "distributed_init_method": "",
            "vllm_config": _Cfg(parallel_config=_Cfg(data_parallel_backend="mp", nnodes_within_dp=1, enable_dbo=False,
                                                     data_parallel_size=1, data_parallel_size_local=1)),
            "cache_config": cache_config,
        })
        try:
            fn(worker)
        except _Stop:
            return worker.init_snapshot, worker.requested_memory, None
        except ValueError as exc:
            return worker.init_snapshot, None, str(exc)
        raise AssertionError("init_device returned without constructing the model runner")

    # -- available KV memory --------------------------------------------------------------------
    def budget(self, c: BudgetCase) -> BudgetResult:
        dev = self.dev.reset(c.total, c.init_free + c.torch_at_init)
        dev.alloc(c.torch_at_init)  # free at init_snapshot = c.init_free
        dev.empty_cache()
        mc = self._mem_classes()
        snap, requested, err = self.request(c, dev, mc)
        if err is not None:
            return BudgetResult(None, err)
        # load_model: weights stay allocated
        dev.alloc(c.weights)
        dev.non_torch(c.non_torch_before_profile)
        self.case = c
        fn = self._cached("determine_available_memory", lambda: self._build_determine(mc))
        runner = types.SimpleNamespace(model_memory_usage=c.weights, profile_run=self._profile_run,
                                       profile_cudagraph_memory=self._profile_cudagraph_memory)
        worker = loader.make_host("Worker", fn, {
            "cache_config": _Cfg(gpu_memory_utilization=c.util, kv_cache_memory_bytes=c.kv_cache_memory_bytes),
            "init_snapshot": snap, "requested_memory": requested, "model_runner": runner,
            "device": _Dev(0), "rank": 0, "randomize_dummy_inputs": False, "use_v2_model_runner": False,
            "vllm_config": _Cfg(compilation_config=_Cfg(
                cudagraph_mode=_CUDAGraphMode.NONE if c.cudagraph_mode_none else _CUDAGraphMode.PIECEWISE,
                cudagraph_mm_encoder=False)),
            "model_config": _Cfg(multimodal_config=None, enforce_eager=c.cudagraph_mode_none),
            "parallel_config": _Cfg(_api_process_count=1, world_size=1),
        })
        available = worker.determine_available_memory()
        return BudgetResult(requested, None, available, weights_memory=c.weights,
                            cudagraph_estimate=getattr(worker, "cudagraph_memory_estimate", None))

    def _profile_run(self, *_a: Any, **_k: Any) -> None:
        c, dev = self.case, self.dev
        dev.alloc(c.persistent)
        dev.alloc(c.activation)
        dev.release(c.activation)
        dev.non_torch(c.non_torch_profile)
        dev.pin(c.pinned)

    def _profile_cudagraph_memory(self) -> int:
        c, dev = self.case, self.dev
        dev.alloc(c.cudagraph_torch_peak)
        dev.release(c.cudagraph_torch_peak)
        dev.empty_cache()
        return c.cudagraph

    def _build_determine(self, mc: Dict[str, Any]) -> Dict[str, Any]:
        m = "vllm/v1/worker/gpu_worker.py"
        text, origin = self.text(m), self.origin(m)
        stand_ins: Dict[str, Any] = {
            "torch": mc["torch"], "memory_profiling": mc["memory_profiling"], "logger": _Logger(), "gc": _GC,
            "current_platform": mc["platform"], "GiB_bytes": GiB,
            "envs": _Envs(self), "CUDAGraphMode": _CUDAGraphMode, "nullcontext": contextlib.nullcontext,
            "set_current_vllm_config": lambda *a, **k: contextlib.nullcontext(),
        }
        if mc["format_gib"] is not None:
            stand_ins["format_gib"] = mc["format_gib"]
        names = ["Worker.determine_available_memory"]
        if loader.has_def(text, origin, "maybe_rocm_profiling_fallback"):
            names.append("maybe_rocm_profiling_fallback")
        if loader.has_def(text, origin, "Worker._reserve_mm_ipc_gpu_memory"):
            names.append("Worker._reserve_mm_ipc_gpu_memory")
        if "maybe_apply_startup_plan" in text:
            sp = "vllm/v1/worker/startup_plan.py"
            stand_ins["maybe_apply_startup_plan"] = loader.compile_defs(
                self.text(sp), self.origin(sp), ["maybe_apply_startup_plan"],
                {"envs": _Envs(self)})["maybe_apply_startup_plan"]
        if "reserve_mm_ipc_gpu_memory(" in text.replace("_reserve_mm_ipc_gpu_memory(", ""):
            ipc = "vllm/multimodal/gpu_ipc_memory.py"
            stand_ins["reserve_mm_ipc_gpu_memory"] = loader.compile_defs(
                self.text(ipc), self.origin(ipc), ["reserve_mm_ipc_gpu_memory"],
                {"GiB_bytes": GiB, "logger": _Logger()})["reserve_mm_ipc_gpu_memory"]
        fns = loader.compile_defs(text, origin, names, stand_ins)
        methods = {k: f for k, f in fns.items() if k in ("determine_available_memory", "_reserve_mm_ipc_gpu_memory")}

        @contextlib.contextmanager
        def scoped(*_a: Any, **_k: Any):
            yield

        methods["_scoped_allocator_max_split"] = scoped
        return methods

    # -- batch defaults -----------------------------------------------------------------------
    def prefix_caching_decided_in_engine_args(self) -> bool:
        """0.19+: ``_set_default_chunked_prefill_and_prefix_caching_args`` from ModelConfig properties.
        0.10-0.11 set True there for every generate model and the model's own config class turns it
        off later (``models/config.py``), so it is not compared for them."""
        m = "vllm/engine/arg_utils.py"
        return loader.has_def(self.text(m), self.origin(m), "EngineArgs.get_batch_defaults")

    def _model_config(self, max_model_len: int, is_hybrid: bool) -> Any:
        m = "vllm/config/model.py"
        text, origin = self.text(m), self.origin(m)
        names = ["ModelConfig.attn_type", "ModelConfig.is_chunked_prefill_supported",
                 "ModelConfig.is_prefix_caching_supported"]
        fns = self._cached("model_config_props", lambda: loader.compile_defs(text, origin, names, {"logger": _Logger()}))
        return loader.make_host("ModelConfig", {k: f if isinstance(f, property) else property(f) for k, f in fns.items()}, dict(
            runner_type="generate", max_model_len=max_model_len, pooler_config=None, is_hybrid=is_hybrid,
            is_attention_free=False, is_encoder_decoder=False, is_multimodal_model=False,
            is_mm_prefix_lm=False, hf_config=_Cfg(is_causal=True)))

    def batch_defaults(self, *, gpu_total: int, gpu_name: str, capability: Tuple[int, int], api_server: bool,
                       max_num_batched_tokens: Optional[int], max_num_seqs: Optional[int],
                       enable_chunked_prefill: Optional[bool], max_model_len: int, tp: int = 1, pp: int = 1,
                       is_hybrid: bool = False, performance_mode: str = "balanced") -> Tuple[int, int, bool, Optional[bool]]:
        """(max_num_batched_tokens, max_num_seqs, enable_chunked_prefill, enable_prefix_caching)
        after EngineArgs' defaults for a generate (non-pooling) model."""
        m = "vllm/engine/arg_utils.py"
        text, origin = self.text(m), self.origin(m)
        platform = self._cached("batch_platform", _Platform)
        platform.name, platform.total, platform.capability = gpu_name, gpu_total, capability
        usage = _UsageContext.OPENAI_API_SERVER if api_server else _UsageContext.LLM_CLASS
        usage_mod = types.SimpleNamespace(UsageContext=_UsageContext)
        sched = self._cached("sched", self._scheduler_consts)
        stand_ins = {"current_platform": platform, "GiB_bytes": GiB, "logger": _Logger(), "sys": sys,
                     "SchedulerConfig": sched, "EngineArgs": types.SimpleNamespace(scheduler_cls="default")}
        modules = {"vllm.usage.usage_lib": usage_mod}
        attrs = dict(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                     enable_chunked_prefill=enable_chunked_prefill, enable_prefix_caching=None,
                     enable_prompt_embeds=False, scheduler_cls="default", tensor_parallel_size=tp,
                     pipeline_parallel_size=pp, performance_mode=performance_mode,
                     prefill_context_parallel_size=1, decode_context_parallel_size=1)  # read by 0.12
        if self.prefix_caching_decided_in_engine_args():
            model_config = self._model_config(max_model_len, is_hybrid)
            names = ["EngineArgs.get_batch_defaults", "EngineArgs._set_default_chunked_prefill_and_prefix_caching_args",
                     "EngineArgs._set_default_max_num_seqs_and_batched_tokens_args"]
            stand_ins["CpuArchEnum"] = types.SimpleNamespace(RISCV="riscv")
            fns = self._cached("batch_v2", lambda: loader.compile_defs(text, origin, names, stand_ins, modules))
            host = loader.make_host("EngineArgs", {"get_batch_defaults": fns["get_batch_defaults"]}, attrs)
            host._set_default_chunked_prefill_and_prefix_caching_args = types.MethodType(
                fns["_set_default_chunked_prefill_and_prefix_caching_args"], host)
            host._set_default_chunked_prefill_and_prefix_caching_args(model_config)
            setter = fns["_set_default_max_num_seqs_and_batched_tokens_args"]
            code = setter.__code__
            if "parallel_config" in code.co_varnames[:code.co_argcount]:
                setter(host, usage, model_config, _Cfg(use_batched_dp_moe=False))
            else:
                setter(host, usage, model_config)
        else:
            model_config = _Cfg(runner_type="generate", max_model_len=max_model_len)
            name = "EngineArgs._set_default_args" if loader.has_def(text, origin, "EngineArgs._set_default_args") \
                else "EngineArgs._set_default_args_v1"
            fn = self._cached("batch_v1", lambda: loader.compile_defs(text, origin, [name], stand_ins, modules)[
                name.split(".")[-1]])
            host = loader.make_host("EngineArgs", {}, attrs)
            fn(host, usage, model_config)
        return host.max_num_batched_tokens, host.max_num_seqs, host.enable_chunked_prefill, host.enable_prefix_caching

    def _scheduler_consts(self) -> Any:
        m = "vllm/config/scheduler.py"
        text, origin = self.text(m), self.origin(m)
        tree = loader._parse(text, origin)
        cls = loader._find_in(tree.body, "SchedulerConfig", ast.ClassDef)
        out: Dict[str, Any] = {}
        for stmt in cls.body:
            tgt = stmt.target if isinstance(stmt, ast.AnnAssign) else (
                stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
            if isinstance(tgt, ast.Name) and tgt.id.startswith("DEFAULT_") and stmt.value is not None:
                try:
                    out[tgt.id] = ast.literal_eval(stmt.value)
                except ValueError:
                    pass
        return types.SimpleNamespace(**out)


class _Envs:
    """``vllm.envs`` with every variable at the default ``vllm/envs.py`` gives it."""

    def __init__(self, engine: VllmMem):
        object.__setattr__(self, "_engine", engine)

    def __getattr__(self, item: str) -> Any:
        return self._engine.env(item)


class _CUDAGraphMode:
    NONE = "NONE"
    PIECEWISE = "PIECEWISE"
    FULL = "FULL"


class _UsageContext:
    class _U:
        def __init__(self, value: str):
            self.value = value

        def __repr__(self) -> str:
            return self.value

    LLM_CLASS = _U("LLM_CLASS")
    OPENAI_API_SERVER = _U("OPENAI_API_SERVER")
    UNKNOWN_CONTEXT = _U("UNKNOWN_CONTEXT")


def mem_members(version: str) -> Tuple[str, ...]:
    v = vtuple(version)
    out = ["vllm/v1/worker/gpu_worker.py", "vllm/v1/worker/utils.py", "vllm/envs.py", "vllm/config/cache.py"]
    out.append("vllm/utils/mem_utils.py" if v >= (0, 12) else "vllm/utils/__init__.py")
    if v >= (0, 26):
        out += ["vllm/v1/worker/startup_plan.py", "vllm/multimodal/gpu_ipc_memory.py"]
    return tuple(out)


def args_members(version: str) -> Tuple[str, ...]:
    model = "vllm/config/model.py" if vtuple(version) >= (0, 11) else "vllm/config/__init__.py"
    return ("vllm/engine/arg_utils.py", "vllm/config/scheduler.py", "vllm/config/cache.py", "vllm/envs.py", model)


def engine(version: str) -> VllmMem:
    return VllmMem(version)


# ---------------------------------------------------------------------------------------------
# max_model_len from the HF config
# ---------------------------------------------------------------------------------------------

# transformers' ALLOWED_(ATTENTION_)LAYER_TYPES (configuration_utils.py, 4.57 / 5.x)
_HF_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


class _HFConfig:
    """A loaded ``PretrainedConfig``: the config.json keys as attributes (absent key = no attribute)."""

    def __init__(self, d: Dict[str, Any], transformers_v5: bool = False):
        import copy
        self.__dict__.update(copy.deepcopy(d))
        self.__dict__.setdefault("model_type", "llama")
        if transformers_v5 and getattr(self, "rope_scaling", None) and not getattr(self, "rope_parameters", None):
            # transformers v5 loads a legacy ``rope_scaling`` as ``rope_parameters``
            self.rope_parameters = copy.deepcopy(self.rope_scaling)

    def standardize_rope_params(self) -> None:
        """transformers v5 (stand-in): legacy ``rope_scaling`` becomes ``rope_parameters``; a RoPE
        model without one gets ``{"rope_type": "default"}``; ``rope_theta`` moves in."""
        rp = getattr(self, "rope_parameters", None)
        if not rp:
            rs = getattr(self, "rope_scaling", None)
            rp = dict(rs) if rs else {"rope_type": "default"}
        if not all(isinstance(v, dict) for v in rp.values()) or not set(rp) <= set(_HF_LAYER_TYPES):
            rp.setdefault("rope_type", rp.get("type", "default"))
            if getattr(self, "rope_theta", None) is not None:
                rp.setdefault("rope_theta", self.rope_theta)
        self.rope_parameters = rp

    def validate_rope(self) -> None:
        pass


def maxlen_members(version: str) -> Tuple[str, ...]:
    v = vtuple(version)
    out = ["vllm/transformers_utils/config.py", "vllm/envs.py"]
    out.append("vllm/config/model.py" if v >= (0, 11) else "vllm/config/__init__.py")
    if v >= (0, 12):  # absent members are recorded (the convertor arrived later than patch_rope_parameters)
        out += ["vllm/transformers_utils/model_arch_config_convertor.py", "vllm/config/utils.py"]
    return tuple(out)


class _MaxLen:
    """``_get_and_verify_max_len`` of one release, with the release's own config patching."""

    def __init__(self, eng: VllmMem):
        self.eng = eng
        v = eng.v
        model_m = "vllm/config/model.py" if v >= (0, 11) else "vllm/config/__init__.py"
        tu = "vllm/transformers_utils/config.py"
        tu_text, tu_origin = eng.text(tu), eng.origin(tu)
        self.allow_long = False
        envs = types.SimpleNamespace()
        platform = types.SimpleNamespace(is_tpu=lambda: False, check_max_model_len=lambda n: n)
        stand = {"logger": _Logger(), "current_platform": platform, "envs": envs}
        if loader.has_def(tu_text, tu_origin, "patch_rope_parameters"):  # rope_parameters era (0.12+)
            cu = "vllm/config/utils.py"
            getattr_iter = loader.compile_defs(eng.text(cu), eng.origin(cu), ["getattr_iter"],
                                               {"logger": _Logger()})["getattr_iter"]
            utils_mod = types.SimpleNamespace(getattr_iter=getattr_iter)
            names = ["patch_rope_parameters"]
            for extra in ("is_rope_parameters_nested", "patch_rope_parameters_dict", "patch_legacy_rope_type",
                          "iter_rope_parameters"):
                if loader.has_def(tu_text, tu_origin, extra):
                    names.append(extra)
            self.patch_fns = loader.compile_defs(tu_text, tu_origin, names, {
                "logger": _Logger(), "ALLOWED_ATTENTION_LAYER_TYPES": _HF_LAYER_TYPES,
                "ALLOWED_LAYER_TYPES": _HF_LAYER_TYPES, "Version": _Version, "version": lambda _p: "4.57.1",
            }, {"vllm.config.utils": utils_mod})
            self.patch = self.patch_fns["patch_rope_parameters"]
            conv = "vllm/transformers_utils/model_arch_config_convertor.py"
            self.derive = None
            if eng.src.has(conv):
                self.derive = loader.compile_defs(eng.text(conv), eng.origin(conv),
                                                  ["ModelArchConfigConvertorBase.derive_max_model_len_and_key"],
                                                  {})["derive_max_model_len_and_key"]
            stand.update({k: f for k, f in self.patch_fns.items()})
            stand["ALLOWED_LAYER_TYPES"] = _HF_LAYER_TYPES  # 0.12/0.13 model.py imports it from transformers
        else:
            fns = loader.compile_defs(tu_text, tu_origin, ["patch_rope_scaling", "patch_rope_scaling_dict"],
                                      {"logger": _Logger()})
            self.patch = fns["patch_rope_scaling"]
            self.derive = None
        self.fn = loader.compile_defs(eng.text(model_m), eng.origin(model_m), ["_get_and_verify_max_len"],
                                      stand)["_get_and_verify_max_len"]
        self.envs = envs

    def __call__(self, config: Dict[str, Any], user: Optional[int], allow_long: bool = False
                 ) -> Tuple[Optional[int], Optional[str]]:
        self.envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN = allow_long
        # vLLM >= 0.26 requires transformers >= 5.5.3 (wheel METADATA); 0.19-0.20 allow 4.56+: the
        # pure-vLLM transformers-v4 branch of patch_rope_parameters runs for them.
        hf = _HFConfig(config, transformers_v5=self.eng.transformers_v5())
        try:
            self.patch(hf)
        except ValueError as exc:
            return None, "patch: " + str(exc)
        kwargs: Dict[str, Any] = dict(tokenizer_config=None, max_model_len=user, disable_sliding_window=False,
                                      sliding_window=None)
        if self.derive is not None:
            arch = types.SimpleNamespace(derived_max_model_len_and_key=self.derive(
                types.SimpleNamespace(hf_text_config=hf, hf_config=hf)))
            kwargs["model_arch_config"] = arch
        try:
            return self.fn(hf, **kwargs), None
        except ValueError as exc:
            return None, str(exc)
        except TypeError as exc:  # e.g. ``derived *= None`` (rope_scaling.factor: null) before 0.18
            return None, f"TypeError: {exc}"
        except KeyError as exc:  # ``rp["rope_type"]`` on an unpatched nested dict (0.22-0.23)
            return None, f"TypeError: KeyError {exc}"


class _Version:
    def __init__(self, s: str):
        self.t = vtuple(s)

    def __lt__(self, other: "_Version") -> bool:
        return self.t < other.t


def max_len(eng: VllmMem) -> _MaxLen:
    return eng._cached("max_len", lambda: _MaxLen(eng))


# ---------------------------------------------------------------------------------------------
# block size default (classic: CudaPlatformBase.check_and_update_config, 0.10-0.11)
# ---------------------------------------------------------------------------------------------

def has_classic_block_rule(eng: VllmMem) -> bool:
    """0.10-0.11 set the default block size (16, MLA backends 64/128) in the CUDA platform's
    ``check_and_update_config``; from 0.19 the attention-backend registry decides
    (``Platform.update_block_size_for_backend``), which is not run here."""
    text = eng.text("vllm/platforms/cuda.py")
    return "cache_config.block_size = 16" in text


def block_members(version: str) -> Tuple[str, ...]:
    return ("vllm/platforms/cuda.py", "vllm/attention/ops/flashmla.py", "vllm/envs.py")


class _CapPlatform(_Platform):
    def is_device_capability(self, cap: Any, *_a: Any) -> bool:
        if isinstance(cap, int):
            return cap == self.capability[0] * 10 + self.capability[1]
        return tuple(cap) == tuple(self.capability)


def block_size_classic(eng: VllmMem, *, user_block_size: Optional[int], use_mla: bool,
                       capability: Tuple[int, int], sparse: bool) -> int:
    """``cache_config.block_size`` after ``CudaPlatformBase.check_and_update_config`` (V1 worker,
    no ``VLLM_ATTENTION_BACKEND`` set, the FlashMLA extension compiled as in the wheel)."""
    platform = eng._cached("block_platform", _CapPlatform)
    platform.capability = capability

    def build() -> Any:
        fm = "vllm/attention/ops/flashmla.py"
        is_fm = loader.compile_defs(eng.text(fm), eng.origin(fm), ["is_flashmla_supported"], {
            "current_platform": platform, "_flashmla_C_AVAILABLE": True})["is_flashmla_supported"]
        envs = types.SimpleNamespace(VLLM_USE_V1=True, VLLM_ATTENTION_BACKEND=None,
                                     VLLM_ALL2ALL_BACKEND=eng.env("VLLM_ALL2ALL_BACKEND"))
        m = "vllm/platforms/cuda.py"
        modules = {"vllm.attention.ops.flashmla": types.SimpleNamespace(is_flashmla_supported=is_fm),
                   "vllm.config": types.SimpleNamespace(CUDAGraphMode=_CUDAGraphMode)}
        fn = loader.compile_defs(eng.text(m), eng.origin(m), ["CudaPlatformBase.check_and_update_config"],
                                 {"envs": envs, "logger": _Logger()}, modules)["check_and_update_config"]
        return fn, envs

    fn, envs = eng._cached("block_fn", build)
    envs.VLLM_ATTENTION_BACKEND = None  # the engine sets it to CUTLASS_MLA on Blackwell
    cache_config = _Cfg(block_size=user_block_size)
    hf = _Cfg(index_topk=2048) if sparse else _Cfg()
    vllm_config = _Cfg(
        parallel_config=_Cfg(worker_cls="auto", data_parallel_size=1), speculative_config=None,
        model_config=_Cfg(use_mla=use_mla, hf_config=hf, enforce_eager=False), cache_config=cache_config,
        compilation_config=_Cfg(cudagraph_mode=_CUDAGraphMode.PIECEWISE))
    cls = type("CudaPlatform", (), {"is_device_capability": classmethod(_CapPlatform.is_device_capability),
                                    "capability": capability})
    fn.__func__(cls, vllm_config) if hasattr(fn, "__func__") else fn(cls, vllm_config)
    return cache_config.block_size
