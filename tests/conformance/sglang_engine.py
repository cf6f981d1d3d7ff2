"""SGLang's own startup-memory functions, per release, runnable without torch or a GPU.

Each entry point takes plain inputs, builds a stand-in ``self`` / config from them, and runs the
engine's real code extracted from the release wheel (see ``loader.py``). Stand-ins replace only
what is not arithmetic: GPU queries (``get_device_memory_capacity`` returns the case's MiB,
``get_available_gpu_memory`` the case's GiB), torch dtype sizes, env flags at their defaults,
logging. Everything else must come from the wheel; a missing stand-in raises, never defaults.
"""
from __future__ import annotations

import copy
import logging
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import loader
from .wheels import EngineSource, engine_source

log = logging.getLogger("kvscope.conformance.sglang")


def _vtuple(version: str) -> tuple:
    out = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits and part.isdigit() else (int(digits) if digits else 0))
        if not part.isdigit():
            break
    return tuple(out)


class _Env:
    """``envs.X`` with every flag at its default (unset); ``defaults`` gives ``.get()`` values."""

    def __init__(self, defaults: Optional[Dict[str, Any]] = None):
        object.__setattr__(self, "_defaults", defaults or {})

    class _Var:
        def __init__(self, name: str, defaults: Dict[str, Any]):
            self.name = name
            self.defaults = defaults

        def is_set(self) -> bool:
            return False

        def get(self) -> Any:
            if self.name in self.defaults:
                return self.defaults[self.name]
            raise loader.StandInMissing(f"conformance: env {self.name} read; give it a stand-in")

        def set(self, value: Any) -> None:
            pass

    def __getattr__(self, item: str) -> "_Env._Var":
        return _Env._Var(item, self._defaults)


# ---------------------------------------------------------------------------------------------
# default mem_fraction_static / chunked_prefill_size / cuda graph max bs
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArgsCase:
    """The ServerArgs fields that the default-memory code reads (engine names)."""

    gpu_mem_mib: Optional[int]  # get_device_memory_capacity(); None = unknown GPU
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    mem_fraction_static: Optional[float] = None
    chunked_prefill_size: Optional[int] = None
    cuda_graph_max_bs: Optional[int] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    max_prefill_tokens: int = 16384
    context_length: Optional[int] = None
    speculative_algorithm: Optional[str] = None
    speculative_num_draft_tokens: Optional[int] = None
    is_mla: bool = False
    is_multimodal: bool = False
    vit_num_layers: Optional[int] = None  # None = vision_config lacks the field
    vit_hidden_size: Optional[int] = None
    has_vision_config: bool = True
    disaggregation_mode: str = "null"
    moe_a2a_backend: str = "none"
    prefill_graph: Optional[bool] = None  # piecewise/prefill CUDA graph; None = release default
    model_path: str = "org/model"


@dataclass
class MemorySettings:
    mem_fraction_static: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    cuda_graph_bs: List[int] = field(default_factory=list)
    prefill_graph_bs: Optional[List[int]] = None


class SGLang:
    """One release. Methods run that release's code."""

    def __init__(self, version: str):
        self.version = version
        self.v = _vtuple(version)
        self.src: EngineSource = engine_source("sglang", version)
        self._cg: Any = None
        self._compiled: Dict[str, Any] = {}
        self._case: Any = None  # the case the cached stand-ins read

    # -- helpers ------------------------------------------------------------------------------
    def _text(self, member: str) -> str:
        return self.src.read(member)

    def origin(self, member: str) -> str:
        return f"{self.src.label}/{member}"

    def _model_config(self, c: ArgsCase) -> Any:
        vision = None
        if c.has_vision_config:
            vision = types.SimpleNamespace()
            if c.vit_num_layers is not None:
                vision.num_hidden_layers = c.vit_num_layers
            if c.vit_hidden_size is not None:
                vision.hidden_size = c.vit_hidden_size
        hf = types.SimpleNamespace()
        if vision is not None:
            hf.vision_config = vision
        return types.SimpleNamespace(is_multimodal=c.is_multimodal, hf_config=hf,
                                     attention_arch="MLA" if c.is_mla else "MHA")

    def _cuda_graph_module(self) -> Any:
        if self._cg is None:
            member = "sglang/srt/model_executor/cuda_graph_config.py"
            # default_prefill_backend() asks sglang.srt.utils.is_cuda(): we model CUDA GPUs.
            utils = loader.StubModule("sglang.srt.utils", {"is_cuda": lambda: True}, strict=True)
            def get_exec() -> Any:
                raise loader.StandInMissing("conformance: cuda_graph_config called get_exec()")

            runtime = loader.StubModule("sglang.srt.runtime_context", {"get_exec": get_exec}, strict=True)
            self._cg = loader.exec_module(self._text(member), self.origin(member),
                                          {"sglang.srt.utils": utils,
                                           "sglang.srt.runtime_context": runtime}, (),
                                          "sglang.srt.model_executor.cuda_graph_config")
        return self._cg

    def _server_args_attrs(self, c: ArgsCase) -> Dict[str, Any]:
        a: Dict[str, Any] = dict(
            device="cuda", model_path=c.model_path, tp_size=c.tp_size, pp_size=c.pp_size,
            dp_size=c.dp_size, enable_dp_attention=c.enable_dp_attention,
            attn_dp_size=c.dp_size if c.enable_dp_attention else 1,
            mem_fraction_static=c.mem_fraction_static, chunked_prefill_size=c.chunked_prefill_size,
            max_running_requests=c.max_running_requests, max_total_tokens=c.max_total_tokens,
            max_prefill_tokens=c.max_prefill_tokens, context_length=c.context_length,
            speculative_algorithm=c.speculative_algorithm,
            speculative_num_draft_tokens=c.speculative_num_draft_tokens,
            disaggregation_mode=c.disaggregation_mode, moe_a2a_backend=c.moe_a2a_backend,
            language_only=False, language_model_only=False, enable_symm_mem=False,
            disable_cuda_graph_padding=False, torch_compile_max_bs=32, page_size=1,
            attention_backend=None, moe_dense_tp_size=None, _cuda_graph_config_locked=set(),
        )
        if self.v < (0, 5, 14):
            a["cuda_graph_max_bs"] = c.cuda_graph_max_bs
            a["cuda_graph_bs"] = None
            a["piecewise_cuda_graph_tokens"] = None
            # field default: 4096 up to 0.5.6, None from 0.5.7 (resolved in _handle_gpu_memory_settings)
            a["piecewise_cuda_graph_max_tokens"] = 4096 if self.v < (0, 5, 7) else None
            on = c.prefill_graph
            a["enable_piecewise_cuda_graph"] = bool(on) if on is not None else False
            a["disable_piecewise_cuda_graph"] = (not on) if on is not None else False
        else:
            cg = self._cuda_graph_module()
            cfg = cg.default_cuda_graph_config()
            cfg.decode.max_bs = c.cuda_graph_max_bs
            if c.prefill_graph is not None:
                on = cg.default_cuda_graph_config().prefill.backend
                if on == cg.Backend.DISABLED:
                    on = cg.Backend.TC_PIECEWISE
                cfg.prefill.backend = on if c.prefill_graph else cg.Backend.DISABLED
            a["cuda_graph_config"] = cfg
        return a

    def default_memory_settings(self, c: ArgsCase) -> MemorySettings:
        if self.v < (0, 5):
            host = self._settings_v046(c)
        elif self.v < (0, 5, 20):
            host = self._settings_server_args_method(c)
        else:
            host = self._settings_memory_hook(c)
        if self.v < (0, 5, 14):
            return MemorySettings(host.mem_fraction_static, host.chunked_prefill_size,
                                  host.cuda_graph_max_bs, list(getattr(host, "cuda_graph_bs", None) or []),
                                  getattr(host, "piecewise_cuda_graph_tokens", None))
        cfg = host.cuda_graph_config
        return MemorySettings(host.mem_fraction_static, host.chunked_prefill_size,
                              cfg.decode.max_bs, list(cfg.decode.bs or []), cfg.prefill.bs)

    # 0.4.6.post5: inline in ServerArgs.__post_init__ (server_args.py l.244-290)
    def _settings_v046(self, c: ArgsCase) -> Any:
        member = "sglang/srt/server_args.py"
        text = self._text(member)
        post_init = loader.find_def(loader._parse(text, self.origin(member)), "ServerArgs.__post_init__")
        body = post_init.body
        start = next(i for i, s in enumerate(body) if "get_device_memory_capacity" in (loader.ast.unparse(s)))
        end = next(i for i, s in enumerate(body) if i > start and isinstance(s, loader.ast.If)
                   and "self.cuda_graph_max_bs is None" in loader.ast.unparse(s.test))
        fn = loader.ast.FunctionDef(
            name="_memory_defaults", args=post_init.args, body=body[start:end + 1],
            decorator_list=[], returns=None, type_comment=None)
        mod = loader.ast.Module(body=[fn], type_ignores=[])
        loader.ast.fix_missing_locations(mod)
        # 0.4.9+: the slice imports ModelConfig lazily (multimodal factor); 0.4.10+ calls
        # ServerArgs.adjust_mem_fraction_for_vlm, compiled from the same file.
        model_config = types.SimpleNamespace(
            ModelConfig=types.SimpleNamespace(from_server_args=lambda sa: self._model_config(c)))
        g = loader.StrictGlobals(self.origin(member), {
            "get_device_memory_capacity": lambda device=None: c.gpu_mem_mib,
            "logger": log,
        })
        g["__builtins__"] = loader._import_hook({"sglang.srt.configs.model_config": model_config},
                                                self.origin(member))
        local: Dict[str, Any] = {}
        exec(compile(mod, self.origin(member), "exec"), g, local)
        methods: Dict[str, Any] = {}
        if loader.has_def(text, self.origin(member), "ServerArgs.adjust_mem_fraction_for_vlm"):
            methods = loader.compile_defs(text, self.origin(member), ["ServerArgs.adjust_mem_fraction_for_vlm"],
                                          {"logger": log})
        host = loader.make_host("ServerArgs", methods, self._server_args_attrs(c))
        local["_memory_defaults"](host)
        return host

    # 0.5.6 - 0.5.18: ServerArgs._handle_gpu_memory_settings(self, gpu_mem)
    def _settings_server_args_method(self, c: ArgsCase) -> Any:
        member = "sglang/srt/server_args.py"
        text = self._text(member)
        origin = self.origin(member)
        wanted = ["_handle_gpu_memory_settings", "_generate_cuda_graph_batch_sizes",
                  "_generate_piecewise_cuda_graph_tokens", "_generate_cpu_graph_batch_sizes",
                  "_generate_decode_cuda_graph_batch_sizes", "_generate_prefill_cuda_graph_batch_sizes",
                  "adjust_mem_fraction_for_vlm", "reserve_for_graph_mb", "reserve_for_deepep_a2a_mb"]
        if "server_args" not in self._compiled:
            names = [f"ServerArgs.{n}" for n in wanted if loader.has_def(text, origin, f"ServerArgs.{n}")]
            stand_ins: Dict[str, Any] = {"is_npu": lambda: False, "envs": _Env(), "logger": log,
                                         "resolved_view": lambda sa: sa}
            if self.v >= (0, 5, 14):
                stand_ins["Backend"] = self._cuda_graph_module().Backend
            modules = {
                # 0.5.3-0.5.8: lazy `from ...model_config import ModelConfig` (multimodal factor)
                "sglang.srt.configs.model_config": types.SimpleNamespace(ModelConfig=types.SimpleNamespace(
                    from_server_args=lambda sa: self._model_config(self._case))),
                # 0.5.15: `from sglang.srt.arg_groups.overrides import resolved_view` (DeepEP term)
                "sglang.srt.arg_groups.overrides": types.SimpleNamespace(resolved_view=lambda sa: sa),
            }
            methods = loader.compile_defs(text, origin, names, stand_ins, modules=modules)
            methods["get_model_config"] = lambda self_: self._model_config(self._case)
            methods["use_mla_backend"] = lambda self_: self._case.is_mla
            # SGLANG_ENABLE_POST_CAPTURE_KV_SIZING defaults off (environ.py): the predicate is False.
            methods["post_capture_kv_sizing_planned"] = lambda self_: False
            methods["_resolved"] = lambda self_: self_
            self._compiled["server_args"] = type("ServerArgs", (), methods)
        self._case = c
        host = self._compiled["server_args"].__new__(self._compiled["server_args"])
        host.__dict__.update(self._server_args_attrs(c))
        host._handle_gpu_memory_settings(c.gpu_mem_mib)
        return host

    # 0.5.20+: arg_groups/memory_hook.py::handle_gpu_memory_settings(server_args)
    def _settings_memory_hook(self, c: ArgsCase) -> Any:
        self._case = c
        if "memory_hook" not in self._compiled:
            self._compiled["memory_hook"] = self._compile_memory_hook()
        fns = self._compiled["memory_hook"]
        host = loader.make_host("ServerArgs", {}, self._server_args_attrs(c))
        fns["handle_gpu_memory_settings"](host)
        return host

    def _compile_memory_hook(self) -> Dict[str, Any]:
        member = "sglang/srt/arg_groups/memory_hook.py"
        text = self._text(member)
        origin = self.origin(member)
        cg = self._cuda_graph_module()
        hook_member = "sglang/srt/arg_groups/cuda_graph_hook.py"

        def declare_resolution(sa: Any, _origin: str, **kw: Any) -> None:
            for k, v in kw.items():
                setattr(sa, k, v)

        common = {"resolving_view": lambda sa: sa, "resolved_view": lambda sa: sa,
                  "declare_resolution": declare_resolution, "logger": log}
        gen = loader.compile_defs(self._text(hook_member), self.origin(hook_member),
                                  ["generate_prefill_cuda_graph_batch_sizes",
                                   "generate_decode_cuda_graph_batch_sizes",
                                   "generate_cpu_graph_batch_sizes"], common)
        local_modules = {
            "sglang.srt.arg_groups.cuda_graph_hook": types.SimpleNamespace(**gen),
            # Only rewrites max_bs for large Qwen3-VL models on Hopper (model_overrides/qwen3_vl.py);
            # the generated cases are not that model.
            "sglang.srt.arg_groups.model_overrides.qwen3_vl": types.SimpleNamespace(
                expand_multimodal_decode_graph_to_running_limit=lambda sa, dc, gm: None),
        }
        stand_ins = dict(common)
        stand_ins.update({
            "copy": copy, "envs": _Env(), "Backend": cg.Backend, "Phase": cg.Phase,
            "get_device_memory_capacity": lambda device=None: self._case.gpu_mem_mib,
            "model_config_of": lambda sa: self._model_config(self._case),
            "post_capture_kv_sizing_planned": lambda sa: False,
            "use_mla_backend": lambda sa: self._case.is_mla,
            "attn_dp_enabled_of": lambda view: view.enable_dp_attention,
            "get_platform": lambda: types.SimpleNamespace(is_xpu=False),
            "_DEFAULT_PP_PREFILL_CUDA_GRAPH_MAX_TOKENS": 8192,
        })
        return loader.compile_defs(text, origin, ["handle_gpu_memory_settings", "reserve_for_graph_mb",
                                                  "reserve_for_deepep_a2a_mb", "adjust_mem_fraction_for_vlm"],
                                   stand_ins, modules=local_modules)


# ---------------------------------------------------------------------------------------------
# cell size and the profile (post-load free memory -> tokens)
# ---------------------------------------------------------------------------------------------

class FakeDtype:
    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


DTYPES = {1: FakeDtype("float8_e4m3fn", 1), 2: FakeDtype("bfloat16", 2), 4: FakeDtype("float32", 4)}


def fake_torch() -> Any:
    utils = types.SimpleNamespace(_element_size=lambda dtype: dtype.itemsize)
    return types.SimpleNamespace(_utils=utils, float8_e4m3fn=DTYPES[1], bfloat16=DTYPES[2],
                                 float32=DTYPES[4])


@dataclass(frozen=True)
class ProfileCase:
    """One rank's profile inputs, in SGLang's units (GiB floats, as get_available_gpu_memory returns)."""

    attention: str  # "mha" | "mla"
    num_layers: int  # KV layers on this PP stage
    total_num_kv_heads: int
    head_dim: int
    v_head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    kv_bytes: int  # element size of the KV dtype (1, 2, 4)
    attn_tp_size: int
    pre_model_load_gib: float  # min_per_gpu_memory / pre_model_load_memory
    available_gib: float  # free memory at the profile (after weights)
    mem_fraction_static: float
    page_size: int = 1


@dataclass
class ProfileResult:
    cell_size: int
    tokens: Optional[int]  # classic: profile_max_num_token's value; current: pool tokens (page-rounded)
    error: Optional[str] = None


def _model_config_for(c: ProfileCase, get_num_kv_heads: Any) -> Any:
    mc = types.SimpleNamespace(
        head_dim=c.head_dim, v_head_dim=c.v_head_dim, kv_lora_rank=c.kv_lora_rank,
        qk_rope_head_dim=c.qk_rope_head_dim, total_num_kv_heads=c.total_num_kv_heads,
        is_hybrid_swa=False, is_hybrid_gdn=False, is_multimodal=False,
        hf_config=types.SimpleNamespace(architectures=[]),  # 0.5.7+: `"MiMoV2Flash..." in architectures`
        full_attention_layer_ids=None,  # 0.5.7: layer count from it when set (no generated model sets it)
        num_key_value_heads=c.total_num_kv_heads, quantization=None, is_draft_model=False)
    mc.get_num_kv_heads = types.MethodType(get_num_kv_heads, mc)
    # get_total_num_kv_heads reads architecture-specific hf_config keys; the generated configs
    # state the KV-head count directly.
    mc.get_total_num_kv_heads = lambda: c.total_num_kv_heads
    return mc


def _profile_members(v: tuple) -> List[str]:
    out = ["sglang/srt/configs/model_config.py"]
    # layouts: model_runner.py (<= 0.5.6), the KV-cache mixin (0.5.7+), pool_configurator.py
    # (0.5.12+), mem_cache/kv_cache_configurator.py (0.5.18+; 0.5.15 still the mixin)
    if v < (0, 5, 7):
        out.append("sglang/srt/model_executor/model_runner.py")
    elif v < (0, 5, 18):
        out += ["sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
                "sglang/srt/model_executor/pool_configurator.py"]
    else:
        out += ["sglang/srt/mem_cache/kv_cache_configurator.py",
                "sglang/srt/model_executor/pool_configurator.py"]
    return out


def profile_members(version: str) -> tuple:
    return tuple(_profile_members(_vtuple(version)))


def _profile(self: SGLang, c: ProfileCase) -> ProfileResult:
    self._case = c
    if "profile" not in self._compiled:
        self._compiled["profile"] = _compile_profile(self)
    fns = self._compiled["profile"]
    mc = _model_config_for(c, fns["get_num_kv_heads"])
    runner = types.SimpleNamespace(
        device="cuda", gpu_id=0, is_draft_worker=False, mambaish_config=None, pp_size=1, is_hybrid_gdn=False,
        num_effective_layers=c.num_layers, model_config=mc, use_mla_backend=c.attention == "mla",
        kv_cache_dtype=DTYPES[c.kv_bytes], mem_fraction_static=c.mem_fraction_static,
        server_args=types.SimpleNamespace(mem_fraction_static=c.mem_fraction_static, enable_hisparse=False,
                                         mm_feature_transport=None),
        start_layer=0, end_layer=c.num_layers, post_capture_kv_active=False, kv_cache_dtype_str="auto",
        model_dtype=DTYPES[2])
    if self.v < (0, 5, 12):
        if "get_cell_size_per_token" in fns:
            runner.get_cell_size_per_token = types.MethodType(fns["get_cell_size_per_token"], runner)
            cell = runner.get_cell_size_per_token(c.num_layers)
        else:
            cell = None
        tokens = fns["profile_max_num_token"](runner, c.pre_model_load_gib)
        if cell is None:  # inline in profile_max_num_token (<= 0.5.6): recompute what it divided by
            cell = _cell_from_inline(self, c, fns)
        return ProfileResult(cell, tokens)
    # QSA (0.5.23) adds a cell term only for models with a QSA config; the generated models have none.
    conf = types.SimpleNamespace(kv_cache_dtype_str="auto", _fixed_overhead_bytes=0, _zero_kv_max_tokens=None,
                                 _compute_qsa_cell_size=lambda hf_config, num_layers: 0)
    cell = fns["_compute_cell_size"](conf, runner, c.num_layers)
    try:
        avail_bytes = fns["_profile_available_bytes"](runner, c.pre_model_load_gib)
    except ValueError as exc:
        return ProfileResult(cell, None, f"ValueError: {exc}")
    conf._cell_size = cell
    pool = fns["calculate_pool_sizes"](conf, avail_bytes, c.page_size)
    return ProfileResult(cell, pool.max_total_num_tokens)


def _cell_from_inline(self: SGLang, c: ProfileCase, fns: Dict[str, Any]) -> int:
    # <= 0.5.6 computes the cell inside profile_max_num_token: run it with rest = 1 byte x 2**40
    # headroom-free inputs (pre = 0 so rest = available) and read the divisor back exactly.
    probe = dataclass_replace(c, pre_model_load_gib=0.0, available_gib=float(1 << 20))
    self._case = probe
    runner = types.SimpleNamespace(
        device="cuda", gpu_id=0, is_draft_worker=False, mambaish_config=None, pp_size=1, is_hybrid_gdn=False,
        num_effective_layers=c.num_layers, model_config=_model_config_for(c, fns["get_num_kv_heads"]),
        use_mla_backend=c.attention == "mla", kv_cache_dtype=DTYPES[c.kv_bytes],
        mem_fraction_static=c.mem_fraction_static, start_layer=0, end_layer=c.num_layers)
    n = fns["profile_max_num_token"](runner, 0.0)
    self._case = c
    total = (1 << 20) * (1 << 30)
    # n = total // cell; the cell is the unique divisor in the small range that reproduces n
    cell = total // n
    while total // cell > n:
        cell += 1
    return cell


def dataclass_replace(obj: Any, **kw: Any) -> Any:
    import dataclasses
    return dataclasses.replace(obj, **kw)


def _compile_profile(self: SGLang) -> Dict[str, Any]:
    torch = fake_torch()
    world = lambda: types.SimpleNamespace(world_size=1, cpu_group=None)  # noqa: E731
    common: Dict[str, Any] = {
        "torch": torch, "get_world_group": world, "logger": log, "math": __import__("math"),
        "gc": types.SimpleNamespace(collect=lambda: 0),
        "get_available_gpu_memory": lambda *a, **k: self._case.available_gib,
        "get_attention_tp_size": lambda: self._case.attn_tp_size,
        "is_float4_e2m1fn_x2": lambda dtype: False,
        "is_deepseek_nsa": lambda hf: False, "is_deepseek_dsa": lambda hf: False,
        "is_minimax_sparse": lambda hf: False, "envs": _Env({"SGLANG_NPU_ENABLE_SPARSE_KV_OFFLOAD": False}),
        "get_parallel": lambda: types.SimpleNamespace(
            attn_tp_size=self._case.attn_tp_size, attn_dcp_size=1, launch_world_size=1,
            world_group=types.SimpleNamespace(cpu_group=None)),
        "get_schedule": lambda: types.SimpleNamespace(
            mem_fraction_static=self._case.mem_fraction_static, prefill_max_requests=None,
            max_mamba_cache_size=None),
        "get_exec": lambda: types.SimpleNamespace(graph=types.SimpleNamespace(
            cuda_graph_config=types.SimpleNamespace(prefill=types.SimpleNamespace(
                full_prefill_max_req=None, backend="breakable")))),
        "get_disagg": lambda: types.SimpleNamespace(disaggregation_mode="null"),
        "get_mm": lambda: types.SimpleNamespace(mm_feature_transport=None),
        "Backend": types.SimpleNamespace(FULL="full"),
        "MemoryPoolConfig": lambda **kw: types.SimpleNamespace(**kw),
    }
    out: Dict[str, Any] = {}
    mc_member = "sglang/srt/configs/model_config.py"
    out.update(loader.compile_defs(self._text(mc_member), self.origin(mc_member),
                                   ["ModelConfig.get_num_kv_heads"], common))
    if self.v < (0, 5, 7):
        m = "sglang/srt/model_executor/model_runner.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m), ["ModelRunner.profile_max_num_token"], common))
        return out
    pc = "sglang/srt/model_executor/pool_configurator.py"
    if self.v < (0, 5, 12):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m),
                                       ["ModelRunnerKVCacheMixin.get_cell_size_per_token",
                                        "ModelRunnerKVCacheMixin.profile_max_num_token"], common))
        return out
    if self.v < (0, 5, 18):
        m = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
        out.update(loader.compile_defs(self._text(m), self.origin(m),
                                       ["ModelRunnerKVCacheMixin._profile_available_bytes"], common))
    else:
        m = "sglang/srt/mem_cache/kv_cache_configurator.py"
        kvc_fns = loader.compile_defs(self._text(m), self.origin(m),
                                      ["KVCacheConfigurator._profile_available_bytes",
                                       "mm_runtime_reservation_gb", "calculate_mla_kv_cache_dim"],
                                      dict(common, is_multimodal=False))
        out.update(kvc_fns)
    local_modules = {
        "sglang.srt.layers.cp.utils": types.SimpleNamespace(
            get_glm_dsa_layer_split_effective_num_layers=lambda kvc, n: n),
        "sglang.srt.mem_cache.kv_cache_configurator": types.SimpleNamespace(
            calculate_mla_kv_cache_dim=out.get("calculate_mla_kv_cache_dim")),
    }
    pool = loader.compile_defs(self._text(pc), self.origin(pc),
                               ["DefaultPoolConfigurator._compute_cell_size",
                                "DefaultPoolConfigurator.calculate_pool_sizes"],
                               common, modules=local_modules)
    out.update(pool)
    return out


SGLang.profile = _profile  # type: ignore[attr-defined]
