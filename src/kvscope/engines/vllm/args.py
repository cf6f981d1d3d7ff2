"""vLLM flags -> resolved args: ``EngineArgs`` / ``CacheConfig`` / ``SchedulerConfig`` defaults per release.

``VllmFlags`` holds what the user passed (``None`` = vLLM's default; ``flags_from_options`` builds it
from keyword arguments named like the CLI options); ``resolve_args`` turns it into ``VllmArgs`` for
one release and GPU: parallel sizes, ``gpu_memory_utilization``, ``max_model_len`` (max_len.py),
the scheduler limits, the block size and attention backend (backend.py). Version-dependent rules
read ``VersionTraits`` (release.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import FlagError
from ...units import GiB
from .backend import select_block_size
from .max_len import DerivedMaxModelLen, verify_max_model_len
from .release import VersionTraits

KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp8_inc")


@dataclass(frozen=True)
class VllmFlags:
    """What the user passed to ``vllm serve`` (vLLM's own flag names); ``None`` = vLLM's default."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None  # -1 = auto-fit (v0.14.1+)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    num_speculative_tokens: int = 0  # from --speculative-config
    speculative_method: str | None = None  # "mtp" | "eagle" | "eagle3" | "draft_model" | "ngram" ...
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    api_server: bool = True  # UsageContext.OPENAI_API_SERVER (vllm serve) vs LLM class
    performance_mode: str = "balanced"  # --performance-mode (v0.17+): "throughput" doubles the defaults
    attention_backend: str | None = None  # --attention-backend (AttentionBackendEnum name; modelled v0.18+)

    def __post_init__(self) -> None:
        """The checks that need neither the model nor the release (vLLM's argparse / config
        validators): parallel sizes, KV cache dtype, ``--max-model-len`` sign, ``--block-size``."""
        for name, val in (("--tensor-parallel-size", self.tensor_parallel_size),
                          ("--pipeline-parallel-size", self.pipeline_parallel_size),
                          ("--data-parallel-size", self.data_parallel_size)):
            if val < 1:
                raise FlagError(f"{name} must be >= 1, got {val}", field=name, fix="pass a positive integer")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise FlagError(f"unknown --kv-cache-dtype {self.kv_cache_dtype!r}", field="--kv-cache-dtype",
                            fix=f"use one of {', '.join(KV_CACHE_DTYPES)}")
        mml = self.max_model_len
        if mml is not None and mml != -1 and mml <= 0:
            raise FlagError(f"--max-model-len must be positive or -1/auto, got {mml}", field="--max-model-len",
                            fix="e.g. 8192")
        if self.block_size is not None and self.block_size < 1:
            raise FlagError("--block-size must be positive", field="--block-size", fix="e.g. 16")


@dataclass(frozen=True)
class VllmArgs:
    """Flags after vLLM's defaults for this version and GPU."""

    traits: VersionTraits
    tp: int
    pp: int
    dp: int
    ep: bool
    gpu_memory_utilization: float
    max_model_len: int
    max_model_len_auto: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    block_size: int
    block_size_source: str
    enforce_eager: bool
    kv_cache_memory_bytes: int | None
    num_gpu_blocks_override: int | None
    num_speculative_tokens: int
    speculative_method: str | None
    enable_prefix_caching: bool
    attention_backend: str | None = None  # vLLM's backend name (>= 0.19, CUDA; None = not modelled)


def validate_gpu_memory_utilization(value: float, traits: VersionTraits | None = None) -> None:
    """``CacheConfig.gpu_memory_utilization: Field(gt=0, le=1)`` (vllm/config/cache.py @ v0.19.0+;
    pydantic's message). Before (cache.py ``_verify_args`` @ v0.10.1.1 / v0.11.0) only ``> 1.0``
    raises, with its own text; 0 and negative values pass (the budget is then <= 0)."""
    if traits is not None and not traits.util_pydantic_bounds:
        if value > 1.0:
            raise FlagError(f"GPU memory utilization must be less than 1.0. Got {value}.",
                            field="--gpu-memory-utilization", fix="pass a fraction in (0, 1], e.g. 0.9")
        return
    if not (0 < value <= 1):
        bound = "greater than 0" if value <= 0 else "less than or equal to 1"
        raise FlagError(f"gpu_memory_utilization={value}: Input should be {bound} "
                        "(vLLM CacheConfig validation error)", field="--gpu-memory-utilization",
                        fix="pass a fraction in (0, 1], e.g. 0.9")


def batch_defaults(gpu_memory_bytes: int, gpu_name: str, traits: VersionTraits, api_server: bool,
                   gpu_sm: str | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) when unset: ``EngineArgs.get_batch_defaults``
    (vllm/engine/arg_utils.py @ v0.19.0 … v0.33.0; ``_set_default_args[_v1]`` @ v0.10.1.1 / v0.11.0).
    NVML total >= 70 GiB and not an A100: API server 8192 / LLM class 16384 tokens, 1024 seqs;
    otherwise 2048 / 8192 tokens, 256 seqs. From v0.28.0, >= 160 GiB (B200/B300): 16384 tokens for
    both. From v0.33.0 a GB10 (compute capability 12.1) stays on the small tier."""
    if traits.large_gpu_batch_tier and gpu_memory_bytes >= 160 * GiB:
        return 16384, 1024
    gb10 = traits.gb10_small_tier and gpu_sm == "sm121"
    if gpu_memory_bytes >= 70 * GiB and "a100" not in gpu_name.lower() and not gb10:
        return (8192 if api_server else 16384), 1024
    return (2048 if api_server else 8192), 256


def resolve_args(flags: VllmFlags, *, traits: VersionTraits, model_max_len: int, gpu_memory_bytes: int,
                 gpu_name: str, is_mla: bool, is_hybrid_mamba: bool, num_attention_heads: int,
                 gpu_sm: str | None = None, derived_max_len: DerivedMaxModelLen | None = None,
                 is_sparse_mla: bool = False, head_size: int | None = None,
                 qk_nope_head_dim: int | None = None, has_sink: bool = False,
                 gpu_vendor: str = "nvidia", is_deepseek_v4: bool = False, is_multimodal: bool = False,
                 has_sliding_window: bool = False) -> VllmArgs:
    """Apply vLLM's defaults and validations (the ones that raise before any memory is touched).

    Block size: :func:`backend.select_block_size` (heads per rank = ``num_attention_heads // tp``).
    ``derived_max_len`` (``max_len.derive_max_model_len`` of the HF config) replaces
    ``model_max_len`` when given; without it ``model_max_len`` is taken as
    ``max_position_embeddings`` with no RoPE factor."""
    tp, pp, dp = flags.tensor_parallel_size, flags.pipeline_parallel_size, flags.data_parallel_size
    if num_attention_heads % tp:
        # ModelConfig.verify_with_parallel_config (vllm/config/model.py @ v0.19.0)
        raise FlagError(f"Total number of attention heads ({num_attention_heads}) must be divisible by "
                        f"tensor parallel size ({tp}).", field="--tensor-parallel-size",
                        fix="pick a TP size that divides the attention heads")
    util = traits.default_gpu_memory_utilization if flags.gpu_memory_utilization is None \
        else flags.gpu_memory_utilization
    validate_gpu_memory_utilization(util, traits)
    if flags.kv_cache_dtype == "fp8_ds_mla" and not is_mla:
        raise FlagError("fp8_ds_mla is an MLA-only KV cache format", field="--kv-cache-dtype",
                        fix="use fp8 for non-MLA models")
    derived = derived_max_len or DerivedMaxModelLen(model_max_len, "max_position_embeddings", model_max_len,
                                                    None, True)
    mml, auto = settle_max_model_len(flags, derived, traits)
    if traits.is_v0:
        seqs, mnbt = v0_scheduler_limits(flags, traits, mml, V0Model(is_multimodal, has_sliding_window,
                                                                     is_hybrid_mamba, gpu_vendor))
    else:
        seqs, mnbt = scheduler_limits(flags, traits, mml, gpu_memory_bytes, gpu_name, gpu_sm)
    if flags.kv_cache_memory_bytes is not None and not traits.kv_cache_memory_bytes_flag:
        raise FlagError(f"--kv-cache-memory-bytes does not exist in vLLM {traits.version} "
                        "(CacheConfig.kv_cache_memory_bytes: v0.11.0+)", field="--kv-cache-memory-bytes",
                        fix="use --gpu-memory-utilization, or vLLM >= 0.11")
    block = select_block_size(
        traits, user_block_size=flags.block_size, attention_backend=flags.attention_backend,
        kv_cache_dtype=flags.kv_cache_dtype, gpu_sm=gpu_sm, gpu_vendor=gpu_vendor, is_mla=is_mla,
        is_sparse_mla=is_sparse_mla, is_deepseek_v4=is_deepseek_v4, head_size=head_size,
        num_heads=max(num_attention_heads // tp, 1), qk_nope_head_dim=qk_nope_head_dim, has_sink=has_sink,
        is_hybrid=is_hybrid_mamba)
    prefix = flags.enable_prefix_caching
    if prefix is None:
        prefix = (not is_hybrid_mamba) or traits.hybrid_prefix_caching
    return VllmArgs(
        traits=traits, tp=tp, pp=pp, dp=dp, ep=flags.enable_expert_parallel,
        gpu_memory_utilization=util, max_model_len=mml, max_model_len_auto=auto,
        max_num_seqs=seqs, max_num_batched_tokens=mnbt, kv_cache_dtype=block.kv_cache_dtype,
        block_size=block.block_size, block_size_source=block.source, attention_backend=block.attention_backend,
        enforce_eager=flags.enforce_eager, kv_cache_memory_bytes=flags.kv_cache_memory_bytes,
        num_gpu_blocks_override=flags.num_gpu_blocks_override,
        num_speculative_tokens=flags.num_speculative_tokens, speculative_method=flags.speculative_method,
        enable_prefix_caching=prefix,
    )


def settle_max_model_len(flags: VllmFlags, derived: DerivedMaxModelLen, traits: VersionTraits) -> tuple[int, bool]:
    """(max_model_len, auto-fit): ``-1`` needs v0.14+ (auto-fit runs in the KV planner);
    ``_get_and_verify_max_len`` (vllm/config/model.py @ v0.11.0 … v0.33.0, max_len.py) settles it."""
    auto = flags.max_model_len == -1
    if auto and not traits.requested_memory_ceil:
        raise FlagError("--max-model-len -1/auto needs vLLM >= 0.14", field="--max-model-len",
                        fix="pass a number")
    return verify_max_model_len(flags.max_model_len, derived, traits, flags.allow_long_max_model_len), auto


def scheduler_limits(flags: VllmFlags, traits: VersionTraits, max_model_len: int, gpu_memory_bytes: int,
                     gpu_name: str, gpu_sm: str | None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) after vLLM's defaults: :func:`batch_defaults`,
    ``--performance-mode throughput`` doubling them, then
    ``_set_default_max_num_seqs_and_batched_tokens_args`` (arg_utils.py @ v0.19.0+: without chunked
    prefill at least max_model_len, capped at max_num_seqs x max_model_len; arg_utils.py @ v0.11.0
    ``_set_default_args``: V1 forces chunked prefill on, the default applies as is)."""
    mnbt_default, seqs_default = batch_defaults(gpu_memory_bytes, gpu_name, traits, flags.api_server, gpu_sm)
    if flags.performance_mode != "balanced" and not traits.performance_mode_flag:
        raise FlagError(f"--performance-mode does not exist in vLLM {traits.version} (v0.17+)",
                        field="--performance-mode", fix="drop it, or use vLLM >= 0.17")
    if flags.performance_mode == "throughput":
        # _set_default_max_num_seqs_and_batched_tokens_args (arg_utils.py @ v0.19.1 … v0.33.0):
        # unset max_num_batched_tokens / max_num_seqs defaults are doubled
        mnbt_default, seqs_default = 2 * mnbt_default, 2 * seqs_default
    seqs = flags.max_num_seqs if flags.max_num_seqs is not None else seqs_default
    if flags.max_num_batched_tokens is not None:
        mnbt = flags.max_num_batched_tokens
    elif not traits.batch_defaults_v2:
        mnbt = mnbt_default
    else:
        mnbt = mnbt_default
        if flags.enable_chunked_prefill is False:
            mnbt = max(max_model_len, mnbt)
        mnbt = min(seqs * max_model_len, mnbt)
    if flags.max_num_seqs is None:
        seqs = min(seqs, mnbt)
    for name, val in (("--max-num-seqs", seqs), ("--max-num-batched-tokens", mnbt)):
        if val < 1:
            raise FlagError(f"{name} must be >= 1, got {val}", field=name, fix="pass a positive integer")
    return seqs, mnbt


# V0 (< 0.8, VLLM_USE_V1=0): EngineArgs.create_engine_config (vllm/engine/arg_utils.py) and
# SchedulerConfig (vllm/config.py) @ v0.6.0 / v0.6.3 / v0.6.4 / v0.6.5 / v0.6.6.post1 / v0.7.3.
V0_LONG_CONTEXT_TOKENS = 32768  # use_long_context = max_model_len > 32768
V0_MAX_NUM_SEQS = 256  # EngineArgs.max_num_seqs (256 unless VLLM_USE_V1: 1024)


@dataclass(frozen=True)
class V0Model:
    """What V0's chunked-prefill default reads about the model and the device."""

    is_multimodal: bool = False
    has_sliding_window: bool = False  # model_config.get_sliding_window() is not None
    has_mamba_layers: bool = False  # contains_seqlen_agnostic_layers (0.6.0 only)
    gpu_vendor: str = "nvidia"


def v0_chunked_prefill(flags: VllmFlags, traits: VersionTraits, max_model_len: int, m: V0Model) -> bool:
    """V0's ``enable_chunked_prefill`` when unset: on only for ``max_model_len > 32768`` on a GPU, with no
    sliding window, no speculative decoding, no LoRA; multimodal models stay off (from v0.6.3); from v0.6.5
    not on ROCm; in v0.6.0 also not with prefix caching or mamba layers (engine/arg_utils.py ``create_engine_config`` @
    v0.6.0 / v0.6.4 / v0.6.5 / v0.7.3). At <= 32K it stays off: the profile run takes
    ``max(max_model_len, 2048)`` tokens."""
    if flags.enable_chunked_prefill is not None:
        return flags.enable_chunked_prefill
    if max_model_len <= V0_LONG_CONTEXT_TOKENS or m.has_sliding_window:
        return False
    if m.is_multimodal and not traits.v0_long_context_strict:
        return False
    if flags.speculative_method or flags.num_speculative_tokens:
        return False
    if traits.v0_long_context_skips_rocm and m.gpu_vendor == "amd":
        return False
    return not (traits.v0_long_context_strict and (flags.enable_prefix_caching or m.has_mamba_layers))


def v0_scheduler_limits(flags: VllmFlags, traits: VersionTraits, max_model_len: int,
                        m: V0Model) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of V0's ``SchedulerConfig`` (config.py @ v0.6.4 ``__init__``,
    @ v0.6.6.post1 / v0.7.3 ``__post_init__``): unset, chunked prefill takes 512 tokens (2048 from
    v0.6.5), otherwise ``max(max_model_len, 2048)``; a multimodal model at least 5120 (4096 @ v0.6.0);
    ``max_num_seqs`` 256. ``_verify_args`` raises when the budget is below ``max_model_len`` without
    chunked prefill, or below ``max_num_seqs``. Multi-step scheduling and pooling models not modelled."""
    chunked = v0_chunked_prefill(flags, traits, max_model_len, m)
    seqs = flags.max_num_seqs if flags.max_num_seqs is not None else V0_MAX_NUM_SEQS
    mnbt = flags.max_num_batched_tokens
    if mnbt is None:
        mnbt = (512 if traits.v0_chunked_budget_512 else 2048) if chunked else max(max_model_len, 2048)
        if m.is_multimodal:
            mnbt = max(mnbt, 5120 if traits.v0_multimodal_budget_5120 else 4096)
    for name, val in (("--max-num-seqs", seqs), ("--max-num-batched-tokens", mnbt)):
        if val < 1:
            raise FlagError(f"{name} must be >= 1, got {val}", field=name, fix="pass a positive integer")
    if mnbt < max_model_len and not chunked:
        raise FlagError(f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_model_len}). "
                        "This effectively limits the maximum sequence length to max_num_batched_tokens and "
                        "makes vLLM reject longer sequences.", field="--max-num-batched-tokens",
                        fix="increase max_num_batched_tokens or decrease max_model_len")
    if mnbt < seqs:
        raise FlagError(f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({seqs}).",
                        field="--max-num-batched-tokens", fix="raise it, or lower --max-num-seqs")
    return seqs, mnbt


def parse_human_bytes(text: str) -> int:
    """``--kv-cache-memory-bytes`` values: ``1k`` = 10**3, ``1K`` = 2**10, decimals only with
    decimal suffixes (vllm/utils/argparse_utils.py ``human_readable_int``)."""
    s = str(text).strip()
    dec = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    try:
        if s and s[-1] in dec:
            return int(float(s[:-1]) * dec[s[-1]])
        if s and s[-1] in binary:
            return int(s[:-1]) * binary[s[-1]]
        return int(s)
    except ValueError:
        raise FlagError(f"cannot read {text!r} as bytes", field="--kv-cache-memory-bytes",
                        fix="e.g. 40G (2**30 units), 40g (10**9) or an integer") from None


def parse_max_model_len(text: str | int) -> int:
    """``--max-model-len`` values: tokens, ``32k`` (x1000), ``1m``, or ``-1`` / ``auto`` (auto-fit)."""
    s = str(text).strip().lower()
    if s in ("auto", "-1"):
        return -1
    mult = 1
    if s and s[-1] in "km":
        mult = 1000 if s[-1] == "k" else 1000 ** 2
        s = s[:-1]
    try:
        return int(float(s) * mult)
    except ValueError:
        raise FlagError(f"invalid max_model_len {text!r} (an integer, 32k, -1 or auto)", field="--max-model-len",
                        fix="e.g. 32768, 32k or auto") from None


def speculative_from_config(config: str | Mapping[str, Any] | None) -> tuple[str | None, int]:
    """(method, num_speculative_tokens) of ``--speculative-config`` (a JSON object, or a dict):
    ``method``, else ``draft_model`` when a ``model`` is named."""
    if not config:
        return None, 0
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise FlagError(f"--speculative-config is not JSON ({exc.msg})", field="--speculative-config",
                            fix='e.g. \'{"method": "mtp", "num_speculative_tokens": 1}\'') from None
    if not isinstance(config, Mapping):
        raise FlagError("--speculative-config must be a JSON object", field="--speculative-config", fix="{...}")
    method = config.get("method") or ("draft_model" if config.get("model") else None)
    n = int(config.get("num_speculative_tokens") or 0)
    return (str(method).lower() if method else None), n


# ``kvscope plan --engine vllm`` options (commands/vllm_flags.py) and their defaults: the keyword
# arguments of ``flags_from_options`` / ``kvscope.plan(..., engine="vllm", **flags)``.
OPTIONS: dict[str, Any] = {
    "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1, "enable_expert_parallel": False,
    "gpu_memory_utilization": None, "max_model_len": None, "max_num_seqs": None, "max_num_batched_tokens": None,
    "kv_cache_dtype": "auto", "block_size": None, "attention_backend": None, "enforce_eager": False,
    "kv_cache_memory_bytes": None, "num_gpu_blocks_override": None, "speculative_config": None,
    "enable_prefix_caching": None, "allow_long_max_model_len": False,
}
# VllmFlags fields with no CLI option, accepted by the library call as they are
_LIBRARY_ONLY = ("enable_chunked_prefill", "api_server", "performance_mode")


def flags_from_options(**options: Any) -> VllmFlags:
    """``VllmFlags`` from ``vllm serve`` option names in Python spelling (``OPTIONS``, same defaults
    as the CLI): ``max_model_len`` may be ``"32k"`` / ``"auto"``, ``kv_cache_memory_bytes`` ``"40G"``
    (:func:`parse_human_bytes`), ``speculative_config`` a JSON string or a dict."""
    unknown = sorted(set(options) - set(OPTIONS) - set(_LIBRARY_ONLY))
    if unknown:
        raise FlagError(f"not a vLLM flag kvscope models: {', '.join(unknown)}", field=unknown[0],
                        fix=f"use vllm serve names: {', '.join(sorted(OPTIONS))}")
    o = {**OPTIONS, **options}
    method, nspec = speculative_from_config(o["speculative_config"])
    mml, kvmb = o["max_model_len"], o["kv_cache_memory_bytes"]
    return VllmFlags(
        tensor_parallel_size=1 if o["tensor_parallel_size"] is None else o["tensor_parallel_size"],
        pipeline_parallel_size=1 if o["pipeline_parallel_size"] is None else o["pipeline_parallel_size"],
        data_parallel_size=1 if o["data_parallel_size"] is None else o["data_parallel_size"],
        enable_expert_parallel=bool(o["enable_expert_parallel"]),
        gpu_memory_utilization=o["gpu_memory_utilization"],
        max_model_len=parse_max_model_len(mml) if isinstance(mml, str) else mml,
        max_num_seqs=o["max_num_seqs"],
        max_num_batched_tokens=o["max_num_batched_tokens"],
        kv_cache_dtype=o["kv_cache_dtype"] or "auto",
        block_size=o["block_size"], attention_backend=o["attention_backend"],
        enforce_eager=bool(o["enforce_eager"]),
        kv_cache_memory_bytes=parse_human_bytes(kvmb) if kvmb is not None else None,
        num_gpu_blocks_override=o["num_gpu_blocks_override"],
        num_speculative_tokens=nspec, speculative_method=method,
        enable_prefix_caching=o["enable_prefix_caching"],
        allow_long_max_model_len=bool(o["allow_long_max_model_len"]),
        **{k: options[k] for k in _LIBRARY_ONLY if k in options},
    )
