"""SGLang's pool-sizing code around and after the profile, per release, runnable without torch or a GPU.

Covers what ``sglang_engine.py`` does not. Each entry point takes a plain case, builds stand-in
``self`` objects, and runs the release's own code (extracted with :mod:`loader`, strict globals):

* :meth:`SGLangPools.request_pools`: ``max_num_reqs`` / ``max_running_requests``, the ``req_to_token``
  table (its rows and row length, via the release's ``ReqToTokenPool.__init__``), the classic
  speculative headroom, the ``--max-total-tokens`` cap, page rounding and the mamba request cap.
  * <=0.5.6: ``ModelRunner.init_memory_pool`` (model_runner.py), sliced up to the req pool, plus the
    ``self.max_running_requests = min(...)`` statement of ``TpModelWorker.__init__``.
  * 0.5.9: mixin ``init_memory_pool`` plus the statement of ``ModelRunner.initialize`` (l.593).
  * 0.5.13/0.5.14: mixin ``_resolve_memory_pool_config`` and friends, plus ``mem_cache/common.py``.
  * 0.5.18+: ``KVCacheConfigurator._resolve_memory_pool_config`` and friends, plus
    ``allocation_sizing.py``.
* :meth:`SGLangPools.mamba`: ``handle_max_mamba_cache`` / ``_handle_max_mamba_cache`` (the carve).
* :meth:`SGLangPools.mamba_per_req`: ``Mamba2StateShape.create`` + ``mamba_cache_per_req``.
* :meth:`SGLangPools.profile_mm`: the profile with ``mm_runtime_reservation_gb`` and the carve.
* :meth:`SGLangPools.swa`: the hybrid sliding-window split.
  * 0.5.6: ``set_num_token_hybrid``.
  * 0.5.9: ``set_num_tokens_hybrid_swa``.
  * 0.5.13+: ``HybridSWAPoolConfigurator`` and the request-cap configurators, chosen by the
    release's ``create_memory_pool_configurator``.
* :meth:`SGLangPools.cell`: cell variants (DSA indexer, FP4, mxfp8, drafts in the budget).

Stand-ins replace only what is not arithmetic:
* the profile result. ``profile_max_num_token`` returns the case's token count; the current
  path's ``_profile_available_bytes`` returns it as bytes with a 1-byte cell, so the real
  ``calculate_pool_sizes`` does the page rounding;
* ``torch.zeros``, which records the shape;
* the memory saver;
* ``SpeculativeAlgorithm``, reduced to name predicates: ``is_eagle`` = EAGLE/EAGLE3,
  ``has_draft_kv`` = not NGRAM;
* architecture predicates (``is_deepseek_dsa``);
* env flags at their defaults. Numeric defaults are read from the release's ``environ.py``.

Nothing else defaults: a missing name raises.
"""
from __future__ import annotations

import contextlib
import logging
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from . import loader
from .sglang_engine import _Env, _vtuple
from .wheels import EngineSource, engine_source

log = logging.getLogger("kvscope.conformance.sglang.pools")
log.setLevel(logging.ERROR)


# ---------------------------------------------------------------------------------------------
# stand-ins
# ---------------------------------------------------------------------------------------------

class FakeTensor:
    def __init__(self, shape: Any, dtype: Any):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.dtype = dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.dtype.itemsize


class _Dtype:
    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize


def fake_torch() -> Any:
    t = types.SimpleNamespace(int32=_Dtype("int32", 4), int64=_Dtype("int64", 8), float32=_Dtype("float32", 4),
                              bfloat16=_Dtype("bfloat16", 2), uint8=_Dtype("uint8", 1))
    t.zeros = lambda shape, dtype=None, device=None, **kw: FakeTensor(shape, dtype)
    t.empty = t.zeros
    return t


class _SaverAdapter:
    @staticmethod
    def create(enable: bool = False) -> "_SaverAdapter":
        return _SaverAdapter()

    def region(self, *a: Any, **k: Any) -> Any:
        return contextlib.nullcontext()


class SpecAlgo:
    """``SpeculativeAlgorithm`` after server-args resolution (NEXTN is already EAGLE there)."""

    def __init__(self, name: Optional[str]):
        self.name = (name or "NONE").upper()

    @classmethod
    def from_string(cls, name: Optional[str]) -> "SpecAlgo":
        return cls(name)

    def is_none(self) -> bool:
        return self.name == "NONE"

    def is_some(self) -> bool:
        return not self.is_none()

    def is_eagle(self) -> bool:
        return self.name in ("EAGLE", "EAGLE3")

    def is_standalone(self) -> bool:
        return self.name == "STANDALONE"

    def is_ngram(self) -> bool:
        return self.name == "NGRAM"

    def is_dflash(self) -> bool:
        return self.name == "DFLASH"

    def is_dflash_family(self) -> bool:
        return self.name in ("DFLASH", "DSPARK")

    def is_uno(self) -> bool:
        return self.name == "UNO"

    def has_draft_kv(self) -> bool:
        return not self.is_ngram()


class _Recorder:
    """A KV pool / allocator class stand-in: records its size argument."""

    def __init__(self, *args: Any, **kw: Any):
        self.args, self.kw = args, kw


# ---------------------------------------------------------------------------------------------
# request pools
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReqCase:
    profiled_tokens: int  # classic: profile_max_num_token's value; current: bytes with a 1-byte cell
    context_len: int
    page_size: int = 1
    max_total_tokens: Optional[int] = None
    max_running_requests: Optional[int] = None
    dp_size: int = 1
    enable_dp_attention: bool = False
    speculative_algorithm: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    mem_fraction_static: float = 0.88
    max_mamba_cache_size: Optional[int] = None  # a mamba-ish model: the carve's result (per DP worker)
    disable_radix_cache: bool = False


@dataclass
class ReqResult:
    max_total_num_tokens: Optional[int]
    req_pool_size: Optional[int]
    req_rows: Optional[int]
    req_row_len: Optional[int]
    req_to_token_bytes: Optional[int]
    max_running_requests: Optional[int]
    error: Optional[str] = None


def req_members(version: str) -> tuple:
    v = _vtuple(version)
    out = ["sglang/srt/mem_cache/memory_pool.py"]
    if v < (0, 5, 9):
        out += ["sglang/srt/model_executor/model_runner.py", "sglang/srt/managers/tp_worker.py"]
    elif v < (0, 5, 10):
        out += ["sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
                "sglang/srt/model_executor/model_runner.py"]
    elif v < (0, 5, 18):
        out += ["sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
                "sglang/srt/model_executor/pool_configurator.py", "sglang/srt/mem_cache/common.py"]
    else:
        out += ["sglang/srt/mem_cache/kv_cache_configurator.py", "sglang/srt/model_executor/pool_configurator.py",
                "sglang/srt/mem_cache/allocation_sizing.py", "sglang/srt/runtime_context.py"]
    return tuple(out)


def _body_slice(text: str, origin: str, qualname: str, *, last: Callable[[Any], bool],
                first: Optional[Callable[[Any], bool]] = None, params: Optional[List[str]] = None,
                stand_ins: Dict[str, Any]) -> Callable[..., Any]:
    """Compile statements of ``qualname``'s body (from ``first`` to ``last`` inclusive) as a function.

    The statements keep their line numbers (tracebacks point at the engine file)."""
    ast = loader.ast
    fn = loader.find_def(loader._parse(text, origin), qualname)
    body = fn.body
    start = 0 if first is None else next(i for i, s in enumerate(body) if first(s))
    end = next(i for i, s in enumerate(body) if i >= start and last(s))
    args = fn.args if params is None else ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=p) for p in params], kwonlyargs=[], kw_defaults=[], defaults=[])
    new = ast.FunctionDef(name="_slice", args=args, body=body[start:end + 1], decorator_list=[], returns=None,
                          type_comment=None)
    mod = ast.Module(body=[new], type_ignores=[])
    ast.fix_missing_locations(mod)
    g = loader.StrictGlobals(origin, dict(loader.module_literals(text, origin), **stand_ins))
    local: Dict[str, Any] = {}
    exec(compile(mod, origin, "exec"), g, local)
    return local["_slice"]


def _is_req_pool_stmt(s: Any) -> bool:
    return isinstance(s, loader.ast.If) and "self.req_to_token_pool is None" in loader.ast.unparse(s.test)


def _assigns_running(s: Any) -> bool:
    return (isinstance(s, loader.ast.Assign) and len(s.targets) == 1
            and loader.ast.unparse(s.targets[0]) == "self.max_running_requests"
            and "min(" in loader.ast.unparse(s.value))


class SGLangPools:
    """One release: the request-pool / mamba / reservation code."""

    def __init__(self, version: str):
        self.version = version
        self.v = _vtuple(version)
        self.src: EngineSource = engine_source("sglang", version)
        self._compiled: Dict[str, Any] = {}
        self._case: Any = None

    def _text(self, member: str) -> str:
        return self.src.read(member)

    def origin(self, member: str) -> str:
        return f"{self.src.label}/{member}"

    # -- ReqToTokenPool ---------------------------------------------------------------------
    def _req_pool_cls(self) -> type:
        if "req_pool" not in self._compiled:
            m = "sglang/srt/mem_cache/memory_pool.py"
            fns = loader.compile_defs(self._text(m), self.origin(m), ["ReqToTokenPool.__init__"], {
                "torch": fake_torch(), "TorchMemorySaverAdapter": _SaverAdapter,
                "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache"})
            self._compiled["req_pool"] = type("ReqToTokenPool", (), {"__init__": fns["__init__"]})
        return self._compiled["req_pool"]

    def _hybrid_req_pool_cls(self) -> type:
        """``HybridReqToTokenPool``: its req_to_token table is ``ReqToTokenPool.__init__(size, max_context_len)``
        (``super().__init__``, memory_pool.py @ v0.5.6/0.5.9); its mamba state pool is the carve."""
        base = self._req_pool_cls()

        def init(pool: Any, *, size: int, max_context_len: int, device: str, enable_memory_saver: bool,
                 **_mamba: Any) -> None:
            base.__init__(pool, size=size, max_context_len=max_context_len, device=device,
                          enable_memory_saver=enable_memory_saver)

        return type("HybridReqToTokenPool", (base,), {"__init__": init})

    def _server_args(self, c: ReqCase) -> Any:
        sa = types.SimpleNamespace(
            kv_cache_dtype="auto", max_running_requests=c.max_running_requests, max_total_tokens=c.max_total_tokens,
            page_size=c.page_size, speculative_algorithm=c.speculative_algorithm,
            speculative_num_steps=c.speculative_num_steps, speculative_eagle_topk=c.speculative_eagle_topk,
            speculative_num_draft_tokens=c.speculative_num_draft_tokens,
            max_speculative_num_draft_tokens=c.speculative_num_draft_tokens, speculative_adaptive=False,
            disaggregation_mode="null", enable_memory_saver=False, mem_fraction_static=c.mem_fraction_static,
            disable_radix_cache=c.disable_radix_cache, enable_dp_attention=c.enable_dp_attention, dp_size=c.dp_size,
            max_mamba_cache_size=c.max_mamba_cache_size, disable_overlap_schedule=False,
            enable_mamba_extra_buffer=lambda: False, enable_mamba_extra_buffer_lazy=lambda: False)
        return sa

    def _mambaish(self, c: ReqCase) -> Any:
        if c.max_mamba_cache_size is None:
            return None
        return types.SimpleNamespace(mamba2_cache_params=None, full_attention_layer_ids=[])

    # -- entry point ------------------------------------------------------------------------
    def request_pools(self, c: ReqCase) -> ReqResult:
        self._case = c
        if self.v < (0, 5, 10):
            return self._classic(c)
        if self.v < (0, 5, 18):
            return self._mixin(c)
        return self._configurator(c)

    # 0.4.6.post5 - 0.5.9 -------------------------------------------------------------------
    def _classic(self, c: ReqCase) -> ReqResult:
        if "classic" not in self._compiled:
            self._compiled["classic"] = self._compile_classic()
        init_pool, running = self._compiled["classic"]
        sa = self._server_args(c)
        runner = types.SimpleNamespace(
            server_args=sa, model_config=types.SimpleNamespace(context_len=c.context_len),
            dtype="bfloat16", model=types.SimpleNamespace(quant_config=None), spec_algorithm=SpecAlgo(
                c.speculative_algorithm), is_draft_worker=False, mambaish_config=self._mambaish(c), pp_size=1,
            is_hybrid_swa=False, is_hybrid=False, is_hybrid_gdn=False,  # 0.5.3-0.5.5 names
            req_to_token_pool=None, device="cuda", page_size=c.page_size,
            dp_size=c.dp_size if c.enable_dp_attention else 1)
        runner.profile_max_num_token = lambda total_gpu_memory: c.profiled_tokens
        try:
            if self.v < (0, 5, 9):
                init_pool(runner, 0, c.max_running_requests, c.max_total_tokens)
            else:
                init_pool(runner, 0)
        except RuntimeError as exc:
            return ReqResult(None, None, None, None, None, None, f"RuntimeError: {exc}")
        pool = runner.req_to_token_pool
        if self.v < (0, 5, 9):  # TpModelWorker.__init__: self.model_runner.req_to_token_pool.size
            worker = types.SimpleNamespace(max_total_num_tokens=runner.max_total_num_tokens, model_runner=runner)
            running(worker, sa)
            n_running = worker.max_running_requests
        else:
            running(runner, sa)
            n_running = runner.max_running_requests
        t = pool.req_to_token
        return ReqResult(runner.max_total_num_tokens, pool.size, t.shape[0], t.shape[1], t.nbytes, n_running)

    def _compile_classic(self) -> tuple:
        torch = fake_torch()
        stand = {
            "torch": torch, "_is_hip": False, "is_cuda": lambda: True, "logging": log, "logger": log,
            "SGLANG_CI_SMALL_KV_SIZE": None, "ReqToTokenPool": self._req_pool_cls(),
            "log_info_on_rank0": lambda lg, msg: None, "HybridReqToTokenPool": self._hybrid_req_pool_cls(),
        }
        if self.v < (0, 5, 9):
            m = "sglang/srt/model_executor/model_runner.py"
            init_pool = _body_slice(self._text(m), self.origin(m), "ModelRunner.init_memory_pool",
                                    last=_is_req_pool_stmt, stand_ins=stand)
            w = "sglang/srt/managers/tp_worker.py"
            running = _body_slice(self._text(w), self.origin(w), "TpModelWorker.__init__", first=_assigns_running,
                                  last=_assigns_running, params=["self", "server_args"], stand_ins={})
        else:
            m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
            init_pool = _body_slice(self._text(m), self.origin(m), "ModelRunnerKVCacheMixin.init_memory_pool",
                                    last=_is_req_pool_stmt, stand_ins=stand)
            r = "sglang/srt/model_executor/model_runner.py"
            running = _body_slice(self._text(r), self.origin(r), "ModelRunner.initialize", first=_assigns_running,
                                  last=_assigns_running, params=["self", "server_args"], stand_ins={})
        return init_pool, running

    # 0.5.10 - 0.5.17: mixin + pool_configurator ---------------------------------------------
    def _pool_configurator(self, extra: Dict[str, Any]) -> Dict[str, Any]:
        pc = "sglang/srt/model_executor/pool_configurator.py"
        text = self._text(pc)
        mpc = loader.compile_defs(text, self.origin(pc), ["MemoryPoolConfig.__post_init__"], {})
        fields = loader.class_literal_defaults(text, self.origin(pc), "MemoryPoolConfig")

        def memory_pool_config(max_total_num_tokens: int, **kw: Any) -> Any:
            obj = types.SimpleNamespace(**dict(fields, max_total_num_tokens=max_total_num_tokens, **kw))
            mpc["__post_init__"](obj)
            return obj

        names = ["DefaultPoolConfigurator.calculate_pool_sizes",
                 "DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens"]
        fns = loader.compile_defs(text, self.origin(pc), names, dict(extra, MemoryPoolConfig=memory_pool_config))
        if loader.has_def(text, self.origin(pc), "MemoryPoolConfigurator.finalize_with_max_running_requests"):
            fns.update(loader.compile_defs(text, self.origin(pc),
                                           ["MemoryPoolConfigurator.finalize_with_max_running_requests"], {}))
        conf_cls = type("DefaultPoolConfigurator", (), fns)

        def create(mr: Any) -> Any:
            conf = conf_cls()
            conf._cell_size = 1  # the case's profiled "bytes" are tokens
            conf._fixed_overhead_bytes = 0
            conf._zero_kv_max_tokens = None
            return conf

        return {"create_memory_pool_configurator": create, "MemoryPoolConfig": memory_pool_config}

    def _mixin(self, c: ReqCase) -> ReqResult:
        if "mixin" not in self._compiled:
            self._compiled["mixin"] = self._compile_mixin()
        fns, extra_len = self._compiled["mixin"]
        sa = self._server_args(c)
        runner = types.SimpleNamespace(
            server_args=sa, model_config=types.SimpleNamespace(context_len=c.context_len),
            mambaish_config=self._mambaish(c), pp_size=1, dp_size=c.dp_size if c.enable_dp_attention else 1)
        runner._profile_available_bytes = lambda pre: c.profiled_tokens
        for name in ("_apply_token_constraints", "_resolve_max_num_reqs", "_calculate_mamba_ratio"):
            setattr(runner, name, types.MethodType(fns[name], runner))
        try:
            config = fns["_resolve_memory_pool_config"](runner, 0)
        except RuntimeError as exc:
            return ReqResult(None, None, None, None, None, None, f"RuntimeError: {exc}")
        # _init_pools (mixin): ReqToTokenPool(size=max_running_requests,
        #   max_context_len=context_len + get_req_to_token_extra_context_len(server_args))
        pool = self._req_pool_cls()(size=config.max_running_requests,
                                    max_context_len=c.context_len + extra_len(sa), device="cuda",
                                    enable_memory_saver=False)
        t = pool.req_to_token
        return ReqResult(config.max_total_num_tokens, pool.size, t.shape[0], t.shape[1], t.nbytes,
                         config.max_running_requests)

    def _compile_mixin(self) -> tuple:
        torch = fake_torch()
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        modules = {"sglang.srt.model_executor.pool_configurator":
                   types.SimpleNamespace(**self._pool_configurator({}))}
        fns = loader.compile_defs(self._text(m), self.origin(m), [
            "ModelRunnerKVCacheMixin._resolve_memory_pool_config", "ModelRunnerKVCacheMixin._apply_token_constraints",
            "ModelRunnerKVCacheMixin._resolve_max_num_reqs", "ModelRunnerKVCacheMixin._calculate_mamba_ratio"],
            {"torch": torch, "logging": log, "logger": log}, modules=modules)
        cm = "sglang/srt/mem_cache/common.py"
        names = ["get_req_to_token_extra_context_len", "get_alloc_reserve_per_decode", "get_alloc_len_per_decode"]
        spec_mod = types.SimpleNamespace(SpeculativeAlgorithm=SpecAlgo)
        common = loader.compile_defs(self._text(cm), self.origin(cm), names, {
            "get_global_server_args": lambda: self._server_args(self._case)},
            modules={"sglang.srt.speculative.spec_info": spec_mod})
        return fns, common["get_req_to_token_extra_context_len"]

    # 0.5.18+: KVCacheConfigurator ----------------------------------------------------------
    def _configurator(self, c: ReqCase) -> ReqResult:
        if "kvc" not in self._compiled:
            self._compiled["kvc"] = self._compile_configurator()
        fns = self._compiled["kvc"]
        kvc = types.SimpleNamespace(
            model_config=types.SimpleNamespace(context_len=c.context_len), mambaish_config=self._mambaish(c),
            attn_dp_size=c.dp_size if c.enable_dp_attention else 1, device="cuda")
        kvc.ps = types.SimpleNamespace(attn_dp_size=kvc.attn_dp_size)
        kvc._profile_available_bytes = lambda pre: c.profiled_tokens
        for name in ("config_from_budget", "_apply_token_constraints", "resolve_max_num_reqs",
                     "_build_default_req_pool", "_calculate_mamba_ratio"):
            setattr(kvc, name, types.MethodType(fns[name], kvc))
        try:
            config = fns["_resolve_memory_pool_config"](kvc, 0)
        except RuntimeError as exc:
            return ReqResult(None, None, None, None, None, None, f"RuntimeError: {exc}")
        if kvc.mambaish_config is None:
            pool = fns["_build_req_to_token_pool"](kvc, max_num_reqs=config.max_running_requests)
        else:  # _build_hybrid_req_pool: HybridReqToTokenPool's table is ReqToTokenPool's (super().__init__)
            pool = kvc._build_default_req_pool(max_num_reqs=config.max_running_requests,
                                               extra_max_context_len=fns["_extra_len"]())
        t = pool.req_to_token
        return ReqResult(config.max_total_num_tokens, pool.size, t.shape[0], t.shape[1], t.nbytes,
                         config.max_running_requests)

    def _schedule(self) -> Any:
        c = self._case
        return types.SimpleNamespace(max_total_tokens=c.max_total_tokens, page_size=c.page_size,
                                     max_running_requests=c.max_running_requests,
                                     mem_fraction_static=c.mem_fraction_static,
                                     max_mamba_cache_size=c.max_mamba_cache_size, disable_overlap_schedule=False)

    def _spec(self) -> Any:
        c = self._case
        return types.SimpleNamespace(speculative_algorithm=c.speculative_algorithm,
                                     speculative_num_steps=c.speculative_num_steps,
                                     speculative_eagle_topk=c.speculative_eagle_topk,
                                     speculative_num_draft_tokens=c.speculative_num_draft_tokens,
                                     max_speculative_num_draft_tokens=None, speculative_adaptive=False)

    def _compile_configurator(self) -> Dict[str, Any]:
        torch = fake_torch()
        common: Dict[str, Any] = {
            "get_schedule": self._schedule, "get_spec": self._spec,
            "get_parallel": lambda: types.SimpleNamespace(attn_dcp_size=1, attn_dp_size=1, pp_size=1),
            "get_memory": lambda: types.SimpleNamespace(enable_unified_memory=False,
                                                        disable_radix_cache=self._case.disable_radix_cache),
            "get_disagg": lambda: types.SimpleNamespace(disaggregation_mode="null", enable_pd_role_switch=False),
            "get_exec": lambda: types.SimpleNamespace(
                features=types.SimpleNamespace(enable_memory_saver=False),
                mamba=types.SimpleNamespace(enable_mamba_extra_buffer=False, enable_mamba_extra_buffer_lazy=False)),
            "envs": _Env({"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": False}),
            "mamba_extra_buffer_enabled": lambda: False, "mamba_extra_buffer_lazy_enabled": lambda: False,
            "configured_pp_size": lambda: 1, "torch": torch, "logging": log, "logger": log,
            "_is_npu": False, "ReqToTokenPool": self._req_pool_cls(),
        }
        # allocation_sizing.py: the release's own helpers, with runtime_context's
        # max_speculative_num_draft_tokens compiled from the same release.
        al = "sglang/srt/mem_cache/allocation_sizing.py"
        al_names = ["get_req_to_token_extra_context_len", "get_alloc_reserve_per_decode", "get_alloc_len_per_decode"]
        text = self._text(al)
        if loader.has_def(text, self.origin(al), "get_alloc_page_size"):
            al_names.append("get_alloc_page_size")
        mx = self._max_draft_tokens()
        spec_mod = types.SimpleNamespace(SpeculativeAlgorithm=SpecAlgo)
        alloc = loader.compile_defs(text, self.origin(al), al_names, dict(common, max_speculative_num_draft_tokens=mx),
                                    modules={"sglang.srt.speculative.spec_info": spec_mod})
        modules = {"sglang.srt.model_executor.pool_configurator":
                   types.SimpleNamespace(**self._pool_configurator({}))}
        m = "sglang/srt/mem_cache/kv_cache_configurator.py"
        names = ["KVCacheConfigurator._resolve_memory_pool_config", "KVCacheConfigurator.config_from_budget",
                 "KVCacheConfigurator._apply_token_constraints", "KVCacheConfigurator.resolve_max_num_reqs",
                 "KVCacheConfigurator._build_req_to_token_pool", "KVCacheConfigurator._build_default_req_pool",
                 "KVCacheConfigurator._calculate_mamba_ratio"]
        fns = loader.compile_defs(self._text(m), self.origin(m), names, dict(
            common, get_req_to_token_extra_context_len=alloc["get_req_to_token_extra_context_len"],
            is_deepseek_v4=lambda hf: False), modules=modules)
        fns["_extra_len"] = alloc["get_req_to_token_extra_context_len"]
        return fns

    def _max_draft_tokens(self) -> Callable[[], Optional[int]]:
        rc = "sglang/srt/runtime_context.py"
        if self.src.has(rc) and loader.has_def(self._text(rc), self.origin(rc), "max_speculative_num_draft_tokens"):
            return loader.compile_defs(self._text(rc), self.origin(rc), ["max_speculative_num_draft_tokens"],
                                       {"get_spec": self._spec})["max_speculative_num_draft_tokens"]
        raise loader.StandInMissing(f"{self.src.label}: no runtime_context.max_speculative_num_draft_tokens")


# ---------------------------------------------------------------------------------------------
# the mamba carve
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MambaCase:
    rest_gib: float  # rest_memory handed to handle_max_mamba_cache
    per_req_bytes: int  # mamba2_cache_params.mamba_cache_per_req
    mamba_full_memory_ratio: float = 0.9
    max_mamba_cache_size: Optional[int] = None
    disable_radix_cache: bool = False
    max_running_requests: Optional[int] = None
    dp_size: int = 1
    enable_dp_attention: bool = False
    speculative_algorithm: Optional[str] = None
    speculative_num_draft_tokens: Optional[int] = None
    is_gdn: bool = True  # Qwen3-Next-style (hybrid_gdn_config) vs Mamba2 (Nemotron-H / Falcon-H1)
    pp_size: int = 1  # with the model's state layer ids (0.5.18+ charge the largest stage's share)
    state_layer_ids: tuple = (0,)
    num_hidden_layers: int = 1


@dataclass
class MambaResult:
    rest_gib: Optional[float]
    max_mamba_cache_size: Optional[int]
    error: Optional[str] = None


def mamba_members(version: str) -> tuple:
    v = _vtuple(version)
    if v < (0, 5, 9):
        return ("sglang/srt/model_executor/model_runner.py",)
    if v < (0, 5, 18):
        return ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py",)
    return ("sglang/srt/mem_cache/kv_cache_configurator.py", "sglang/srt/distributed/utils.py")


def _pp_indices(self: SGLangPools) -> Any:
    """The release's ``get_pp_indices`` (distributed/utils.py), SGLANG_PP_LAYER_PARTITION unset."""
    m = "sglang/srt/distributed/utils.py"
    return loader.compile_defs(self._text(m), self.origin(m), ["get_pp_indices"], {
        "os": types.SimpleNamespace(getenv=lambda name, default=None: default)})["get_pp_indices"]


def _mamba_handle(self: SGLangPools, c: MambaCase) -> MambaResult:
    self._case = c
    if "mamba" not in self._compiled:
        self._compiled["mamba"] = _compile_mamba(self)
    fns = self._compiled["mamba"]
    attn_dp = c.dp_size if c.enable_dp_attention else 1
    cfg = types.SimpleNamespace(mamba2_cache_params=types.SimpleNamespace(
        mamba_cache_per_req=c.per_req_bytes, layers=list(c.state_layer_ids)))
    sa = types.SimpleNamespace(
        speculative_num_draft_tokens=c.speculative_num_draft_tokens, disable_radix_cache=c.disable_radix_cache,
        max_mamba_cache_size=c.max_mamba_cache_size, max_running_requests=c.max_running_requests,
        mamba_full_memory_ratio=c.mamba_full_memory_ratio, dp_size=c.dp_size,
        enable_dp_attention=c.enable_dp_attention, disable_overlap_schedule=False,
        enable_mamba_extra_buffer=lambda: False, enable_mamba_extra_buffer_lazy=lambda: False)
    host = types.SimpleNamespace(
        mambaish_config=cfg, server_args=sa, hybrid_gdn_config=object() if c.is_gdn else None,
        hybrid_kda_config=None, spec_algorithm=SpecAlgo(c.speculative_algorithm), dp_size=attn_dp,
        attn_dp_size=attn_dp, pp_size=c.pp_size, ps=types.SimpleNamespace(pp_size=c.pp_size, attn_dp_size=attn_dp),
        extra_mamba_cache_bytes_per_req=0,
        model_config=types.SimpleNamespace(num_hidden_layers=c.num_hidden_layers))
    host.fused_entry_bytes = lambda name: None
    if "_calculate_mamba_ratio" in fns:
        host._calculate_mamba_ratio = types.MethodType(fns["_calculate_mamba_ratio"], host)
    self._schedule_state = types.SimpleNamespace(
        max_mamba_cache_size=c.max_mamba_cache_size, max_running_requests=c.max_running_requests,
        mamba_full_memory_ratio=c.mamba_full_memory_ratio, disable_overlap_schedule=False)
    try:
        rest = fns["handle"](host, c.rest_gib)
    except RuntimeError as exc:
        return MambaResult(None, None, f"RuntimeError: {exc}")
    size = sa.max_mamba_cache_size if self.v < (0, 5, 18) else self._schedule_state.max_mamba_cache_size
    return MambaResult(rest, size)


def _compile_mamba(self: SGLangPools) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if self.v < (0, 5, 9):
        m = "sglang/srt/model_executor/model_runner.py"
        out["handle"] = loader.compile_defs(self._text(m), self.origin(m), ["ModelRunner.handle_max_mamba_cache"],
                                            {})["handle_max_mamba_cache"]
        return out
    if self.v < (0, 5, 18):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        names = ["ModelRunnerKVCacheMixin.handle_max_mamba_cache"]
        if loader.has_def(self._text(m), self.origin(m), "ModelRunnerKVCacheMixin._calculate_mamba_ratio"):
            names.append("ModelRunnerKVCacheMixin._calculate_mamba_ratio")
        fns = loader.compile_defs(self._text(m), self.origin(m), names, {})
        out["handle"] = fns["handle_max_mamba_cache"]
        if "_calculate_mamba_ratio" in fns:
            out["_calculate_mamba_ratio"] = fns["_calculate_mamba_ratio"]
        return out

    def override(_name: str, **kw: Any) -> None:
        for k, val in kw.items():
            setattr(self._schedule_state, k, val)

    m = "sglang/srt/mem_cache/kv_cache_configurator.py"
    text = self._text(m)
    stand = {
        "get_exec": lambda: types.SimpleNamespace(mamba=types.SimpleNamespace(
            enable_linear_replayssm_spec=False, enable_mamba_extra_buffer=False,
            enable_mamba_extra_buffer_lazy=False)),
        "get_spec": lambda: types.SimpleNamespace(speculative_num_draft_tokens=self._case.speculative_num_draft_tokens,
                                                  speculative_algorithm=self._case.speculative_algorithm),
        "get_schedule": lambda: self._schedule_state,
        "get_memory": lambda: types.SimpleNamespace(disable_radix_cache=self._case.disable_radix_cache,
                                                    enable_unified_memory=False),
        "get_disagg": lambda: types.SimpleNamespace(disaggregation_mode="null", enable_pd_role_switch=False),
        "get_context": lambda: types.SimpleNamespace(override=override),
        "envs": _Env({"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": False}),
        "mamba_extra_buffer_enabled": lambda: False, "mamba_extra_buffer_lazy_enabled": lambda: False,
        "_is_npu": False, "get_pp_indices": _pp_indices(self),
    }
    names = ["KVCacheConfigurator._handle_max_mamba_cache", "KVCacheConfigurator._calculate_mamba_ratio"]
    if loader.has_def(text, self.origin(m), "_pd_prefill_skips_mamba_spec_state"):
        names.append("_pd_prefill_skips_mamba_spec_state")
    fns = loader.compile_defs(text, self.origin(m), names, stand)
    out["handle"] = fns["_handle_max_mamba_cache"]
    out["_calculate_mamba_ratio"] = fns["_calculate_mamba_ratio"]
    return out


SGLangPools.mamba = _mamba_handle  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# mamba state bytes per request
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MambaShapeCase:
    """The arguments the model configs pass to ``Mamba2StateShape.create`` (configs/qwen3_next.py,
    configs/nemotron_h.py ``mamba2_cache_params``), already mapped from the HF keys."""

    tp_world_size: int
    intermediate_size: int
    n_groups: int
    num_heads: int
    head_dim: int
    state_size: int
    conv_kernel: int
    num_layers: int  # len(linear_layer_ids / mamba_layer_ids)


def mamba_shape_members(version: str) -> tuple:
    return ("sglang/srt/configs/mamba_utils.py", "sglang/srt/distributed/utils.py")


def _mamba_per_req(self: SGLangPools, c: MambaShapeCase) -> int:
    if "mamba_shape" not in self._compiled:
        self._compiled["mamba_shape"] = _compile_mamba_shape(self)
    fns = self._compiled["mamba_shape"]
    shape = fns["create"](tp_world_size=c.tp_world_size, intermediate_size=c.intermediate_size,
                          n_groups=c.n_groups, num_heads=c.num_heads, head_dim=c.head_dim,
                          state_size=c.state_size, conv_kernel=c.conv_kernel)
    # mamba2_state_dtype() defaults: conv bfloat16 (SGLANG_MAMBA_CONV_DTYPE / CONV_DTYPE), SSM float32
    params = types.SimpleNamespace(shape=shape, layers=list(range(c.num_layers)),
                                   dtype=types.SimpleNamespace(conv=_Dtype("bfloat16", 2),
                                                               temporal=_Dtype("float32", 4)))
    return fns["mamba_cache_per_req"].fget(params)


def _compile_mamba_shape(self: SGLangPools) -> Dict[str, Any]:
    import numpy as np  # the engine's own reduction (np.sum / np.prod)

    du = "sglang/srt/distributed/utils.py"
    div = loader.compile_defs(self._text(du), self.origin(du), ["ensure_divisibility", "divide"], {})
    m = "sglang/srt/configs/mamba_utils.py"
    fns = loader.compile_defs(self._text(m), self.origin(m), [
        "extra_groups_for_head_shards", "Mamba2StateShape.create", "BaseLinearStateParams.mamba_cache_per_req"],
        {"divide": div["divide"], "np": np, "Mamba2StateShape": lambda **kw: types.SimpleNamespace(**kw)})
    return fns


SGLangPools.mamba_per_req = _mamba_per_req  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# the profile with the multimodal reservation and the mamba carve (>=0.5.9)
# ---------------------------------------------------------------------------------------------

def env_default(src: EngineSource, name: str) -> Any:
    """The default of ``envs.<name>`` as declared in the release's ``environ.py`` (``X = EnvInt(100)``)."""
    member = "sglang/srt/environ.py"
    tree = loader._parse(src.read(member), f"{src.label}/{member}")
    for node in loader.ast.walk(tree):
        if (isinstance(node, loader.ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], loader.ast.Name) and node.targets[0].id == name
                and isinstance(node.value, loader.ast.Call) and node.value.args):
            expr = loader.ast.Expression(node.value.args[0])
            return eval(compile(expr, member, "eval"), {"__builtins__": {}})  # a constant expression
    raise loader.StandInMissing(f"{src.label}: environ.py declares no {name}")


def _env_defaults(src: EngineSource, names: List[str]) -> Dict[str, Any]:
    """The declared defaults among ``names`` (a release that lacks one never reads it)."""
    out: Dict[str, Any] = {}
    for name in names:
        try:
            out[name] = env_default(src, name)
        except loader.StandInMissing:
            pass
    return out


@dataclass(frozen=True)
class ProfileMMCase:
    pre_model_load_gib: float
    available_gib: float
    mem_fraction_static: float
    is_multimodal: bool
    mm_feature_transport: Optional[str]
    mamba: Optional[MambaCase] = None  # rest_gib unused: the profile computes it


@dataclass
class ProfileMMResult:
    rest_bytes: Optional[int]
    max_mamba_cache_size: Optional[int]
    error: Optional[str] = None


def profile_mm_members(version: str) -> tuple:
    v = _vtuple(version)
    out = ["sglang/srt/environ.py"]
    if v < (0, 5, 18):
        out.append("sglang/srt/model_executor/model_runner_kv_cache_mixin.py")
    else:
        out.append("sglang/srt/mem_cache/kv_cache_configurator.py")
    return tuple(out)


def _profile_mm(self: SGLangPools, c: ProfileMMCase) -> ProfileMMResult:
    mc = c.mamba or MambaCase(rest_gib=0.0, per_req_bytes=0)
    self._case = mc
    self._pcase = c
    key = "profile_mm"
    if key not in self._compiled:
        self._compiled[key] = _compile_profile_mm(self)
    fns = self._compiled[key]
    attn_dp = mc.dp_size if mc.enable_dp_attention else 1
    sa = types.SimpleNamespace(
        speculative_num_draft_tokens=mc.speculative_num_draft_tokens, disable_radix_cache=mc.disable_radix_cache,
        max_mamba_cache_size=mc.max_mamba_cache_size, max_running_requests=mc.max_running_requests,
        mamba_full_memory_ratio=mc.mamba_full_memory_ratio, dp_size=mc.dp_size,
        enable_dp_attention=mc.enable_dp_attention, disable_overlap_schedule=False,
        enable_mamba_extra_buffer=lambda: False, enable_mamba_extra_buffer_lazy=lambda: False,
        mem_fraction_static=c.mem_fraction_static, mm_feature_transport=c.mm_feature_transport)
    cfg = None
    if c.mamba is not None:
        cfg = types.SimpleNamespace(mamba2_cache_params=types.SimpleNamespace(
            mamba_cache_per_req=mc.per_req_bytes, layers=list(mc.state_layer_ids)), full_attention_layer_ids=[])
    host = types.SimpleNamespace(
        mambaish_config=cfg, server_args=sa, hybrid_gdn_config=object() if mc.is_gdn else None,
        hybrid_kda_config=None, spec_algorithm=SpecAlgo(mc.speculative_algorithm), dp_size=attn_dp,
        attn_dp_size=attn_dp, pp_size=mc.pp_size, ps=types.SimpleNamespace(pp_size=mc.pp_size, attn_dp_size=attn_dp),
        extra_mamba_cache_bytes_per_req=0, model_config=types.SimpleNamespace(
            num_hidden_layers=mc.num_hidden_layers, is_multimodal=c.is_multimodal, hf_config=types.SimpleNamespace()),
        device="cuda", gpu_id=0, mem_fraction_static=c.mem_fraction_static, post_capture_kv_active=False,
        is_draft_worker=False, num_effective_layers=1, start_layer=0, end_layer=1)
    host.fused_entry_bytes = lambda name: None
    for name in ("_calculate_mamba_ratio", "handle_max_mamba_cache", "_handle_max_mamba_cache"):
        if name in fns:
            setattr(host, name, types.MethodType(fns[name], host))
    host.get_cell_size_per_token = lambda num_layers: 1  # 0.5.9: tokens with a 1-byte cell = bytes
    self._schedule_state = types.SimpleNamespace(
        max_mamba_cache_size=mc.max_mamba_cache_size, max_running_requests=mc.max_running_requests,
        mamba_full_memory_ratio=mc.mamba_full_memory_ratio, disable_overlap_schedule=False,
        mem_fraction_static=c.mem_fraction_static, prefill_max_requests=None)
    try:
        rest = fns["profile"](host, c.pre_model_load_gib)
    except (RuntimeError, ValueError) as exc:
        return ProfileMMResult(None, None, f"{type(exc).__name__}: {exc}")
    size = None
    if c.mamba is not None:
        size = sa.max_mamba_cache_size if self.v < (0, 5, 18) else self._schedule_state.max_mamba_cache_size
    return ProfileMMResult(rest, size)


def _compile_profile_mm(self: SGLangPools) -> Dict[str, Any]:
    out = dict(_compile_mamba(self))
    avail = lambda *a, **k: self._pcase.available_gib  # noqa: E731
    world = lambda: types.SimpleNamespace(world_size=1, cpu_group=None)  # noqa: E731
    if self.v < (0, 5, 18):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        name = ("ModelRunnerKVCacheMixin.profile_max_num_token" if self.v < (0, 5, 10)
                else "ModelRunnerKVCacheMixin._profile_available_bytes")
        fns = loader.compile_defs(self._text(m), self.origin(m), [name], {
            "get_available_gpu_memory": avail, "get_world_group": world, "math": __import__("math")})
        out["profile"] = fns[name.split(".")[-1]]
        out["handle_max_mamba_cache"] = out.pop("handle")
        return out
    envs = _Env({"SGLANG_VLM_CACHE_SIZE_MB": env_default(self.src, "SGLANG_VLM_CACHE_SIZE_MB"),
                 "SGLANG_MM_FEATURE_CACHE_MB": env_default(self.src, "SGLANG_MM_FEATURE_CACHE_MB"),
                 "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": False})
    m = "sglang/srt/mem_cache/kv_cache_configurator.py"
    mm = loader.compile_defs(self._text(m), self.origin(m), ["mm_runtime_reservation_gb"],
                             {"envs": envs, "logger": log})
    stand = {
        "gc": types.SimpleNamespace(collect=lambda: 0), "get_available_gpu_memory": avail,
        "get_world_group": world, "math": __import__("math"),
        "get_parallel": lambda: types.SimpleNamespace(launch_world_size=1,
                                                      world_group=types.SimpleNamespace(cpu_group=None)),
        "get_schedule": lambda: self._schedule_state,
        "get_exec": lambda: types.SimpleNamespace(graph=types.SimpleNamespace(
            cuda_graph_config=types.SimpleNamespace(prefill=types.SimpleNamespace(
                full_prefill_max_req=None, backend="breakable")))),
        "get_disagg": lambda: types.SimpleNamespace(disaggregation_mode="null"),
        "get_mm": lambda: types.SimpleNamespace(mm_feature_transport=self._pcase.mm_feature_transport),
        "Backend": types.SimpleNamespace(FULL="full"),
        "mm_runtime_reservation_gb": mm["mm_runtime_reservation_gb"],
    }
    fns = loader.compile_defs(self._text(m), self.origin(m), ["KVCacheConfigurator._profile_available_bytes"], stand)
    out["profile"] = fns["_profile_available_bytes"]
    out["_handle_max_mamba_cache"] = out.pop("handle")
    return out


SGLangPools.profile_mm = _profile_mm  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# hybrid SWA split
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SWACase:
    available_bytes: int  # int(rest_memory * 2**30) after the profile
    layer_kinds: str  # one char per layer: "F" full attention, "S" sliding window
    total_num_kv_heads: int
    head_dim: int
    v_head_dim: int
    swa_num_kv_heads: Optional[int]  # None: the config has no swa_num_key_value_heads (= full heads)
    swa_head_dim: int
    swa_v_head_dim: int
    kv_bytes: int
    attn_tp_size: int
    page_size: int
    swa_full_tokens_ratio: float
    sliding_window: int
    max_total_tokens: Optional[int] = None
    llama4_chunk: Optional[int] = None  # Llama-4 attention_chunk_size (0.5.6's own formula)
    context_len: int = 131072
    mem_fraction_static: float = 0.88
    # the SWA request-cap configurators (radix cache off + --max-running-requests, 0.5.14+)
    disable_radix_cache: bool = False
    max_running_requests: Optional[int] = None
    chunked_prefill_size: Optional[int] = 8192
    dp_size: int = 1
    enable_dp_attention: bool = False
    speculative_algorithm: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    eagle_draft_num_layers: Optional[int] = None  # spec_aux_config (the draft's KV layers)


@dataclass
class SWAResult:
    max_total_num_tokens: Optional[int]
    full_tokens: Optional[int]
    swa_tokens: Optional[int]
    error: Optional[str] = None


def swa_members(version: str) -> tuple:
    v = _vtuple(version)
    out = ["sglang/srt/configs/model_config.py"]
    if v < (0, 5, 9):
        out += ["sglang/srt/model_executor/model_runner.py"]
    elif v < (0, 5, 18):
        out += ["sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
                "sglang/srt/model_executor/pool_configurator.py"]
    else:
        out += ["sglang/srt/mem_cache/kv_cache_configurator.py", "sglang/srt/model_executor/pool_configurator.py"]
    if v >= (0, 5, 11):
        out.append("sglang/srt/environ.py")
    if (0, 5, 13) <= v < (0, 5, 18):
        out.append("sglang/srt/mem_cache/common.py")
    elif v >= (0, 5, 18):
        out += ["sglang/srt/mem_cache/allocation_sizing.py", "sglang/srt/runtime_context.py"]
    return tuple(out)


def _swa_model_config(self: SGLangPools, c: SWACase, fns: Dict[str, Any]) -> Any:
    hf_text = types.SimpleNamespace()
    if c.swa_num_kv_heads is not None:
        hf_text.swa_num_key_value_heads = c.swa_num_kv_heads
    full_ids = [i for i, k in enumerate(c.layer_kinds) if k == "F"]
    swa_ids = [i for i, k in enumerate(c.layer_kinds) if k == "S"]
    mc = types.SimpleNamespace(
        head_dim=c.head_dim, v_head_dim=c.v_head_dim, swa_head_dim=c.swa_head_dim, swa_v_head_dim=c.swa_v_head_dim,
        total_num_kv_heads=c.total_num_kv_heads, hf_text_config=hf_text, num_hidden_layers=len(c.layer_kinds),
        full_attention_layer_ids=full_ids, swa_attention_layer_ids=swa_ids, context_len=c.context_len,
        is_hybrid_swa=True, attention_arch="MHA", hf_config=types.SimpleNamespace(
            architectures=["Llama4ForConditionalGeneration" if c.llama4_chunk else "GptOssForCausalLM"]),
        is_multimodal=False, is_draft_model=False, quantization=None)
    mc.get_total_num_kv_heads = lambda: c.total_num_kv_heads
    mc.get_num_kv_heads = types.MethodType(fns["get_num_kv_heads"], mc)
    mc.get_swa_num_kv_heads = types.MethodType(fns["get_swa_num_kv_heads"], mc)
    return mc


def _swa(self: SGLangPools, c: SWACase) -> SWAResult:
    self._swa_case = c
    if "swa" not in self._compiled:
        self._compiled["swa"] = _compile_swa(self)
    fns = self._compiled["swa"]
    mc = _swa_model_config(self, c, fns)
    dtype = _Dtype({1: "float8_e4m3fn", 2: "bfloat16", 4: "float32"}[c.kv_bytes], c.kv_bytes)
    sa = types.SimpleNamespace(
        kv_cache_dtype="auto", max_running_requests=c.max_running_requests, max_total_tokens=c.max_total_tokens,
        page_size=c.page_size, speculative_algorithm=c.speculative_algorithm,
        speculative_num_draft_tokens=c.speculative_num_draft_tokens, speculative_num_steps=c.speculative_num_steps,
        speculative_eagle_topk=c.speculative_eagle_topk,
        max_speculative_num_draft_tokens=c.speculative_num_draft_tokens, speculative_adaptive=False,
        disaggregation_mode="null",
        enable_memory_saver=False, mem_fraction_static=c.mem_fraction_static,
        disable_radix_cache=c.disable_radix_cache, enable_dp_attention=c.enable_dp_attention, dp_size=c.dp_size,
        swa_full_tokens_ratio=c.swa_full_tokens_ratio, chunked_prefill_size=c.chunked_prefill_size,
        disable_overlap_schedule=False)
    if self.v < (0, 5, 11):
        return _swa_classic(self, c, fns, mc, dtype, sa)
    attn_dp = c.dp_size if c.enable_dp_attention else 1
    host = types.SimpleNamespace(
        server_args=sa, model_config=mc, kv_cache_dtype=dtype, kv_cache_dtype_str="auto", mambaish_config=None,
        pp_size=1, dp_size=attn_dp, attn_dp_size=attn_dp, ps=types.SimpleNamespace(attn_dp_size=attn_dp),
        is_hybrid_swa=True, sliding_window_size=c.sliding_window,
        page_size=c.page_size, spec_algorithm=SpecAlgo(c.speculative_algorithm), is_draft_worker=False,
        spec_aux_config=types.SimpleNamespace(eagle_draft_num_layers=c.eagle_draft_num_layers,
                                              eagle_draft_swa_num_layers=None),
        layer_info=types.SimpleNamespace(full_attention_layer_ids=mc.full_attention_layer_ids,
                                         swa_attention_layer_ids=mc.swa_attention_layer_ids))
    host.fused_entry_bytes = lambda name: None
    host._profile_available_bytes = lambda pre: c.available_bytes
    fns["_create"][0] = fns["create_memory_pool_configurator"]
    for name in ("_apply_token_constraints", "_resolve_max_num_reqs", "resolve_max_num_reqs", "config_from_budget"):
        if name in fns:
            setattr(host, name, types.MethodType(fns[name], host))
    self._case = ReqCase(profiled_tokens=0, context_len=c.context_len, page_size=c.page_size,
                         max_total_tokens=c.max_total_tokens, mem_fraction_static=c.mem_fraction_static)
    try:
        config = fns["_resolve_memory_pool_config"](host, 0)
    except (RuntimeError, ValueError) as exc:
        return SWAResult(None, None, None, f"{type(exc).__name__}: {exc}")
    return SWAResult(config.max_total_num_tokens, config.full_max_total_num_tokens, config.swa_max_total_num_tokens)


def _swa_classic(self: SGLangPools, c: SWACase, fns: Dict[str, Any], mc: Any, dtype: Any, sa: Any) -> SWAResult:
    runner = types.SimpleNamespace(
        server_args=sa, model_config=mc, dtype="bfloat16", model=types.SimpleNamespace(quant_config=None),
        spec_algorithm=SpecAlgo(None), is_draft_worker=False, mambaish_config=None, pp_size=1, is_hybrid_swa=True,
        req_to_token_pool=None, device="cuda", page_size=c.page_size, dp_size=1, kv_cache_dtype=dtype,
        sliding_window_size=c.sliding_window, attention_chunk_size=c.llama4_chunk)
    if self.v < (0, 5, 9):
        # 0.5.6's profile cell: heads x head_dim x L x 2 x e (model_runner.py l.1417; tested in
        # test_sglang_memory.py); the layers' attention windows come from the built model.
        n_heads = fns["get_num_kv_heads"](mc, c.attn_tp_size)
        cell = n_heads * c.head_dim * len(c.layer_kinds) * 2 * c.kv_bytes
        layers = [types.SimpleNamespace(layer_id=i, self_attn=types.SimpleNamespace(attn=types.SimpleNamespace(
            sliding_window_size=c.sliding_window if k == "S" else -1))) for i, k in enumerate(c.layer_kinds)]
        runner.model = types.SimpleNamespace(quant_config=None, model=types.SimpleNamespace(layers=layers))
    else:
        runner.get_cell_size_per_token = types.MethodType(fns["get_cell_size_per_token"], runner)
        runner.num_effective_layers = len(c.layer_kinds)
        runner.use_mla_backend = False
        runner.server_args.kv_cache_dtype = "auto"
        cell = runner.get_cell_size_per_token(len(c.layer_kinds))
    runner.profile_max_num_token = lambda total: c.available_bytes // cell
    for name in ("set_num_token_hybrid", "set_num_tokens_hybrid_swa"):
        if name in fns:
            setattr(runner, name, types.MethodType(fns[name], runner))
    try:
        if self.v < (0, 5, 9):
            fns["init_memory_pool"](runner, 0, None, c.max_total_tokens)
        else:
            fns["init_memory_pool"](runner, 0)
    except RuntimeError as exc:
        return SWAResult(None, None, None, f"RuntimeError: {exc}")
    return SWAResult(runner.max_total_num_tokens, runner.full_max_total_num_tokens, runner.swa_max_total_num_tokens)


def _alloc_len_fn(self: SGLangPools) -> Any:
    """The release's ``get_alloc_len_per_decode`` (mem_cache/common.py @ v0.5.13/0.5.14 takes server_args;
    mem_cache/allocation_sizing.py @ v0.5.18+ reads the spec bag)."""
    c = lambda: self._swa_case  # noqa: E731
    spec_mod = types.SimpleNamespace(SpeculativeAlgorithm=SpecAlgo)
    bag = lambda: types.SimpleNamespace(  # noqa: E731
        speculative_algorithm=c().speculative_algorithm, speculative_num_steps=c().speculative_num_steps,
        speculative_eagle_topk=c().speculative_eagle_topk,
        speculative_num_draft_tokens=c().speculative_num_draft_tokens, max_speculative_num_draft_tokens=None,
        speculative_adaptive=False)
    if self.v < (0, 5, 18):
        m = "sglang/srt/mem_cache/common.py"
        if not self.src.has(m):
            return _not_called
        fns = loader.compile_defs(self._text(m), self.origin(m), ["get_alloc_len_per_decode"],
                                  {"get_global_server_args": _not_called},
                                  modules={"sglang.srt.speculative.spec_info": spec_mod})
        return fns["get_alloc_len_per_decode"]
    m = "sglang/srt/mem_cache/allocation_sizing.py"
    text = self._text(m)
    names = ["get_alloc_len_per_decode"] + (["get_alloc_page_size"] if loader.has_def(
        text, self.origin(m), "get_alloc_page_size") else [])
    rc = "sglang/srt/runtime_context.py"
    mx = loader.compile_defs(self._text(rc), self.origin(rc), ["max_speculative_num_draft_tokens"],
                             {"get_spec": bag})["max_speculative_num_draft_tokens"]
    fns = loader.compile_defs(text, self.origin(m), names, {
        "get_spec": bag, "max_speculative_num_draft_tokens": mx,
        "get_schedule": lambda: types.SimpleNamespace(page_size=c().page_size),
        "get_parallel": lambda: types.SimpleNamespace(attn_dcp_size=1)},
        modules={"sglang.srt.speculative.spec_info": spec_mod})
    return fns["get_alloc_len_per_decode"]


def _with_parent_init(init: Any, parent: type) -> Any:
    """Run an extracted ``__init__`` whose ``super().__init__(...)`` has no ``__class__`` cell."""
    src_globals = init.__globals__

    def wrapped(obj: Any, *a: Any, **k: Any) -> Any:
        src_globals["super"] = lambda *args: types.SimpleNamespace(
            __init__=lambda *pa, **pk: parent.__init__(obj, *pa, **pk))
        return init(obj, *a, **k)

    return wrapped


def _compile_swa(self: SGLangPools) -> Dict[str, Any]:
    torch = fake_torch()
    torch._utils = types.SimpleNamespace(_element_size=lambda d: d.itemsize)
    c = lambda: self._swa_case  # noqa: E731
    common: Dict[str, Any] = {
        "torch": torch, "logger": log, "logging": log, "get_attention_tp_size": lambda: c().attn_tp_size,
        "_is_hip": False, "is_cuda": lambda: True, "SGLANG_CI_SMALL_KV_SIZE": None,
        "ReqToTokenPool": self._req_pool_cls(), "log_info_on_rank0": lambda lg, msg: None,
        "is_float4_e2m1fn_x2": lambda d: False, "is_deepseek_nsa": lambda hf: False,
    }
    out: Dict[str, Any] = {}
    mcm = "sglang/srt/configs/model_config.py"
    names = ["ModelConfig.get_num_kv_heads"]
    if loader.has_def(self._text(mcm), self.origin(mcm), "ModelConfig.get_swa_num_kv_heads"):
        names.append("ModelConfig.get_swa_num_kv_heads")
    out.update(loader.compile_defs(self._text(mcm), self.origin(mcm), names, {}))
    out.setdefault("get_swa_num_kv_heads", lambda mc, tp: mc.get_num_kv_heads(tp))
    if self.v < (0, 5, 9):
        m = "sglang/srt/model_executor/model_runner.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m), ["ModelRunner.set_num_token_hybrid"], common))
        out["init_memory_pool"] = _body_slice(self._text(m), self.origin(m), "ModelRunner.init_memory_pool",
                                              last=_is_req_pool_stmt, stand_ins=common)
        return out
    if self.v < (0, 5, 11):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m), [
            "ModelRunnerKVCacheMixin.set_num_tokens_hybrid_swa", "ModelRunnerKVCacheMixin.get_cell_size_per_token"],
            common))
        out["init_memory_pool"] = _body_slice(self._text(m), self.origin(m), "ModelRunnerKVCacheMixin.init_memory_pool",
                                              last=_is_req_pool_stmt, stand_ins=common)
        return out
    create_box: List[Any] = [None]
    out["_create"] = create_box
    pc = "sglang/srt/model_executor/pool_configurator.py"
    text = self._text(pc)
    mpc = self._pool_configurator({})["MemoryPoolConfig"]
    stand = dict(common, MemoryPoolConfig=mpc, AttentionArch=types.SimpleNamespace(MLA="MLA", MHA="MHA"),
                 get_parallel=lambda: types.SimpleNamespace(attn_tp_size=c().attn_tp_size, attn_dcp_size=1,
                                                            attn_dp_size=1, pp_size=1),
                 get_schedule=lambda: types.SimpleNamespace(
                     swa_full_tokens_ratio=c().swa_full_tokens_ratio, page_size=c().page_size,
                     max_total_tokens=c().max_total_tokens, max_running_requests=c().max_running_requests,
                     mem_fraction_static=c().mem_fraction_static, max_mamba_cache_size=None,
                     chunked_prefill_size=c().chunked_prefill_size, disable_overlap_schedule=False),
                 get_memory=lambda: types.SimpleNamespace(enable_unified_memory=False,
                                                          disable_radix_cache=c().disable_radix_cache),
                 get_spec=lambda: types.SimpleNamespace(
                     speculative_algorithm=c().speculative_algorithm, speculative_num_steps=c().speculative_num_steps,
                     speculative_eagle_topk=c().speculative_eagle_topk,
                     speculative_num_draft_tokens=c().speculative_num_draft_tokens,
                     max_speculative_num_draft_tokens=None, speculative_adaptive=False),
                 get_alloc_len_per_decode=_alloc_len_fn(self),
                 get_disagg=lambda: types.SimpleNamespace(disaggregation_mode="null"),
                 envs=_Env(_env_defaults(self.src, ["SGLANG_SWA_EVICTION_INTERVAL"])),
                 ceil_align=lambda x, y: -(-x // y) * y, is_deepseek_v4=lambda hf: False)
    cls_names = [n for n in ("__init__", "_full_cell_bytes", "_swa_cell_bytes", "_recompute_cell_size",
                             "_solve_pool_sizes", "_make_pool_config", "calculate_pool_sizes",
                             "calculate_pool_sizes_from_max_tokens")
                 if loader.has_def(text, self.origin(pc), f"HybridSWAPoolConfigurator.{n}")]
    if loader.has_def(text, self.origin(pc), "_dflash_draft_cell_size"):
        stand["_dflash_draft_cell_size"] = loader.compile_defs(text, self.origin(pc), ["_dflash_draft_cell_size"],
                                                               stand)["_dflash_draft_cell_size"]
    methods = loader.compile_defs(text, self.origin(pc), [f"HybridSWAPoolConfigurator.{n}" for n in cls_names], stand)
    for base in ("validate_swa_pool_size", "finalize_with_max_running_requests"):  # inherited from the base class
        if loader.has_def(text, self.origin(pc), f"MemoryPoolConfigurator.{base}"):
            methods.update(loader.compile_defs(text, self.origin(pc), [f"MemoryPoolConfigurator.{base}"], {}))
    hybrid = type("HybridSWAPoolConfigurator", (), methods)
    out["HybridSWAPoolConfigurator"] = hybrid
    classes = {"HybridSWAPoolConfigurator": hybrid}
    if loader.has_def(text, self.origin(pc), "compute_swa_request_cap"):
        stand["compute_swa_request_cap"] = loader.compile_defs(text, self.origin(pc), ["compute_swa_request_cap"],
                                                               stand)["compute_swa_request_cap"]
    for cap_name in ("SWAChunkCapPoolConfigurator", "SWARequestCapPoolConfigurator"):
        names = [n for n in ("__init__", "is_applicable", "calculate_pool_sizes",
                             "calculate_pool_sizes_from_max_tokens")
                 if loader.has_def(text, self.origin(pc), f"{cap_name}.{n}")]
        if names:
            cap_methods = loader.compile_defs(text, self.origin(pc), [f"{cap_name}.{n}" for n in names],
                                              dict(stand, HybridSWAPoolConfigurator=hybrid))
            init = cap_methods.get("__init__")
            if init is not None:  # super().__init__ needs the class cell: call the parent explicitly
                cap_methods["__init__"] = _with_parent_init(init, hybrid)
            classes[cap_name] = type(cap_name, (hybrid,), cap_methods)
    unused = lambda *a, **k: _not_called()  # noqa: E731  (DSV4 / Default: not a hybrid SWA model here)
    out["create_memory_pool_configurator"] = loader.compile_defs(
        text, self.origin(pc), ["create_memory_pool_configurator"],
        dict(stand, DSV4PoolConfigurator=unused, DefaultPoolConfigurator=unused, **classes),
    )["create_memory_pool_configurator"]
    modules = {"sglang.srt.model_executor.pool_configurator": types.SimpleNamespace(
        create_memory_pool_configurator=lambda mr: create_box[0](mr), MemoryPoolConfig=mpc)}
    if self.v < (0, 5, 18):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m), [
            "ModelRunnerKVCacheMixin._resolve_memory_pool_config", "ModelRunnerKVCacheMixin._apply_token_constraints",
            "ModelRunnerKVCacheMixin._resolve_max_num_reqs"], common, modules=modules))
    else:
        m = "sglang/srt/mem_cache/kv_cache_configurator.py"
        st = dict(stand, configured_pp_size=lambda: 1)
        out.update(loader.compile_defs(self._text(m), self.origin(m), [
            "KVCacheConfigurator._resolve_memory_pool_config", "KVCacheConfigurator.config_from_budget",
            "KVCacheConfigurator._apply_token_constraints", "KVCacheConfigurator.resolve_max_num_reqs"], st,
            modules=modules))
    return out


SGLangPools.swa = _swa  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# cell variants: DSA indexer, FP4 / mxfp8, the draft in the budget (>=0.5.14)
# ---------------------------------------------------------------------------------------------

KV_DTYPES = {"bfloat16": _Dtype("bfloat16", 2), "float8_e4m3fn": _Dtype("float8_e4m3fn", 1),
             "float8_e5m2": _Dtype("float8_e5m2", 1), "float32": _Dtype("float32", 4),
             "float4_e2m1fn_x2": _Dtype("float4_e2m1fn_x2", 1)}


@dataclass(frozen=True)
class CellCase:
    attention: str  # "mha" | "mla"
    dsa: bool  # DeepSeek-V3.2 / GLM-5 indexer (MLA only)
    index_head_dim: int
    num_layers: int
    total_num_kv_heads: int
    head_dim: int
    v_head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    kv_dtype: str  # torch dtype name of the KV cache (KV_DTYPES)
    kv_cache_dtype_str: str  # --kv-cache-dtype as given ("auto", "fp8_e4m3", "mxfp8", "nvfp4", ...)
    attn_tp_size: int
    speculative_algorithm: Optional[str] = None
    draft_num_layers: Optional[int] = None  # eagle_draft_num_layers
    # FP4 MHA recipe (0.5.23): the resolved (prefill, decode) attention backends and the platform
    prefill_backend: str = "flashinfer"
    decode_backend: str = "flashinfer"
    sm100: bool = True


def cell_members(version: str) -> tuple:
    v = _vtuple(version)
    out = ["sglang/srt/configs/model_config.py", "sglang/srt/mem_cache/memory_pool.py"]
    if v < (0, 5, 9):
        out.append("sglang/srt/model_executor/model_runner.py")
    elif v < (0, 5, 13):
        out.append("sglang/srt/model_executor/model_runner_kv_cache_mixin.py")
    else:
        out.append("sglang/srt/model_executor/pool_configurator.py")
        if v >= (0, 5, 18):
            out.append("sglang/srt/mem_cache/kv_cache_configurator.py")
        if v > (0, 5, 20):
            out.append("sglang/srt/layers/quantization/fp4_kv_cache_quant_method.py")
    return tuple(out)


def _dsa_pool_class(self: SGLangPools) -> Any:
    """``NSATokenToKVPool`` / ``DSATokenToKVPool`` class constants, read from the release's memory_pool.py."""
    m = "sglang/srt/mem_cache/memory_pool.py"
    tree = loader._parse(self._text(m), self.origin(m))
    torch = fake_torch()
    for name in ("DSATokenToKVPool", "NSATokenToKVPool"):
        cls = loader._find_in(tree.body, name, loader.ast.ClassDef)
        if cls is None:
            continue
        attrs: Dict[str, Any] = {}
        for stmt in cls.body:
            if (isinstance(stmt, loader.ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], loader.ast.Name)):
                src = loader.ast.unparse(stmt.value)
                if src.startswith("torch."):
                    attrs[stmt.targets[0].id] = getattr(torch, src.split(".", 1)[1])
                else:
                    try:
                        attrs[stmt.targets[0].id] = loader.ast.literal_eval(stmt.value)
                    except ValueError:
                        pass
        return types.SimpleNamespace(**attrs)
    return loader.StubModule(f"{self.src.label}: no DSA/NSA token pool class", strict=True)  # raises on use


def _cell(self: SGLangPools, c: CellCase) -> int:
    self._cell_case = c
    if "cell" not in self._compiled:
        self._compiled["cell"] = _compile_cell(self)
    fns = self._compiled["cell"]
    hf = types.SimpleNamespace(dsa=c.dsa, index_head_dim=c.index_head_dim, index_topk=2048 if c.dsa else None,
                               architectures=["DeepseekV32ForCausalLM" if c.dsa else "DeepseekV3ForCausalLM"])
    mc = types.SimpleNamespace(
        head_dim=c.head_dim, v_head_dim=c.v_head_dim, kv_lora_rank=c.kv_lora_rank, qk_rope_head_dim=c.qk_rope_head_dim,
        total_num_kv_heads=c.total_num_kv_heads, is_hybrid_swa=False, hf_config=hf, is_draft_model=False,
        quantization=None, context_len=4096)
    mc.get_total_num_kv_heads = lambda: c.total_num_kv_heads
    mc.get_num_kv_heads = types.MethodType(fns["get_num_kv_heads"], mc)
    dtype = KV_DTYPES[c.kv_dtype]
    sa = types.SimpleNamespace(kv_cache_dtype=c.kv_cache_dtype_str, enable_hisparse=False, max_total_tokens=None,
                               dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="flashmla_kv",
                               nsa_prefill_backend="flashmla_sparse", nsa_decode_backend="flashmla_kv")
    host = types.SimpleNamespace(
        model_config=mc, kv_cache_dtype=dtype, kv_cache_dtype_str=c.kv_cache_dtype_str, server_args=sa,
        use_mla_backend=c.attention == "mla", mambaish_config=None, is_draft_worker=False, pp_size=1,
        num_effective_layers=c.num_layers, start_layer=0, end_layer=c.num_layers, is_hybrid_gdn=False,
        spec_algorithm=SpecAlgo(c.speculative_algorithm), eagle_draft_num_layers=c.draft_num_layers,
        dflash_draft_num_layers=None, device="cuda", gpu_id=0, page_size=1, model_dtype=KV_DTYPES["bfloat16"],
        spec_aux_config=types.SimpleNamespace(eagle_draft_num_layers=c.draft_num_layers, dflash_draft_num_layers=None),
        layer_info=types.SimpleNamespace(start_layer=0, end_layer=c.num_layers, num_effective_layers=c.num_layers),
        ps=types.SimpleNamespace(pp_size=1), mem_fraction_static=0.9)
    host.fused_entry_bytes = lambda name: None
    if self.v < (0, 5, 9):
        return _cell_inline(self, c, fns, host)
    if self.v < (0, 5, 13):
        host.get_cell_size_per_token = types.MethodType(fns["get_cell_size_per_token"], host)
        return host.get_cell_size_per_token(c.num_layers)
    conf = fns["DefaultPoolConfigurator"].__new__(fns["DefaultPoolConfigurator"])
    conf.__init__(host)
    return conf._cell_size


def _cell_inline(self: SGLangPools, c: CellCase, fns: Dict[str, Any], host: Any) -> int:
    # <=0.5.6: the cell lives inside profile_max_num_token; read it back exactly from the token count of a
    # 2**20 GiB budget (the same probe as sglang_engine._cell_from_inline). Cells above ~2**25 bytes are
    # ambiguous at that budget (neighbouring cells give the same count): probe again with 2**30 GiB.
    for gib_log2 in (20, 30):
        self._avail_gib = float(1 << gib_log2)
        n = fns["profile_max_num_token"](host, 0.0)
        total = (1 << gib_log2) * (1 << 30)
        cell = total // n
        while total // cell > n:
            cell += 1
        if total // (cell + 1) != n:
            break
    return cell


def _fp4_module(self: SGLangPools, member: str) -> Any:
    """The release's whole ``fp4_kv_cache_quant_method.py`` (recipes, access registry, ``compute_cell_size``)
    under a stand-in torch whose dtypes report their element size; ``get_platform().is_sm100`` is the case's."""

    class Dtype:
        def __init__(self, name: str, itemsize: int):
            self.name, self.itemsize = name, itemsize

    dt = {n: Dtype(n, b) for n, b in (("float8_e4m3fn", 1), ("bfloat16", 2), ("uint8", 1), ("float32", 4),
                                        ("float4_e2m1fn_x2", 1))}
    torch_mod = loader.StubModule("torch", dict(
        dt, dtype=Dtype, Tensor=type("Tensor", (), {}),
        ones=lambda *a, **k: None,
        empty=lambda shape, dtype=None, **k: types.SimpleNamespace(element_size=lambda: dtype.itemsize)), strict=True)
    kvfp4 = loader.StubModule("sglang.srt.layers.quantization.kvfp4_tensor", {"E2M1_MAX": 6.0}, strict=True)
    rc = loader.StubModule("sglang.srt.runtime_context", {
        "get_platform": lambda: types.SimpleNamespace(is_sm100=self._cell_case.sm100)}, strict=True)
    # the resolved (prefill, decode) backends: SGLang's attention_backends_of(resolved_view(server_args))
    overrides = loader.StubModule("sglang.srt.arg_groups.overrides", {
        "attention_backends_of": lambda sa: (self._cell_case.prefill_backend, self._cell_case.decode_backend),
        "resolved_view": lambda sa: sa}, strict=True)
    return loader.exec_module(self._text(member), self.origin(member), {
        "torch": torch_mod, "sglang.srt.layers.quantization.kvfp4_tensor": kvfp4, "sglang.srt.runtime_context": rc,
        "sglang.srt.arg_groups.overrides": overrides}, (), "sglang.srt.layers.quantization.fp4_kv_cache_quant_method")


def _not_called(*a: Any, **k: Any) -> Any:
    raise loader.StandInMissing("conformance: a CP layer-shard helper ran (CP layer split is off in these cases)")


def _compile_cell(self: SGLangPools) -> Dict[str, Any]:
    torch = fake_torch()
    torch._utils = types.SimpleNamespace(_element_size=lambda d: d.itemsize)
    torch.float8_e4m3fn = KV_DTYPES["float8_e4m3fn"]
    torch.iinfo = lambda d: types.SimpleNamespace(max=(1 << 63) - 1)
    c = lambda: self._cell_case  # noqa: E731
    dsa_pool = _dsa_pool_class(self)
    mcm = "sglang/srt/configs/model_config.py"
    mc_text = self._text(mcm)
    is_dsa = lambda hf: bool(getattr(hf, "dsa", False))  # noqa: E731  (architecture + index_topk check)
    mc_fns = loader.compile_defs(mc_text, self.origin(mcm), ["ModelConfig.get_num_kv_heads"], {})
    extra_mc: Dict[str, Any] = {}
    for name in ("dsa_layer_skips_topk", "get_dsa_index_kpool", "get_dsa_index_head_dim", "get_nsa_index_head_dim"):
        if loader.has_def(mc_text, self.origin(mcm), name):
            extra_mc.update(loader.compile_defs(mc_text, self.origin(mcm), [name], {
                "is_deepseek_dsa": is_dsa, "is_deepseek_nsa": is_dsa, "is_deepseek_v4": lambda hf: False}))
    common: Dict[str, Any] = dict(
        extra_mc, torch=torch, logger=log, get_attention_tp_size=lambda: c().attn_tp_size,
        is_float4_e2m1fn_x2=lambda d: d.name == "float4_e2m1fn_x2", is_deepseek_nsa=is_dsa, is_deepseek_dsa=is_dsa,
        is_minimax_sparse=lambda hf: False, NSATokenToKVPool=dsa_pool, DSATokenToKVPool=dsa_pool, _is_hip=False,
        _is_npu=False, ceil_div=lambda a, b: -(-a // b),
        get_parallel=lambda: types.SimpleNamespace(attn_tp_size=c().attn_tp_size, attn_dcp_size=1, attn_cp_size=1),
        get_memory=lambda: types.SimpleNamespace(enable_hisparse=False, enable_hierarchical_cache=False,
                                                 enable_unified_cache_external_linker=False),
        get_disagg=lambda: types.SimpleNamespace(disaggregation_mode="null"),
        get_exec=lambda: types.SimpleNamespace(kernel=types.SimpleNamespace(
            dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="flashmla_kv")),
        get_schedule=lambda: types.SimpleNamespace(max_total_tokens=None),
        envs=_Env({"SGLANG_NPU_ENABLE_SPARSE_KV_OFFLOAD": False}),
        # logical-page KV sharding is off: no fixed scratch (mem_cache/page_interleave.py)
        compute_page_shard_scratch_bytes=lambda kvc, include_mtp=False: 0,
        mambaish_config=lambda model_config: None,
        get_available_gpu_memory=lambda *a, **k: self._avail_gib,
        get_world_group=lambda: types.SimpleNamespace(world_size=1, cpu_group=None))
    out: Dict[str, Any] = dict(mc_fns)
    if self.v < (0, 5, 9):
        m = "sglang/srt/model_executor/model_runner.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m), ["ModelRunner.profile_max_num_token"], common))
        return out
    if self.v < (0, 5, 13):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m),
                                       ["ModelRunnerKVCacheMixin.get_cell_size_per_token"], common))
        return out
    modules: Dict[str, Any] = {"sglang.srt.layers.cp.utils": types.SimpleNamespace(  # GLM DSA CP layer split off
        get_glm_dsa_layer_split_effective_num_layers=lambda kvc, n: n,
        get_glm_dsa_cp_layer_shard_info=lambda kvc: (None, 1), get_layer_shard_range=_not_called)}
    if self.v >= (0, 5, 18):
        m = "sglang/srt/mem_cache/kv_cache_configurator.py"
        kvc = loader.compile_defs(self._text(m), self.origin(m), ["calculate_mla_kv_cache_dim",
                                                                  "_should_elide_dsa_index_k"], common)
        modules["sglang.srt.mem_cache.kv_cache_configurator"] = types.SimpleNamespace(**kvc)
    fp4m = "sglang/srt/layers/quantization/fp4_kv_cache_quant_method.py"
    if self.v > (0, 5, 20) and self.src.has(fp4m):
        modules[fp4m[:-3].replace("/", ".")] = _fp4_module(self, fp4m)
    pc = "sglang/srt/model_executor/pool_configurator.py"
    text = self._text(pc)
    if loader.has_def(text, self.origin(pc), "_get_dsa_cache_layer_ids"):
        common["_get_dsa_cache_layer_ids"] = loader.compile_defs(text, self.origin(pc), ["_get_dsa_cache_layer_ids"],
                                                                 common)["_get_dsa_cache_layer_ids"]
    if loader.has_def(text, self.origin(pc), "_dflash_draft_cell_size"):
        common["_dflash_draft_cell_size"] = loader.compile_defs(text, self.origin(pc), ["_dflash_draft_cell_size"],
                                                                common)["_dflash_draft_cell_size"]
    names = [n for n in ("__init__", "_compute_cell_size", "_compute_dsa_indexer_cell_size")
             if loader.has_def(text, self.origin(pc), f"DefaultPoolConfigurator.{n}")]
    methods = loader.compile_defs(text, self.origin(pc), [f"DefaultPoolConfigurator.{n}" for n in names], common,
                                  modules=modules)
    # QSA adds a term only for models with a QSA profile (none here)
    methods["_compute_qsa_cell_size"] = staticmethod(lambda hf_config, num_layers: 0)
    out["DefaultPoolConfigurator"] = type("DefaultPoolConfigurator", (), methods)
    return out


SGLangPools.cell = _cell  # type: ignore[attr-defined]
