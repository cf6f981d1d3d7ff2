"""vLLM flags and version-aware defaults.

``VllmFlags`` holds what the user passed (``None`` = vLLM's default); ``resolve_args`` turns it into
``VllmArgs`` for one engine version and GPU, the way ``EngineArgs`` / ``CacheConfig`` /
``SchedulerConfig`` do. ``version_traits`` is the table of behaviour changes read in the released
wheels (``vllm/<file> @ v<version>`` in each comment); boundaries between two read wheels are
placed at the later one unless noted.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ...errors import FlagError
from ...units import GiB

LATEST_VERSION = "0.33.0"
KNOWN_VERSIONS = ("0.6.6", "0.9.2", "0.10.2", "0.11.0", "0.13.0", "0.14.1", "0.16.0", "0.17.0", "0.19.0",
                  "0.20.2", "0.24.0", "0.26.0", "0.28.0", "0.30.0", "0.33.0")

KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp8_inc")


@dataclass(frozen=True)
class VersionTraits:
    version: str
    is_v0: bool  # V0 engine (< 0.8: VLLM_USE_V1 default 0; spec §11)
    requested_memory_ceil: bool  # request_memory(): math.ceil + device in the error (v0.14.1+, utils.py)
    default_gpu_memory_utilization: float  # 0.9 -> 0.92 at v0.20 (vllm/config/cache.py @ v0.20.2)
    cudagraph_estimate_profiled: bool  # profile_cudagraph_memory exists (v0.19.0 gpu_worker.py; spec: 0.18)
    cudagraph_estimate_applied: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default "1" (envs.py @ v0.20.2)
    total_consumed_formula: bool  # non_kv = total_consumed + transient headroom (mem_utils.py @ v0.27+)
    tokens_from_concurrency: bool  # tokens = int(concurrency * max_model_len) (kv_cache_utils.py @ v0.20.2)
    override_folds_into_available: bool  # num_gpu_blocks_override rewrites available (v0.20.2)
    error_text_generation: int  # 11 (<0.14), 14 (0.14-0.21, "models's"), 24 (>=0.22: "model's" + CPU hint)
    null_block_reserved: bool  # admission check on available - bytes_per_block (kv_cache_planning @ v0.30)
    merged_capacity_log: bool  # "GPU KV cache size: N tokens, Maximum concurrency ..." (v0.28.0)
    mamba_check: str  # "none" | "cap_graphs" (v0.19.0 warning) | "raise" (v0.20.2+ ValueError)
    hybrid_prefix_caching: bool  # hybrid models prefix-cache by default -> mamba_cache_mode align: v0.28.0
    # (0.26.0 ModelConfig.is_prefix_caching_supported is True for hybrid but EngineArgs keeps it
    # opt-in: ``... and not model_config.is_hybrid``, arg_utils.py @ v0.26.0)
    in_flight_batches: bool  # SlidingWindowSpec uses max_in_flight_tokens (vllm/config/vllm.py @ v0.26.0)
    group_size_max_heuristic: bool  # group_size = max when max < 1.5 min (kv_cache_utils.py @ v0.19.0)
    sampler_sorts_vocab: bool  # top-k/top-p by full torch sort (< v0.17.0 topk_topp_sampler.py)
    large_gpu_batch_tier: bool  # >= 160 GiB GPUs: API server max_num_batched_tokens 16384 (arg_utils @ v0.28)
    mla_hybrid_alignment: int  # kernel block alignment for MLA in hybrid mamba models (64; 128 @ v0.33)
    # --- read by tests/conformance/test_vllm_memory.py against the wheels (first read wheel named;
    # boundaries between two read wheels sit at the later one) ---
    kv_cache_memory_bytes_flag: bool = True  # CacheConfig.kv_cache_memory_bytes (cache.py @ v0.11.0; not 0.10.2)
    util_pydantic_bounds: bool = True  # Field(gt=0, le=1) (cache.py @ v0.19.0); before only "> 1.0" raises
    batch_defaults_v2: bool = True  # get_batch_defaults + max_num_seqs*max_model_len cap, chunked
    #   prefill honoured (arg_utils.py @ v0.19.0); 0.10-0.11 _set_default_args: chunked prefill forced on
    gb10_small_tier: bool = True  # GB10 (sm121) kept on the small batch tier (arg_utils.py @ v0.33.0)


def parse_version(version: str | None) -> Version:
    v = version or LATEST_VERSION
    try:
        return Version(v)
    except InvalidVersion:
        raise FlagError(f"invalid vLLM version {v!r}", field="--engine-version", fix="e.g. 0.19.0") from None


def version_traits(version: str | None) -> VersionTraits:
    v = parse_version(version)
    if v < Version("0.6"):
        raise FlagError(f"vLLM {v} is older than kvscope models (0.6.x)", field="--engine-version",
                        fix=f"use a version between 0.6 and {LATEST_VERSION}")

    def at_least(s: str) -> bool:
        return v >= Version(s)

    gen = 24 if at_least("0.22") else 14 if at_least("0.14") else 11
    return VersionTraits(
        version=str(v),
        is_v0=not at_least("0.8"),
        requested_memory_ceil=at_least("0.14"),
        default_gpu_memory_utilization=0.92 if at_least("0.20") else 0.9,
        cudagraph_estimate_profiled=at_least("0.18"),
        cudagraph_estimate_applied=at_least("0.20"),
        total_consumed_formula=at_least("0.27"),
        tokens_from_concurrency=at_least("0.20.2"),
        override_folds_into_available=at_least("0.20.2"),
        error_text_generation=gen,
        null_block_reserved=at_least("0.30"),
        merged_capacity_log=at_least("0.28"),
        mamba_check="raise" if at_least("0.20.2") else "cap_graphs" if at_least("0.19") else "none",
        hybrid_prefix_caching=at_least("0.28"),
        in_flight_batches=at_least("0.26"),
        group_size_max_heuristic=at_least("0.19"),
        sampler_sorts_vocab=not at_least("0.17"),
        large_gpu_batch_tier=at_least("0.28"),
        mla_hybrid_alignment=128 if at_least("0.33") else 64,
        kv_cache_memory_bytes_flag=at_least("0.11"),
        util_pydantic_bounds=at_least("0.19"),
        batch_defaults_v2=at_least("0.19"),
        gb10_small_tier=at_least("0.33"),
    )


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
                 gpu_sm: str | None = None) -> VllmArgs:
    """Apply vLLM's defaults and validations (the ones that raise before any memory is touched)."""
    tp, pp, dp = flags.tensor_parallel_size, flags.pipeline_parallel_size, flags.data_parallel_size
    for name, val in (("--tensor-parallel-size", tp), ("--pipeline-parallel-size", pp),
                      ("--data-parallel-size", dp)):
        if val < 1:
            raise FlagError(f"{name} must be >= 1, got {val}", field=name, fix="pass a positive integer")
    if num_attention_heads % tp:
        # ModelConfig.verify_with_parallel_config (vllm/config/model.py @ v0.19.0)
        raise FlagError(f"Total number of attention heads ({num_attention_heads}) must be divisible by "
                        f"tensor parallel size ({tp}).", field="--tensor-parallel-size",
                        fix="pick a TP size that divides the attention heads")
    util = traits.default_gpu_memory_utilization if flags.gpu_memory_utilization is None \
        else flags.gpu_memory_utilization
    validate_gpu_memory_utilization(util, traits)
    if flags.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise FlagError(f"unknown --kv-cache-dtype {flags.kv_cache_dtype!r}", field="--kv-cache-dtype",
                        fix=f"use one of {', '.join(KV_CACHE_DTYPES)}")
    if flags.kv_cache_dtype == "fp8_ds_mla" and not is_mla:
        raise FlagError("fp8_ds_mla is an MLA-only KV cache format", field="--kv-cache-dtype",
                        fix="use fp8 for non-MLA models")
    mml = flags.max_model_len
    auto = mml == -1
    if auto and not traits.requested_memory_ceil:
        raise FlagError("--max-model-len -1/auto needs vLLM >= 0.14", field="--max-model-len",
                        fix="pass a number")
    if mml is None or auto:
        mml = model_max_len
    elif mml <= 0:
        raise FlagError(f"--max-model-len must be positive or -1/auto, got {mml}", field="--max-model-len",
                        fix="e.g. 8192")
    elif mml > model_max_len and not flags.allow_long_max_model_len:
        # _get_and_verify_max_len (vllm/config/model.py @ v0.19.0 / v0.33.0)
        raise FlagError(
            f"User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model_max_len} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
            field="--max-model-len", fix=f"use --max-model-len <= {model_max_len}")
    mnbt_default, seqs_default = batch_defaults(gpu_memory_bytes, gpu_name, traits, flags.api_server, gpu_sm)
    seqs = flags.max_num_seqs if flags.max_num_seqs is not None else seqs_default
    if flags.max_num_batched_tokens is not None:
        mnbt = flags.max_num_batched_tokens
    elif not traits.batch_defaults_v2:
        # _set_default_args (arg_utils.py @ v0.11.0): V1 forces chunked prefill on for generate
        # models, so the default applies as is (no max_model_len floor, no max_num_seqs cap).
        mnbt = mnbt_default
    else:
        # _set_default_max_num_seqs_and_batched_tokens_args (arg_utils.py @ v0.19.0+): without
        # chunked prefill at least max_model_len; then capped at max_num_seqs * max_model_len.
        mnbt = mnbt_default
        if flags.enable_chunked_prefill is False:
            mnbt = max(mml, mnbt)
        mnbt = min(seqs * mml, mnbt)
    if flags.max_num_seqs is None:
        seqs = min(seqs, mnbt)
    for name, val in (("--max-num-seqs", seqs), ("--max-num-batched-tokens", mnbt)):
        if val < 1:
            raise FlagError(f"{name} must be >= 1, got {val}", field=name, fix="pass a positive integer")
    if flags.kv_cache_memory_bytes is not None and not traits.kv_cache_memory_bytes_flag:
        raise FlagError(f"--kv-cache-memory-bytes does not exist in vLLM {traits.version} "
                        "(CacheConfig.kv_cache_memory_bytes: v0.11.0+)", field="--kv-cache-memory-bytes",
                        fix="use --gpu-memory-utilization, or vLLM >= 0.11")
    if flags.block_size is not None:
        if flags.block_size < 1:
            raise FlagError("--block-size must be positive", field="--block-size", fix="e.g. 16")
        block, source = flags.block_size, "flag"
    elif is_mla:
        # MLA backends need 64-token kernel blocks (FlashMLA; platforms/cuda.py) [estimated per backend]
        block, source = 64, "MLA backend default (64)"
    else:
        block, source = 16, "CacheConfig.DEFAULT_BLOCK_SIZE"
    prefix = flags.enable_prefix_caching
    if prefix is None:
        prefix = (not is_hybrid_mamba) or traits.hybrid_prefix_caching
    return VllmArgs(
        traits=traits, tp=tp, pp=pp, dp=dp, ep=flags.enable_expert_parallel,
        gpu_memory_utilization=util, max_model_len=mml, max_model_len_auto=auto,
        max_num_seqs=seqs, max_num_batched_tokens=mnbt, kv_cache_dtype=flags.kv_cache_dtype,
        block_size=block, block_size_source=source, enforce_eager=flags.enforce_eager,
        kv_cache_memory_bytes=flags.kv_cache_memory_bytes, num_gpu_blocks_override=flags.num_gpu_blocks_override,
        num_speculative_tokens=flags.num_speculative_tokens, speculative_method=flags.speculative_method,
        enable_prefix_caching=prefix,
    )


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
