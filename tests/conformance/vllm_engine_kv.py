"""vLLM's own KV-cache layout code, per release, runnable without torch or a GPU.

The engine side of ``test_vllm_kv_cache.py``. For one release it executes, as whole modules
(``loader.exec_module``), the wheel's

* ``vllm/v1/kv_cache_interface.py`` -- the spec dataclasses (``FullAttentionSpec``,
  ``MLAAttentionSpec``, ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MambaSpec``,
  ``UniformTypeKVCacheSpecs``) with their ``page_size_bytes`` / ``max_memory_usage_bytes``;
* ``vllm/v1/core/kv_cache_utils.py`` (<= 0.30) or ``kv_cache_planning.py`` +
  ``kv_cache_config_builder.py`` (0.33) -- ``get_kv_cache_groups``, ``get_kv_cache_configs``
  (admission check, ``num_blocks``, min over workers), ``estimate_max_model_len``, the capacity
  log (``_report_kv_cache_config`` / ``get_kv_cache_capacity`` / ``update_kv_cache_capacity``);
* plus the small helpers they import (``vllm/utils/math_utils.py``, ``kv_cache_layout.py``,
  ``kv_cache_spec_registry.py``) and, compiled as single defs, ``format_gib``,
  ``ModelConfig.get_num_kv_heads`` and ``MambaStateShapeCalculator``'s state shapes.

Stand-ins replace only what is not arithmetic: ``torch`` dtypes report their element size
(``get_dtype_size``), the logger records the formatted messages (the "GPU KV cache size" and
"Maximum concurrency" figures are read back from them, as a user reads them in the log), env flags
are unset, and ``VllmConfig`` is a plain namespace holding the case's numbers. A config attribute
the case does not provide raises (``_Strict``) instead of defaulting silently.

The specs are built the way the attention / mamba layers' ``get_kv_cache_spec`` build them (one
spec per decoder layer, named ``model.layers.<i>.<kind>``), from the case's engine-vocabulary
inputs. The hybrid attention block size and mamba page padding come from the release's own
``HybridAttentionMambaModelConfig.verify_and_update_config`` (<= 0.19) /
``Platform._align_hybrid_block_size`` (0.20.2+), run by :func:`hybrid_alignment`; the
``mamba_cache_mode`` is a case input.
"""
from __future__ import annotations

import logging
import re
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import loader
from .wheels import EngineSource, engine_source

log = logging.getLogger("kvscope.conformance.vllm_kv")

INTERFACE = "vllm/v1/kv_cache_interface.py"
UTILS = "vllm/v1/core/kv_cache_utils.py"
PLANNING = "vllm/v1/core/kv_cache_planning.py"
BUILDER = "vllm/v1/core/kv_cache_config_builder.py"
MATH_UTILS = "vllm/utils/math_utils.py"
MEM_UTILS = "vllm/utils/mem_utils.py"
LAYOUT = "vllm/v1/kv_cache_layout.py"
REGISTRY = "vllm/v1/kv_cache_spec_registry.py"
MAMBA_UTILS = "vllm/model_executor/layers/mamba/mamba_utils.py"
MODEL_CONFIG = ("vllm/config/model.py", "vllm/config/__init__.py")
UTILS_INIT = "vllm/utils/__init__.py"
MANAGERS = "vllm/v1/core/single_type_kv_cache_manager.py"


def vtuple(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def kv_members(version: str) -> Tuple[str, ...]:
    v = vtuple(version)
    out = [INTERFACE, UTILS, MAMBA_UTILS, *MODEL_CONFIG]
    if v >= (0, 33):
        out += [PLANNING, BUILDER]
    if v >= (0, 24):  # kv_cache_spec_registry.py from 0.24.0, kv_cache_layout.py from 0.29.0 (absent: recorded)
        out += [REGISTRY, MANAGERS, LAYOUT]
    if v >= (0, 12):  # vllm/utils/math_utils.py + mem_utils.py from 0.12.0
        out += [MATH_UTILS, MEM_UTILS]
    else:
        out += [UTILS_INIT]
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# stand-ins
# ---------------------------------------------------------------------------------------------

class DType:
    """``torch.dtype`` as far as the KV code looks at it: a name and an element size."""

    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __deepcopy__(self, memo: Any) -> "DType":  # torch dtypes are singletons
        return self


DTYPES = {1: DType("uint8", 1), 2: DType("bfloat16", 2), 4: DType("float32", 4)}


def _torch_module() -> loader.StubModule:
    values = {"dtype": DType, "bfloat16": DTYPES[2], "float16": DType("float16", 2),
              "float32": DTYPES[4], "uint8": DTYPES[1], "int8": DType("int8", 1),
              "float8_e4m3fn": DType("float8_e4m3fn", 1), "float8_e5m2": DType("float8_e5m2", 1)}
    return loader.StubModule("torch", values)


def get_dtype_size(dtype: DType) -> int:
    """``torch.tensor([], dtype=dtype).element_size()`` (vllm/utils/torch_utils.py)."""
    return dtype.itemsize


class CaptureLogger:
    """``init_logger(__name__)``: keeps the formatted messages, ``*_once`` included."""

    def __init__(self) -> None:
        self.messages: List[Tuple[str, str]] = []

    def _log(self, level: str, msg: str, *args: Any, **kwargs: Any) -> None:
        self.messages.append((level, msg % args if args else msg))

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        level = item.replace("_once", "")
        return lambda msg, *a, **k: self._log(level, msg, *a, **k)


class _Strict(types.SimpleNamespace):
    """A config namespace: reading a field the case did not set fails loudly."""

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        raise loader.StandInMissing(f"conformance: vLLM config field {item!r} has no stand-in")


# ---------------------------------------------------------------------------------------------
# the case (engine vocabulary)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MambaCase:
    kind: str  # "mamba2" | "gdn"
    # mamba2: n_groups, num_heads, head_dim, state_size, intermediate (= num_heads * head_dim)
    # gdn: num_k_heads, num_v_heads, head_k_dim, head_v_dim
    a: int
    b: int
    c: int
    d: int
    conv_kernel: int = 4


@dataclass(frozen=True)
class KVCase:
    """One DP engine's KV planning inputs."""

    layers: Tuple[str, ...]  # per decoder layer: "full" | "sliding" | "chunked" | "mamba"
    attention: str  # "mha" | "mla"
    total_num_kv_heads: int
    head_size: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    dtype_bytes: int  # KV element size (cache dtype)
    cache_dtype: str  # "auto" | "fp8" | "fp8_ds_mla"
    tp: int
    pp_stages: Tuple[Tuple[int, int], ...]  # [lo, hi) decoder layers per PP rank
    block_size: int  # attention block size (after any hybrid alignment: a case input)
    window: int  # sliding window / attention chunk size
    max_model_len: int
    max_num_batched_tokens: int
    max_in_flight_tokens: int  # VllmConfig.max_in_flight_tokens (0.26+)
    available: Tuple[int, ...]  # per PP rank
    mamba: Optional[MambaCase] = None
    mamba_dtype_bytes: int = 2
    mamba_page_size_padded: Optional[int] = None
    mamba_block_size: Optional[int] = None
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0
    num_gpu_blocks_override: Optional[int] = None
    # draft-model attention layers (EAGLE/MTP) after the decoder layers, on the last PP stage,
    # with their own geometry: "full" | "sliding"
    draft_layers: Tuple[str, ...] = ()
    draft_kv_heads: int = 1
    draft_head_size: int = 128
    auto_fit: bool = False  # --max-model-len -1 (original_max_model_len == -1), 0.14+

    @property
    def num_layers(self) -> int:
        return len(self.layers) + len(self.draft_layers)

    def kind(self, i: int) -> str:
        return self.layers[i] if i < len(self.layers) else self.draft_layers[i - len(self.layers)]

    def stage_layers(self, r: int) -> range:
        lo, hi = self.pp_stages[r]
        return range(lo, self.num_layers if r == len(self.pp_stages) - 1 else hi)

    def layer_name(self, i: int) -> str:
        return f"model.layers.{i}.{'mixer' if self.kind(i) == 'mamba' else 'self_attn.attn'}"


@dataclass
class KVResult:
    page_size_bytes: Dict[int, int]  # per decoder layer, as built (before unification)
    groups: Optional[List[Tuple[Tuple[int, ...], Any]]] = None  # global groups: (layers, spec)
    num_blocks: Optional[int] = None
    tokens: Optional[str] = None  # "GPU KV cache size: N tokens" (N as logged, with commas)
    concurrency: Optional[str] = None  # "Maximum concurrency for L tokens per request: X.XXx" (X.XX)
    needed_bytes: Optional[List[int]] = None  # per worker, _max_memory_usage_bytes(_from_groups)
    estimated_max_len: Optional[List[int]] = None  # per worker, at its available (check) memory
    error: Optional[str] = None  # "ValueError: ..." / "NotImplementedError: ..."
    max_model_len: Optional[int] = None  # model_config.max_model_len after get_kv_cache_configs (auto-fit)
    messages: List[Tuple[str, str]] = field(default_factory=list)


_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+|inf|nan)x")


class VllmKV:
    """One release's KV planning code."""

    def __init__(self, version: str):
        self.version = version
        self.v = vtuple(version)
        self.src: EngineSource = engine_source("vllm", version)
        self.logger = CaptureLogger()
        self._load()

    def origin(self, member: str) -> str:
        return f"{self.src.label}/{member}"

    # -- loading ---------------------------------------------------------------------------------
    def _exec(self, member: str, modules: Dict[str, Any], name: str) -> types.ModuleType:
        return loader.exec_module(self.src.read(member), self.origin(member), modules,
                                  stub_prefixes=("vllm", "torch", "triton", "typing_extensions", "numpy"),
                                  module_name=name)

    def _load(self) -> None:
        logger_mod = loader.StubModule("vllm.logger", {"init_logger": lambda name: self.logger})
        GiB = 1 << 30
        mods: Dict[str, Any] = {"torch": _torch_module(), "vllm.logger": logger_mod}
        import typing
        mods["typing_extensions"] = loader.StubModule("typing_extensions", {"Self": typing.Any})
        if self.v >= (0, 12):  # utils split into math_utils / mem_utils / torch_utils (0.12.0)
            math_utils = self._exec(MATH_UTILS, {}, "vllm.utils.math_utils")
            mem: Dict[str, Any] = {}
            if "def format_gib" in self.src.read(MEM_UTILS):  # 0.14+; 0.12/0.13 print GiB_bytes inline
                mem["format_gib"] = loader.compile_defs(self.src.read(MEM_UTILS), self.origin(MEM_UTILS),
                                                        ["format_gib"], {"GiB_bytes": GiB})["format_gib"]
            mods["vllm.utils.math_utils"] = math_utils
            mods["vllm.utils.mem_utils"] = loader.StubModule("vllm.utils.mem_utils", mem)
            mods["vllm.utils.mem_constants"] = loader.StubModule("vllm.utils.mem_constants", {"GiB_bytes": GiB})
            mods["vllm.utils.torch_utils"] = loader.StubModule(
                "vllm.utils.torch_utils", {"get_dtype_size": get_dtype_size})
            self.cdiv = math_utils.cdiv
        else:
            cdiv = loader.compile_defs(self.src.read(UTILS_INIT), self.origin(UTILS_INIT), ["cdiv"], {})["cdiv"]
            mods["vllm.utils"] = loader.StubModule(
                "vllm.utils", {"cdiv": cdiv, "get_dtype_size": get_dtype_size, "GiB_bytes": GiB})
            self.cdiv = cdiv
        self.has_registry = self.v >= (0, 24) and self.src.has(REGISTRY)
        if self.v >= (0, 24) and self.src.has(LAYOUT):  # kv_cache_layout.py (0.29.0+)
            # vllm/v1/attention/backend.py MultipleOf: block-stride alignment in kernel blocks
            @dataclass(frozen=True)
            class MultipleOf:
                base: int
            mods["vllm.v1.attention.backend"] = loader.StubModule("vllm.v1.attention.backend",
                                                                  {"MultipleOf": MultipleOf})
            mods["vllm.v1.kv_cache_layout"] = self._exec(LAYOUT, mods, "vllm.v1.kv_cache_layout")
        if self.has_registry:
            mods["vllm.v1.kv_cache_spec_registry"] = self._exec(REGISTRY, mods, "vllm.v1.kv_cache_spec_registry")
        self.iface = self._exec(INTERFACE, mods, "vllm.v1.kv_cache_interface")
        mods["vllm.v1.kv_cache_interface"] = self.iface
        self.utils = self._exec(UTILS, mods, "vllm.v1.core.kv_cache_utils")
        mods["vllm.v1.core.kv_cache_utils"] = self.utils
        self.planning = self.utils
        if self.v >= (0, 33):
            # Platform.get_kv_cache_config_builder_cls: the default builder on CUDA
            default_builder = "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder"
            mods["vllm.platforms"] = loader.StubModule("vllm.platforms", {"current_platform": types.SimpleNamespace(
                get_kv_cache_config_builder_cls=lambda cfg: default_builder)})
            mods["vllm.utils.import_utils"] = loader.StubModule("vllm.utils.import_utils", {
                "resolve_obj_by_qualname": self._resolve})
            mods["vllm.v1.core.kv_cache_config_builder"] = self._exec(
                BUILDER, mods, "vllm.v1.core.kv_cache_config_builder")
            self.planning = self._exec(PLANNING, mods, "vllm.v1.core.kv_cache_planning")
            mods["vllm.v1.core.kv_cache_planning"] = self.planning
        self._mods = mods
        if self.has_registry:
            self._register_specs()
        self._load_helpers()

    def _resolve(self, qualname: str) -> Any:
        module, _, name = qualname.rpartition(".")
        assert module == "vllm.v1.core.kv_cache_planning", qualname
        return getattr(self.planning, name)

    def _register_specs(self) -> None:
        """Run ``register_all_kvcache_specs`` (single_type_kv_cache_manager.py) once, with the
        manager classes as opaque tags: the registry decides which specs group together."""
        registry = self._mods["vllm.v1.kv_cache_spec_registry"]
        text = self.src.read(MANAGERS)
        stand_ins: Dict[str, Any] = {k: getattr(self.iface, k) for k in dir(self.iface) if k.endswith("Spec")}
        stand_ins["KVCacheSpecRegistry"] = registry.KVCacheSpecRegistry
        body = loader.def_source(text, self.origin(MANAGERS), "register_all_kvcache_specs")
        for name in sorted(set(re.findall(r"\b([A-Z][A-Za-z]+)\b", body))):
            if name.endswith("Manager"):
                stand_ins.setdefault(name, type(name, (), {}))
            elif name == "KVCacheGroupRole":
                stand_ins[name] = loader.AutoStub(name)
            elif name.endswith("Spec") and name not in stand_ins:
                # a spec this case never builds (e.g. TQFullAttentionSpec): a bare subclass
                stand_ins[name] = type(name, (self.iface.FullAttentionSpec,), {})
        platforms = loader.StubModule("vllm.platforms", {"current_platform": loader.AutoStub("current_platform")})
        fn = loader.compile_defs(text, self.origin(MANAGERS), ["register_all_kvcache_specs"], stand_ins,
                                 modules={"vllm.platforms": platforms})["register_all_kvcache_specs"]
        fn(None)

    def _load_helpers(self) -> None:
        member = next(m for m in MODEL_CONFIG if self.src.has(m)
                      and loader.has_def(self.src.read(m), self.origin(m), "ModelConfig.get_num_kv_heads"))
        fn = loader.compile_defs(self.src.read(member), self.origin(member), ["ModelConfig.get_num_kv_heads"],
                                 {"ParallelConfig": object, "ModelArchitectureConfig": object})
        self._get_num_kv_heads = fn["get_num_kv_heads"]
        text = self.src.read(MAMBA_UTILS)
        names = [f"MambaStateShapeCalculator.{n}" for n in (
            "mamba2_state_shape", "gated_delta_net_state_shape", "extra_groups_for_head_shards",
            "_orient_conv_shape") if loader.has_def(text, self.origin(MAMBA_UTILS), f"MambaStateShapeCalculator.{n}")]
        self.has_gdn = any(n.endswith("gated_delta_net_state_shape") for n in names)

        def divide(numerator: int, denominator: int) -> int:  # vllm/distributed/utils.py
            assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
            return numerator // denominator

        fns = loader.compile_defs(text, self.origin(MAMBA_UTILS), names,
                                  {"divide": divide, "is_conv_state_dim_first": lambda: False})
        self._mamba_calc = type("MambaStateShapeCalculator", (), dict(fns))

    # -- config ------------------------------------------------------------------------------------
    def vllm_config(self, c: KVCase) -> Any:
        model = _Strict(max_model_len=c.max_model_len, original_max_model_len=-1 if c.auto_fit else c.max_model_len,
                        use_mla=c.attention == "mla", supports_kv_cache_grouping=False)
        sched = _Strict(max_num_batched_tokens=c.max_num_batched_tokens, disable_hybrid_kv_cache_manager=False,
                        max_num_encoder_input_tokens=0)
        cache = _Strict(num_gpu_blocks_override=c.num_gpu_blocks_override, mamba_cache_mode=c.mamba_cache_mode,
                        block_size=c.block_size, enable_prefix_caching=c.mamba_cache_mode == "align",
                        prefix_cache_retention_interval=None, kv_cache_size_tokens=None,
                        kv_cache_max_concurrency=None)
        cache.get_resolved_kv_cache_layout = lambda *a, **k: self._default_layout()
        par = _Strict(decode_context_parallel_size=1, prefill_context_parallel_size=1,
                      tensor_parallel_size=c.tp, pipeline_parallel_size=len(c.pp_stages))
        cfg = _Strict(model_config=model, scheduler_config=sched, cache_config=cache, parallel_config=par,
                      speculative_config=None, kv_transfer_config=None, max_in_flight_tokens=c.max_in_flight_tokens,
                      num_prefill_lookahead_tokens=0, device_config=_Strict(device_type="cuda"),
                      attention_config=_Strict(hisparse_config=None))
        return cfg

    def _default_layout(self) -> Any:
        """``resolve_kv_cache_layout`` (vllm/v1/attention/backends/utils.py @ v0.33.0) with no
        backend preference and no ``VLLM_KV_CACHE_LAYOUT``: ``_DEFAULT_LAYOUT_PREFERENCE[0]``,
        LBNHC ("NHD", layer-outer). Block-outermost layouts are not exercised."""
        return self._mods["vllm.v1.kv_cache_layout"].KVCacheLayout.LBNHC

    # -- specs -------------------------------------------------------------------------------------
    def num_kv_heads(self, c: KVCase, total: Optional[int] = None, mla: Optional[bool] = None) -> int:
        total = c.total_num_kv_heads if total is None else total
        host = types.SimpleNamespace(use_mla=(c.attention == "mla") if mla is None else mla,
                                     get_total_num_kv_heads=lambda: total,
                                     model_arch_config=types.SimpleNamespace(total_num_kv_heads=total))
        return self._get_num_kv_heads(host, types.SimpleNamespace(tensor_parallel_size=c.tp))

    def mamba_shapes(self, c: KVCase) -> Tuple[Tuple[int, ...], ...]:
        m = c.mamba
        assert m is not None
        calc = self._mamba_calc
        spec = (c.num_speculative_blocks,) if c.num_speculative_blocks else ()
        if m.kind == "gdn":
            return calc.gated_delta_net_state_shape(c.tp, m.a, m.b, m.c, m.d, m.conv_kernel, *spec)
        return calc.mamba2_state_shape(c.tp, m.b * m.c, m.a, m.b, m.c, m.d, m.conv_kernel, *spec)

    def hybrid_pages(self, c: KVCase) -> Tuple[int, int]:
        """(attention page, unpadded mamba page) of a hybrid case at its block size."""
        I = self.iface
        kw: Dict[str, Any] = dict(block_size=c.block_size, num_kv_heads=self.num_kv_heads(c),
                                  head_size=c.head_size, dtype=DTYPES[c.dtype_bytes])
        if self.v < (0, 11):
            kw["use_mla"] = False
        return (I.FullAttentionSpec(**kw).page_size_bytes,
                I.MambaSpec(block_size=1, shapes=self.mamba_shapes(c),
                            dtypes=(DTYPES[c.mamba_dtype_bytes],) * 2).page_size_bytes)

    def layer_specs(self, c: KVCase) -> Dict[int, Any]:
        I = self.iface
        dtype = DTYPES[c.dtype_bytes]
        heads = self.num_kv_heads(c)
        mla = c.attention == "mla"
        head = c.kv_lora_rank + c.qk_rope_head_dim if mla else c.head_size
        old = self.v < (0, 11)  # AttentionSpec.use_mla (0.10.x)
        common: Dict[str, Any] = dict(block_size=c.block_size, num_kv_heads=heads, head_size=head, dtype=dtype)
        if old:
            common["use_mla"] = mla
        out: Dict[int, Any] = {}
        for i, kind in enumerate(c.layers):
            if kind == "full":
                if mla and not old:
                    kw = dict(cache_dtype_str=c.cache_dtype)
                    if "state_content_bytes" in _fields(I.MLAAttentionSpec):
                        # MLAAttention.get_kv_cache_spec (layers/attention/mla_attention.py @ v0.28.0):
                        # the 656-byte fp8_ds_mla row moved from the spec class into the layer
                        kw["state_content_bytes"] = 656 if c.cache_dtype == "fp8_ds_mla" else None
                    if "max_tp_shards" in _fields(I.MLAAttentionSpec):
                        kw["max_tp_shards"] = 1
                    out[i] = I.MLAAttentionSpec(**common, **kw)
                else:
                    out[i] = I.FullAttentionSpec(**common)
            elif kind == "sliding":
                out[i] = I.SlidingWindowSpec(**common, sliding_window=c.window)
            elif kind == "chunked":
                out[i] = I.ChunkedLocalAttentionSpec(**common, attention_chunk_size=c.window)
            elif kind == "mamba":
                kw: Dict[str, Any] = dict(block_size=c.mamba_block_size or c.max_model_len,
                                          shapes=self.mamba_shapes(c),
                                          dtypes=(DTYPES[c.mamba_dtype_bytes],) * 2,
                                          page_size_padded=c.mamba_page_size_padded)
                if self.v >= (0, 11):
                    kw["num_speculative_blocks"] = c.num_speculative_blocks
                if "mamba_cache_mode" in _fields(I.MambaSpec):
                    kw["mamba_cache_mode"] = c.mamba_cache_mode
                out[i] = I.MambaSpec(**kw)
            else:
                raise ValueError(kind)
        draft: Dict[str, Any] = dict(block_size=c.block_size, head_size=c.draft_head_size, dtype=dtype,
                                     num_kv_heads=self.num_kv_heads(c, c.draft_kv_heads, mla=False))
        if old:
            draft["use_mla"] = False
        for j, kind in enumerate(c.draft_layers):
            i = len(c.layers) + j
            if kind == "full":
                out[i] = I.FullAttentionSpec(**draft)
            else:
                out[i] = I.SlidingWindowSpec(**draft, sliding_window=c.window)
        return out

    # -- the planner -------------------------------------------------------------------------------
    def plan(self, c: KVCase) -> KVResult:
        self.logger.messages = []
        specs = self.layer_specs(c)
        res = KVResult(page_size_bytes={i: s.page_size_bytes for i, s in specs.items()})
        cfg = self.vllm_config(c)
        workers = [{c.layer_name(i): specs[i] for i in c.stage_layers(r) if i in specs}
                   for r in range(len(c.pp_stages))]
        idx = {c.layer_name(i): i for i in specs}
        try:
            configs = self._configs(cfg, workers, list(c.available))
        except (ValueError, NotImplementedError, AssertionError) as exc:
            res.error = f"{type(exc).__name__}: {exc}"
            res.messages = list(self.logger.messages)
            # (v0.10/v0.11 estimate_max_model_len leaves its last probe in max_model_len)
            res.max_model_len = cfg.model_config.max_model_len if self.v >= (0, 14) else c.max_model_len
            self._checks(c, cfg, workers, res)
            return res
        groups = configs[0].kv_cache_groups
        res.num_blocks = configs[0].num_blocks
        glob = self._global_groups
        res.groups = [(tuple(idx[n] for n in g.layer_names), g.kv_cache_spec) for g in glob]
        if groups and hasattr(self.utils, "update_kv_cache_capacity"):
            sched = self.utils.generate_scheduler_kv_cache_config(configs)
            self.utils.update_kv_cache_capacity(cfg, sched)
        res.messages = list(self.logger.messages)
        res.max_model_len = cfg.model_config.max_model_len
        for _, msg in res.messages:
            m = _TOKENS.search(msg)
            if m and res.tokens is None:
                res.tokens = m.group(1)
            m = _CONC.search(msg)
            if m and res.concurrency is None:
                res.concurrency = m.group(2)
        self._checks(c, cfg, workers, res)
        return res

    def _configs(self, cfg: Any, workers: List[Dict[str, Any]], available: List[int]) -> List[Any]:
        P = self.planning
        self._global_groups = None
        if self.v >= (0, 33):
            glob = P.get_global_kv_cache_groups(cfg, workers)
            self._global_groups = glob
            return P.get_kv_cache_configs(cfg, workers, available, glob)
        if self.v >= (0, 11):
            # get_kv_cache_configs groups the merged specs itself; run it, and the grouping alone
            merged: Dict[str, Any] = {}
            for w in workers:
                merged.update(w)
            self._global_groups = P.get_kv_cache_groups(cfg, dict(merged))
            return P.get_kv_cache_configs(cfg, workers, available)
        # 0.10.x: get_kv_cache_config per worker, then unify_kv_cache_configs (which sorts each
        # worker's groups and asserts they match); "global" groups = the workers' groups joined
        out = P.unify_kv_cache_configs([P.get_kv_cache_config(cfg, w, a) for w, a in zip(workers, available)])
        self._global_groups = [types.SimpleNamespace(
            layer_names=[n for o in out for n in o.kv_cache_groups[k].layer_names],
            kv_cache_spec=out[0].kv_cache_groups[k].kv_cache_spec) for k in range(len(out[0].kv_cache_groups))]
        return out

    def _checks(self, c: KVCase, cfg: Any, workers: List[Dict[str, Any]], res: KVResult) -> None:
        """Needed bytes and estimated max len per worker, as the admission check computes them."""
        P = self.planning
        needed: List[int] = []
        est: List[int] = []
        cfg = self.vllm_config(c)  # v0.10/v0.11 estimate_max_model_len leaves max_model_len changed
        if res.max_model_len is not None:  # after auto-fit
            cfg.model_config.max_model_len = res.max_model_len
        try:
            if (0, 14) <= self.v < (0, 17):
                # one check on the global groups against the smallest worker (kv_cache_utils.py
                # @ v0.14.1-v0.16.0 get_kv_cache_configs)
                merged = {}
                for w in workers:
                    merged.update(w)
                glob = P.get_kv_cache_groups(cfg, merged)
                if glob:
                    needed.append(P._max_memory_usage_bytes_from_groups(cfg, glob))
                    est.append(P._estimate_max_model_len_from_groups(cfg, glob, min(c.available)))
            elif self.v < (0, 17) or not hasattr(P, "_project_kv_cache_groups_to_worker"):
                for w, a in zip(workers, c.available):
                    if not w:
                        continue
                    needed.append(P.max_memory_usage_bytes(cfg, w.values()))
                    est.append(P.estimate_max_model_len(cfg, w, a))
                    cfg = self.vllm_config(c)
            else:
                merged: Dict[str, Any] = {}
                for w in workers:
                    merged.update(w)
                if self.v >= (0, 33):
                    builder = self._mods["vllm.v1.core.kv_cache_config_builder"].get_kv_cache_config_builder(cfg)
                    glob = P.get_global_kv_cache_groups(cfg, workers)
                else:
                    glob = P.get_kv_cache_groups(cfg, merged)
                override = c.num_gpu_blocks_override
                for w, a in zip(workers, c.available):
                    groups = P._project_kv_cache_groups_to_worker(glob, w)
                    if not w:
                        continue
                    if self.v >= (0, 33):
                        per_block = P._pool_bytes_per_block_from_builder(builder, cfg, groups)
                        if override is not None:  # folded into the available memory
                            a = override * per_block
                        # the check runs on available - one block (the null block, v0.30+)
                        a -= per_block
                        needed.append(P._max_memory_usage_bytes_from_groups(builder, cfg, groups))
                        est.append(P._estimate_max_model_len_from_groups(builder, cfg, groups, a))
                    else:
                        if override is not None and hasattr(P, "_pool_bytes_per_block"):  # 0.20.2+
                            two = P._pool_bytes_per_block.__code__.co_argcount == 2  # (vllm_config, groups): 0.24-0.28
                            a = override * (P._pool_bytes_per_block(cfg, groups) if two
                                            else P._pool_bytes_per_block(groups))
                        if "check_memory = [" in self.src.read(UTILS):
                            # 0.29/0.30: the check runs on available - one block (the null block)
                            a -= P._pool_bytes_per_block(groups)
                        needed.append(P._max_memory_usage_bytes_from_groups(cfg, groups))
                        est.append(P._estimate_max_model_len_from_groups(cfg, groups, a))
        except (ValueError, NotImplementedError, AssertionError):
            return
        res.needed_bytes = needed
        res.estimated_max_len = est


def _fields(cls: Any) -> set:
    import dataclasses
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def kv_engine(version: str, _cache: Dict[str, VllmKV] = {}) -> VllmKV:  # noqa: B006 - per-process cache
    if version not in _cache:
        _cache[version] = VllmKV(version)
    return _cache[version]


# ---------------------------------------------------------------------------------------------
# hybrid attention + mamba block-size alignment (config time)
# ---------------------------------------------------------------------------------------------

HYBRID_CONFIG = "vllm/model_executor/models/config.py"  # HybridAttentionMambaModelConfig (<= 0.19)
PLATFORM = "vllm/platforms/interface.py"  # Platform._align_hybrid_block_size (0.20.2+)


def hybrid_members(version: str) -> Tuple[str, ...]:
    return kv_members(version) + ((PLATFORM,) if vtuple(version) >= (0, 20) else (HYBRID_CONFIG,))


@dataclass
class HybridAlignment:
    block_size: int
    mamba_page_size_padded: Optional[int]
    mamba_block_size: Optional[int]


class _FlashAttentionBackend:
    """The attention backend as ``_align_hybrid_block_size`` asks it: FlashAttention's kernel
    blocks (``[MultipleOf(16)]``, flash_attn.py @ v0.20.2 / v0.33.0) and no spec customisation."""

    def __init__(self, multiple_of: Any):
        self._sizes = [multiple_of(16)]

    def get_supported_kernel_block_sizes(self, *args: Any) -> List[Any]:
        return list(self._sizes)

    def customize_spec(self, spec: Any) -> Any:
        return spec


def _hybrid_fn(engine: "VllmKV") -> Any:
    if getattr(engine, "_hybrid", None) is not None:
        return engine._hybrid
    import contextlib
    import math
    I = engine.iface
    st = engine._mods
    if engine.v >= (0, 20):
        multiple_of = st["vllm.v1.attention.backend"].MultipleOf if "vllm.v1.attention.backend" in st else None
        if multiple_of is None:
            @dataclass(frozen=True)
            class MultipleOf:  # vllm/v1/attention/backend.py
                base: int
            multiple_of = MultipleOf
        registry = types.SimpleNamespace()  # resolve_model_cls set per case
        modules = {
            "vllm.config.vllm": loader.StubModule("vllm.config.vllm", {
                "set_current_vllm_config": lambda cfg: contextlib.nullcontext()}),
            "vllm.model_executor.models": loader.StubModule("vllm.model_executor.models", {"ModelRegistry": registry}),
            "vllm.utils.math_utils": st["vllm.utils.math_utils"],
            "vllm.utils.torch_utils": loader.StubModule("vllm.utils.torch_utils", {"STR_DTYPE_TO_TORCH_DTYPE": {
                "fp8": DTYPES[1], "fp8_e4m3": DTYPES[1], "fp8_e5m2": DTYPES[1], "bfloat16": DTYPES[2],
                "float": DTYPES[4], "float32": DTYPES[4]}}),
            "vllm.v1.attention.backend": loader.StubModule("vllm.v1.attention.backend", {"MultipleOf": multiple_of}),
            "vllm.v1.kv_cache_interface": I,
            "vllm.model_executor.layers.mamba.abstract": loader.StubModule(
                "vllm.model_executor.layers.mamba.abstract",
                # no mamba layer declares a prefill checkpoint alignment (input, not tested)
                {"get_mamba_prefill_checkpoint_alignment": lambda cfg: None}),
        }
        fns = loader.compile_defs(engine.src.read(PLATFORM), engine.origin(PLATFORM),
                                  ["Platform._align_hybrid_block_size"], {"logger": engine.logger},
                                  modules=modules)
        backend = _FlashAttentionBackend(multiple_of)
        host = type("CudaPlatform", (), {"_find_non_ssm_backends": classmethod(lambda cls, cfg: [backend]),
                                         # 0.30+: no sparse indexer in the generated hybrids (input)
                                         "_get_indexer_block_alignment": classmethod(lambda cls, cfg: None)})
        fn = fns["_align_hybrid_block_size"].__func__

        def run(cfg: Any) -> None:
            fn(host, cfg, backend)
        engine._hybrid = (run, registry)
    else:
        registry = types.SimpleNamespace()
        stand_ins = {"logger": engine.logger, "cdiv": engine.cdiv, "lcm": math.lcm,
                     "MambaModelConfig": types.SimpleNamespace(verify_and_update_config=lambda cfg: None),
                     "STR_DTYPE_TO_TORCH_DTYPE": {"fp8": DTYPES[1], "bfloat16": DTYPES[2], "float": DTYPES[4]},
                     "FullAttentionSpec": I.FullAttentionSpec, "MambaSpec": I.MambaSpec,
                     "MLAAttentionSpec": getattr(I, "MLAAttentionSpec", None), "ModelRegistry": registry,
                     "AttentionBackendEnum": types.SimpleNamespace(CUTLASS_MLA="CUTLASS_MLA"),
                     "_Backend": types.SimpleNamespace(CUTLASS_MLA="CUTLASS_MLA"),
                     "envs": types.SimpleNamespace(VLLM_USE_V1=True),  # V1 engine (default from 0.10)
                     # 0.12-0.17 ask the platform for Blackwell + head 256 (FlashInfer, 32): the
                     # cases are FlashAttention on a non-Blackwell device (input, as from 0.20)
                     "current_platform": types.SimpleNamespace(is_device_capability=lambda cap: False,
                                                               is_device_capability_family=lambda cap: False)}
        fns = loader.compile_defs(engine.src.read(HYBRID_CONFIG), engine.origin(HYBRID_CONFIG),
                                  ["HybridAttentionMambaModelConfig.verify_and_update_config"], stand_ins)
        fn = fns["verify_and_update_config"].__func__
        engine._hybrid = (lambda cfg: fn(None, cfg), registry)
    return engine._hybrid


def hybrid_alignment(engine: "VllmKV", c: KVCase) -> HybridAlignment:
    """Run the release's hybrid alignment on a FlashAttention, non-MLA hybrid case."""
    run, registry = _hybrid_fn(engine)
    shapes = engine.mamba_shapes(c)
    model_cls = types.SimpleNamespace(get_mamba_state_shape_from_config=lambda cfg: shapes,
                                      get_mamba_state_dtype_from_config=lambda cfg: (DTYPES[c.mamba_dtype_bytes],) * 2)
    registry.resolve_model_cls = lambda arch, model_config=None: (model_cls, arch)
    heads = engine.num_kv_heads(c)
    cache = types.SimpleNamespace(
        block_size=c.block_size, mamba_cache_mode=c.mamba_cache_mode, mamba_block_size=None,
        enable_prefix_caching=c.mamba_cache_mode == "align",  # 0.12-0.14 align on this flag
        user_specified_mamba_block_size=False, mamba_page_size_padded=None, calculate_kv_scales=False,
        cache_dtype=c.cache_dtype if c.cache_dtype != "auto" else "auto", kv_cache_dtype_skip_layers=None)
    model = types.SimpleNamespace(
        use_mla=False, dtype=DTYPES[c.dtype_bytes], architecture="Generated", model="generated",
        max_model_len=c.max_model_len,
        get_num_kv_heads=lambda pc: heads, get_head_size=lambda: c.head_size,
        get_mamba_chunk_size=lambda: 256)
    cfg = types.SimpleNamespace(cache_config=cache, model_config=model,
                                parallel_config=types.SimpleNamespace(tensor_parallel_size=c.tp),
                                attention_config=types.SimpleNamespace(backend=None))
    run(cfg)
    return HybridAlignment(cache.block_size, cache.mamba_page_size_padded, cache.mamba_block_size)
