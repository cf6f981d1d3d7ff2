"""vLLM flags and version-aware defaults.

``VllmFlags`` holds what the user passed (``None`` = vLLM's default); ``resolve_args`` turns it into
``VllmArgs`` for one engine version and GPU, the way ``EngineArgs`` / ``CacheConfig`` /
``SchedulerConfig`` do. ``version_traits`` is the table of behaviour changes read in the released
wheels (``vllm/<file> @ v<version>`` in each comment); boundaries between two read wheels are
placed at the later one unless noted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from packaging.version import InvalidVersion, Version

from ...errors import ConfigError, FlagError
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
    cudagraph_estimate_profiled: bool  # profile_cudagraph_memory exists (gpu_worker.py @ v0.18.0; absent in v0.17.0)
    cudagraph_estimate_applied: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default "1" (envs.py @ v0.20.2)
    total_consumed_formula: bool  # non_kv = total_consumed + transient headroom (mem_utils.py @ v0.27+)
    tokens_from_concurrency: bool  # tokens = int(concurrency * max_model_len) (kv_cache_utils.py @ v0.20.2)
    override_folds_into_available: bool  # num_gpu_blocks_override rewrites available (v0.20.2)
    error_text_generation: int  # 11 (<0.13), 13 (0.13: ":.2f" GiB + docs link, kv_cache_utils.py @ v0.13.0),
    #   14 (0.14-0.21, format_gib, "models's"), 24 (>=0.22: "model's" + CPU hint)
    null_block_reserved: bool  # admission check on available - bytes_per_block (kv_cache_utils.py @ v0.29.0)
    merged_capacity_log: bool  # "GPU KV cache size: N tokens, Maximum concurrency ..." (v0.28.0)
    mamba_check: str  # "none" | "cap_graphs" (v0.19.0 warning) | "raise" (v0.20.2+ ValueError)
    hybrid_prefix_caching: bool  # hybrid models prefix-cache by default -> mamba_cache_mode align: v0.28.0
    # (0.26.0 ModelConfig.is_prefix_caching_supported is True for hybrid but EngineArgs keeps it
    # opt-in: ``... and not model_config.is_hybrid``, arg_utils.py @ v0.26.0)
    in_flight_batches: bool  # SlidingWindowSpec uses max_in_flight_tokens (vllm/config/vllm.py @ v0.26.0)
    group_size_max_heuristic: bool  # group_size = max when max < ratio x min (kv_cache_utils.py @ v0.12.0;
    #   absent in v0.11.0)
    sampler_sorts_vocab: bool  # top-k/top-p by full torch sort (< v0.17.0 topk_topp_sampler.py)
    large_gpu_batch_tier: bool  # >= 160 GiB GPUs: API server max_num_batched_tokens 16384 (arg_utils @ v0.28)
    # --- read by tests/conformance/test_vllm_memory.py against the wheels (first read wheel named;
    # boundaries between two read wheels sit at the later one) ---
    kv_cache_memory_bytes_flag: bool = True  # CacheConfig.kv_cache_memory_bytes (cache.py @ v0.11.0; not 0.10.2)
    util_pydantic_bounds: bool = True  # Field(gt=0, le=1) (cache.py @ v0.12.0); 0.10-0.11 only "> 1.0" raises
    batch_defaults_v2: bool = True  # get_batch_defaults + max_num_seqs*max_model_len cap, chunked prefill
    #   honoured (arg_utils.py @ v0.12.0 … v0.33.0); 0.10-0.11 _set_default_args: chunked prefill forced on
    gb10_small_tier: bool = True  # GB10 (sm121) kept on the small batch tier (arg_utils.py @ v0.33.0)
    max_len_generation: int = 33  # _get_and_verify_max_len: 10 (rope_scaling; 0.10-0.11), 19 (rope_parameters,
    #   yarn = original_max_position_embeddings x factor, longrope default; 0.12-0.28; config/model.py
    #   @ v0.12.0 / v0.14.1 / v0.17.0 / v0.18.0), 33 (yarn unscaled; read in v0.30.0, absent in v0.28.0)
    max_len_error_warning: bool = True  # error text ends with the VLLM_ALLOW_LONG_MAX_MODEL_LEN warning (v0.10.2+)
    transformers_v5: bool = True  # Requires-Dist transformers>=5.5.3 (wheel METADATA @ v0.24.0; 4.56+ in v0.23.0)
    classic_block_rule: bool = False  # block size set in CudaPlatformBase.check_and_update_config (0.10-0.17);
    #   Platform.update_block_size_for_backend from v0.18.0 (platforms/interface.py @ v0.18.0)
    #   from 0.19 the attention-backend registry (Platform.update_block_size_for_backend) decides
    sparse_mla_block_64: bool = True  # index_topk (DSA) models forced to 64 (platforms/cuda.py @ v0.11.0)
    mla_block_rule_16: bool = True  # check_and_update_config's MLA rule keeps multiples ("% 64" / "% 128"
    #   tests) from v0.12.0; the 0.10-0.11 rule before (platforms/cuda.py)
    mla_block_generation: int = 15  # 12: CUTLASS on sm100 only (v0.12.0); 13: CUTLASS on the Blackwell family
    #   (v0.13.0, v0.14.1); 15: FlashInfer-MLA first when qk_nope_head_dim == 128 (v0.15.1 … v0.17.0)
    external_weight_budget: bool = True  # request_memory(external_weight_memory) (v1/worker/utils.py @ v0.33.0)
    performance_mode_flag: bool = True  # EngineArgs.performance_mode (arg_utils.py @ v0.17.0; absent in v0.16.0)
    max_len_null_factor_ok: bool = True  # "factor": null -> 1.0 (config/model.py @ v0.18.0 l.2032); 0.14-0.17
    #   multiply by None (TypeError), as 0.10-0.11 do
    group_size_max_ratio: float = 1.5  # 1.25 in v0.12.0 … v0.17.0, 1.5 from v0.18.0 (kv_cache_utils.py)


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

    gen = 24 if at_least("0.22") else 14 if at_least("0.14") else 13 if at_least("0.13") else 11
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
        null_block_reserved=at_least("0.29"),
        merged_capacity_log=at_least("0.28"),
        mamba_check="raise" if at_least("0.20.2") else "cap_graphs" if at_least("0.19") else "none",
        hybrid_prefix_caching=at_least("0.28"),
        in_flight_batches=at_least("0.26"),
        group_size_max_heuristic=at_least("0.12"),
        group_size_max_ratio=1.5 if at_least("0.18") else 1.25,
        sampler_sorts_vocab=not at_least("0.17"),
        large_gpu_batch_tier=at_least("0.28"),
        kv_cache_memory_bytes_flag=at_least("0.11"),
        util_pydantic_bounds=at_least("0.12"),
        batch_defaults_v2=at_least("0.12"),
        performance_mode_flag=at_least("0.17"),
        max_len_null_factor_ok=at_least("0.18"),
        gb10_small_tier=at_least("0.33"),
        max_len_generation=33 if at_least("0.30") else 19 if at_least("0.12") else 10,
        max_len_error_warning=at_least("0.10.2"),
        transformers_v5=at_least("0.24"),
        classic_block_rule=not at_least("0.18"),
        sparse_mla_block_64=at_least("0.11"),
        mla_block_rule_16=at_least("0.12"),
        mla_block_generation=15 if at_least("0.15") else 13 if at_least("0.13") else 12,
        external_weight_budget=at_least("0.33"),
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
    performance_mode: str = "balanced"  # --performance-mode (v0.17+): "throughput" doubles the defaults
    attention_backend: str | None = None  # --attention-backend (AttentionBackendEnum name; modelled v0.18+)


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


def block_size_classic(user: int | None, *, is_mla: bool, gpu_sm: str, is_sparse_mla: bool,
                       traits: VersionTraits, qk_nope_head_dim: int | None = 128) -> tuple[int, str]:
    """``CudaPlatformBase.check_and_update_config`` (vllm/platforms/cuda.py @ v0.10.1.1 / v0.11.0,
    no ``VLLM_ATTENTION_BACKEND``): unset -> 16; MLA on compute capability 10.0 -> CUTLASS_MLA,
    forced 128; MLA on 9.x -> FlashMLA, forced 64; from v0.11.0 a sparse (``index_topk``) MLA model
    is forced to 64 last. The forced sizes override ``--block-size``. v0.16.0 / v0.17.0 (no
    ``--attention-backend``): see the ``mla_block_rule_16`` branch (multiples are kept)."""
    block, source = (user, "flag") if user is not None else (16, "CacheConfig default (platforms/cuda.py)")
    if is_mla and traits.mla_block_rule_16:
        # v0.15.1 … v0.17.0: Blackwell family (10.x) dense MLA -> FlashInfer-MLA when qk_nope_head_dim
        # is 128 (block kept if 32 or a multiple of 64, else 64), else CUTLASS-MLA (multiple of 128,
        # else 128); otherwise FlashMLA where dense FlashMLA runs (Hopper: multiple of 64, else 64);
        # sparse (index_topk) forced to 64 (FlashMLA sparse) last. v0.13.0 / v0.14.1: no FlashInfer
        # branch (CUTLASS on the Blackwell family, sparse excluded); v0.12.0: CUTLASS on
        # ``is_device_capability(100)`` only, sparse included (platforms/cuda.py).
        cap = _cap(gpu_sm)
        gen = traits.mla_block_generation
        blackwell = cap is not None and (cap == (10, 0) if gen == 12 else cap[0] == 10)
        if blackwell and not is_sparse_mla and qk_nope_head_dim == 128 and gen >= 15:
            if block != 32 and block % 64:
                block, source = 64, "forced 64 for FlashInfer-MLA (Blackwell)"
        elif blackwell and (not is_sparse_mla or gen == 12):
            if block % 128:
                block, source = 128, "forced 128 for CUTLASS_MLA (Blackwell)"
        elif cap is not None and cap[0] == 9 and block % 64:
            block, source = 64, "forced 64 for FlashMLA (Hopper)"
        if is_sparse_mla and block != 64:
            block, source = 64, "forced 64 for FlashMLASparse"
        return block, source
    if is_mla:
        if gpu_sm == "sm100":
            block, source = 128, "forced 128 for CUTLASS_MLA (Blackwell sm100)"
        elif gpu_sm.startswith("sm9") and block != 64:
            block, source = 64, "forced 64 for FlashMLA (Hopper)"
        if is_sparse_mla and traits.sparse_mla_block_64:
            block, source = 64, "forced 64 for FlashMLASparse"
    return block, source


# --- vLLM >= 0.18: the attention-backend registry picks the block size (update_block_size_for_backend @ v0.18.0) ---

_FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")


def _cap(gpu_sm: str) -> tuple[int, int] | None:
    """"sm90" -> (9, 0), "sm103" -> (10, 3), "sm120" -> (12, 0); None for non-CUDA names."""
    if not gpu_sm.startswith("sm") or not gpu_sm[2:].isdigit():
        return None
    n = int(gpu_sm[2:])
    return (n // 10, n % 10)


def _multiple(block: int | None, sizes: tuple[int, ...]) -> bool:
    """``AttentionBackend.supports_block_size`` (vllm/v1/attention/backend.py @ v0.19.1+): no
    ``--block-size`` passes; otherwise a multiple of one of the kernel block sizes."""
    return block is None or any(block % s == 0 for s in sizes)


def _flash_attn_valid(version: Version, cap: tuple[int, int], head_size: int, kv: str, has_sink: bool) -> bool:
    """``FlashAttentionBackend.validate_configuration`` (flash_attn.py + fa_utils.py @ v0.19.1 …
    v0.33.0, FA2/FA3/FA4 kernels installed): FA3 on SM9x, FA4 on SM10x (FA2 for heads > 128 except
    192 there), FA2 elsewhere; heads up to 256 (v0.20.0+: 512 where FA4 runs: SM9x/10x/11x); sinks
    need FA3 (v0.20.0+: FA3/FA4) and SM90+; fp8 KV: FA3 on SM9x (v0.19-v0.20 any fp8 name; v0.26
    fp8/fp8_e4m3), v0.27+ also FA4 on SM10x for heads <= 128 or 192 (not fp8_e5m2; read in 0.27.1)."""
    major = cap[0]
    # v26: fp8 KV only fp8/fp8_e4m3 (read in 0.22.1, 0.24.0 and 0.26.0; absent in 0.20.2)
    # v30: FA4's Blackwell head-256 kernel (read in 0.30.0, absent in 0.28.0)
    # v28: FA3 -> FA4 upgrade for heads > 256, fp8 KV on FA4 (read in 0.27.1 and 0.28.0; absent in 0.26.0)
    v20, v26, v28, v30, v33 = (version >= Version(x) for x in ("0.20", "0.22", "0.27", "0.30", "0.33"))
    fa4_device = major in (9, 10, 11)
    if cap < (8, 0) or head_size % 8:
        return False
    if head_size > 256 and not (v20 and fa4_device and head_size <= 512):
        return False

    def fa_version(head: int | None) -> int:
        if major == 9:
            return 4 if (v28 and head is not None and head > 256) else 3  # FA3 -> FA4 upgrade
        if major == 10:
            # head 192 keeps FA4 only with a 128 V head (v0.28+ passes head_size_v = head_size)
            if head is not None and head > 128 and not (head == 192 and not v28) and not (v30 and head == 256):
                return 2
            return 4
        return 2

    if has_sink:
        if cap < (9, 0) or fa_version(None) not in ((3, 4) if v20 else (3,)):
            return False
    if kv in ("auto", "float16", "bfloat16"):
        return True
    if not v26:
        return kv.startswith("fp8") and major == 9
    if not v28:
        return kv in ("fp8", "fp8_e4m3") and major == 9
    if kv not in ("fp8", "fp8_e4m3"):
        return False
    ver = fa_version(head_size)
    if v30 and major == 10 and head_size == 256:
        return False  # FA4's head-256 kernel does not take a quantized KV cache: FA2
    if major == 9:
        return ver == 3 or (v33 and ver == 4 and head_size == 512)
    return ver == 4 and major == 10


def _backend_candidates(version: Version, cap: tuple[int, int], *, is_mla: bool, is_sparse_mla: bool,
                        kv_cache_dtype: str, head_size: int, num_heads: int, qk_nope_head_dim: int | None,
                        has_sink: bool, block: int | None) -> list[tuple[str, tuple[int, ...], bool, bool]]:
    """(backend, kernel block sizes, valid, in the priority list) in ``_get_backend_priorities`` order
    (vllm/platforms/cuda.py @ v0.19.1 … v0.33.0) with each backend's ``validate_configuration``."""
    major = cap[0]
    kv = kv_cache_dtype
    quant = kv in _FP8 or kv == "fp8_ds_mla"
    # v26: read in 0.24.0 and 0.26.0 (absent in 0.20.2); v30: read in 0.30.0 (absent in 0.28.0)
    v26, v28, v33 = version >= Version("0.24"), version >= Version("0.28"), version >= Version("0.33")
    v30 = version >= Version("0.30")
    out: list[tuple[str, tuple[int, ...], bool]] = []

    def add(name: str, sizes: tuple[int, ...], ok: bool) -> None:
        out.append((name, sizes, ok and _multiple(block, sizes)))

    if not is_mla:
        # FlashInfer heads 512 and FlexAttention's kernel block 16: read in 0.22.1 (absent in 0.20.2)
        v22 = version >= Version("0.22")
        fa_ok = _flash_attn_valid(version, cap, head_size, kv, has_sink)
        fi_heads = (64, 128, 256, 512) if v22 else (64, 128, 256)
        fi_sink = not has_sink or major == 10 or (v28 and major == 12) or (v30 and cap == (9, 0))
        fi_ok = (8, 0) <= cap <= (12, 1) and head_size in fi_heads and kv in ("auto", "float16", "bfloat16") + _FP8 \
            and fi_sink
        tr_ok = head_size >= 32 and kv in ("auto", "float16", "bfloat16") + _FP8
        fx_ok = kv in ("auto", "float16", "bfloat16") and not has_sink
        # v0.33: FA4's SM90 fp8-KV head-512 kernel uses 64-token pages (flash_attn.py
        # _get_sm90_fa4_fp8_kv_block_size): kernel block [64], preferred max(16, 64)
        # v0.30+: FA4's Blackwell head-256 kernel (uses_fa4_hd256_kernel, FA4_HD256_PAGE_SIZE) pages
        # by 128 tokens unless the KV cache is quantized (_fa4_hd256_fallback_reason; sinks are not
        # passed there): kernel block [128], preferred 128
        fa_sizes = (64,) if (v33 and major == 9 and kv in ("fp8", "fp8_e4m3") and head_size == 512) else \
            (128,) if (v30 and major in (10, 11) and head_size == 256 and not quant) else (16,)
        fa = ("FLASH_ATTN", fa_sizes, fa_ok)
        fi = ("FLASHINFER", (16, 32, 64), fi_ok)
        order = [fi, fa] if major == 10 else [fa, fi]
        for name, sizes, ok in order + [("TRITON_ATTN", (16,), tr_ok),
                                        ("FLEX_ATTENTION", (16,) if v22 else (1,), fx_ok)]:
            add(name, sizes, ok)
        return [c + (True,) for c in out]
    plain_kv = kv in ("auto", "float16", "bfloat16")
    mla_kv = plain_kv or kv in ("fp8", "fp8_e4m3")
    dense = not is_sparse_mla
    # qk_nope 192 accepted from v0.19.0 (flashinfer_mla.py / flashinfer_mla_sparse.py; [64, 128] / 128 in v0.18.0)
    v19 = version >= Version("0.19")
    fi_mla = ("FLASHINFER_MLA", (32, 64), dense and major == 10 and mla_kv
              and qk_nope_head_dim in ((64, 128, 192) if v19 else (64, 128)))
    cutlass = ("CUTLASS_MLA", (128,), dense and major == 10 and mla_kv)
    fa_mla = ("FLASH_ATTN_MLA", (16,), dense and major == 9 and plain_kv)
    flashmla = ("FLASHMLA", (64,), dense and major == 9 and mla_kv)  # is_flashmla_dense_supported: Hopper
    triton = ("TRITON_MLA", (16,), dense and mla_kv)
    sp = is_sparse_mla and head_size == 576
    fi_sparse = ("FLASHINFER_MLA_SPARSE", (32, 64), sp and major == 10 and mla_kv
                 and qk_nope_head_dim in ((128, 192) if v19 else (128,)))
    fm_sparse = ("FLASHMLA_SPARSE", (64,), sp and major in (9, 10) and kv in ("auto", "bfloat16", "fp8_ds_mla", "fp8"))
    fa4_sparse = ("FLASH_ATTN_MLA_SPARSE_FA4", (64,), sp and major == 10 and kv in ("auto", "bfloat16")
                  and num_heads in (8, 16, 32, 64, 128) and qk_nope_head_dim in (128, 192))
    # backends outside this GPU's priority list that --attention-backend can still select
    out_of_list = [fa4_sparse] if v33 else []
    if major == 10:
        if quant and v19:  # v0.18.0 orders by head count only (cuda.py _get_backend_priorities)
            sparse = [fi_sparse, fm_sparse]
        elif num_heads <= 16:
            sparse = [fa4_sparse] if v33 else []
            sparse += [fi_sparse, fm_sparse]
        else:
            sparse = [fm_sparse, fi_sparse]
        # R1 dims (qk_nope 128, rope 64; v_head 128 assumed) + fp8 KV only: FLASHINFER_MLA before it
        # takes all of these, so it is reached only through --attention-backend
        tokenspeed = [("TOKENSPEED_MLA", (32, 64), dense and kv in ("fp8", "fp8_e4m3") and qk_nope_head_dim == 128
                       and head_size == 576)] if v26 else []
        order = [fi_mla] + tokenspeed + [cutlass, fa_mla, flashmla, triton] + sparse
    elif major == 12 and v26:
        order = [triton, ("FLASHINFER_MLA_SPARSE_SM120", (64,) if v33 else (64, 256),
                          sp and kv in ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla"))]
    else:
        order = [fa_mla, flashmla, fi_mla, triton]
        if v26:
            if version >= Version("0.26"):  # FLASH_ATTN_MLA_SPARSE: not in 0.24.0's list
                fa_sparse = ("FLASH_ATTN_MLA_SPARSE", (64,), sp and major == 9 and plain_kv)
                order += [fa_sparse]
            order += [fm_sparse]
            if v30:  # FLASHINFER_MLA_SPARSE_SM90: first for head 512, last otherwise
                fi90 = ("FLASHINFER_MLA_SPARSE_SM90", (64,), is_sparse_mla and head_size in (512, 576)
                        and major == 9 and kv in ("auto", "bfloat16", "fp8", "fp8_e4m3"))
                order = order[:4] + ([fi90] if head_size == 512 else []) + order[4:] + \
                    ([fi90] if head_size != 512 else [])
        else:
            order += [fm_sparse]
    for name, sizes, ok in order:
        add(name, sizes, ok)
    listed = {n for n, _, _ in out}
    for name, sizes, ok in out_of_list:
        if name not in listed:
            add(name, sizes, ok)
            out[-1] = out[-1] + (False,)  # not in the priority list: only --attention-backend reaches it
    return [c if len(c) == 4 else c + (True,) for c in out]


def _rocm_candidates(version: Version, gcn_arch: str, *, is_mla: bool, is_sparse_mla: bool, kv_cache_dtype: str,
                     head_size: int, has_sink: bool, block: int | None
                     ) -> list[tuple[str, tuple[int, ...], bool, bool]]:
    """``RocmPlatform`` ``_get_backend_priorities`` + each backend's ``validate_configuration``
    (vllm/platforms/rocm.py @ v0.19.1 … v0.33.0) with vLLM's env defaults (``VLLM_ROCM_USE_AITER``
    off, so no AITER MLA / AITER FA) and aiter installed (``is_aiter_found_and_supported``: MI300 /
    MI350, gfx942 / gfx950). Sparse MLA: ROCM_AITER_MLA_SPARSE only; MLA: TRITON_MLA; MHA:
    ROCM_ATTN (heads 32-256 listed, no sinks), ROCM_AITER_UNIFIED_ATTN (heads >= 32, sinks; prefers
    64), TRITON_ATTN."""
    kv = kv_cache_dtype
    v26 = version >= Version("0.22")  # AITER sparse MLA takes fp8: read in 0.22.1, 0.24.0 and 0.26.0
    if version < Version("0.19"):
        block = None  # v0.18.0 RocmPlatform.get_attn_backend_cls: attn_selector_config._replace(block_size=None)
    out: list[tuple[str, tuple[int, ...], bool]] = []

    def add(name: str, sizes: tuple[int, ...], ok: bool) -> None:
        out.append((name, sizes, ok and _multiple(block, sizes)))

    plain = kv in ("auto", "float16", "bfloat16")
    if is_sparse_mla:
        add("ROCM_AITER_MLA_SPARSE", (1,), is_mla and (plain or (v26 and kv in ("fp8", "fp8_e4m3"))))
        return [c + (True,) for c in out]
    if is_mla:
        add("TRITON_MLA", (16,), plain or kv in ("fp8", "fp8_e4m3"))
        return [c + (True,) for c in out]
    mha_kv = plain or kv in _FP8
    # sinks: RocmAttentionBackend.supports_sink is True in v0.18.0 (rocm_attn.py), False from v0.19.0
    add("ROCM_ATTN", (16,), mha_kv and (not has_sink or version < Version("0.19"))
        and head_size in (32, 64, 80, 96, 128, 160, 192, 224, 256))
    if any(a in gcn_arch for a in ("gfx942", "gfx950")):
        add("ROCM_AITER_UNIFIED_ATTN", (16,), mha_kv and head_size >= 32)
    add("TRITON_ATTN", (16,), mha_kv and head_size >= 32)
    if version < Version("0.19"):
        # v0.18.0 _get_backend_priorities (rocm.py): ROCM_ATTN only with use_prefill_decode_attention,
        # AITER unified only with VLLM_ROCM_USE_AITER*: by default TRITON_ATTN alone; the others are
        # reached through --attention-backend
        return [c + (c[0] == "TRITON_ATTN",) for c in out]
    return [c + (True,) for c in out]


def mla_cache_dtype(traits: VersionTraits, backend: str | None, kv_cache_dtype: str) -> str:
    """The MLA cache dtype after backend selection (``MLAAttention.__init__``,
    vllm/model_executor/layers/attention/mla_attention.py @ v0.19.1 / v0.20.2: FLASHMLA_SPARSE turns
    any fp8 KV into DeepSeek's ``fp8_ds_mla`` (656 B/token); v0.24.0 / v0.26.0+
    ``_canonicalize_sparse_mla_kv_cache_dtype``: the same, and FLASHINFER_MLA_SPARSE_SM120 turns
    auto / fp8 / fp8_e4m3 into ``fp8_ds_mla``)."""
    quantized = kv_cache_dtype.startswith("fp8")
    if backend == "FLASHMLA_SPARSE" and quantized:
        return "fp8_ds_mla"
    if backend == "FLASHINFER_MLA_SPARSE_SM120" and Version(traits.version) >= Version("0.24") and \
            kv_cache_dtype in ("auto", "fp8", "fp8_e4m3"):
        return "fp8_ds_mla"
    return kv_cache_dtype


# every backend the priority tables above name (``--attention-backend`` outside a GPU's own list:
# rejected for compute capability or MLA kind, as vLLM's validate_configuration does)
_CUDA_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER_MLA", "TOKENSPEED_MLA",
                  "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA", "FLASHINFER_MLA_SPARSE",
                  "FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4",
                  "FLASHINFER_MLA_SPARSE_SM90", "FLASHINFER_MLA_SPARSE_SM120")
_ROCM_BACKENDS = ("ROCM_ATTN", "ROCM_AITER_UNIFIED_ATTN", "TRITON_ATTN", "TRITON_MLA", "ROCM_AITER_MLA_SPARSE")


def default_block_size(traits: VersionTraits, *, gpu_sm: str, vendor: str = "nvidia", is_mla: bool = False,
                       is_sparse_mla: bool = False, kv_cache_dtype: str = "auto", head_size: int = 128,
                       num_heads: int = 32, qk_nope_head_dim: int | None = 128, has_sink: bool = False,
                       user_block_size: int | None = None, is_hybrid: bool = False,
                       selected_backend: str | None = None) -> tuple[int, str | None, str]:
    """(block_size, backend, source) of vLLM >= 0.18 on CUDA and ROCm (the backend registry;
    the 0.18.0 differences are inline).

    * Backend: ``CudaPlatformBase.get_attn_backend_cls`` walks ``_get_backend_priorities``
      (vllm/platforms/cuda.py @ v0.19.1, v0.20.2, v0.26.0, v0.28.0, v0.33.0) and takes the first
      backend whose ``validate_configuration`` passes (head size, KV dtype, block size when
      ``--block-size`` is given, MLA / sparse, capability, sinks; vllm/v1/attention/backend.py).
      MHA: SM10x FlashInfer, FlashAttention, Triton, Flex; other GPUs FlashAttention first.
      MLA: SM10x FlashInfer-MLA, CUTLASS-MLA, FA-MLA, FlashMLA, Triton-MLA; SM9x FA-MLA (bf16 KV),
      FlashMLA (fp8 KV), Triton-MLA; SM8x / SM12x Triton-MLA. Sparse MLA (DSA): SM10x FlashInfer
      sparse for fp8 KV or <= 16 heads per rank, else FlashMLA sparse; SM9x FlashMLA sparse
      (0.26+: FlashAttention-MLA sparse first for bf16 KV).
    * Block size: ``--block-size`` is kept (``user_specified_block_size``). Otherwise
      ``Platform.update_block_size_for_backend`` (vllm/platforms/interface.py) takes the first
      attention layer's ``get_preferred_block_size(16)``: 16 if the backend accepts it, else its
      smallest kernel block (FlashInfer-MLA 32, FlashMLA 64, CUTLASS-MLA 128). Sparse MLA: the first
      layer is the DSA indexer K cache (``DeepseekV32IndexerBackend``, kernel block 64 on CUDA;
      vllm/v1/attention/backends/mla/indexer.py), so 64; 0.33 takes the smallest size every backend
      accepts (``_preferred_block_size_for_backends``), also 64.
    * Hybrid (mamba) models: v0.19 keeps 16 (``update_block_size_for_backend`` skips them;
      ``HybridAttentionMambaModelConfig`` aligns later); from v0.20.2 phase 1 applies to them too.
      The mamba alignment itself is ``kv_cache.hybrid_kernel_block_alignment``.

    * ROCm (``vendor="amd"``, ``gpu_sm`` = GCN arch): ``RocmPlatform`` priorities with aiter found
      and ``VLLM_ROCM_USE_AITER`` off (:func:`_rocm_candidates`); ROCM_AITER_UNIFIED_ATTN prefers 64.
    * ``selected_backend`` (``--attention-backend``): only that backend is validated; invalid (or
      not in this GPU's list) raises like vLLM's "Selected backend ... is not valid".
    * FlashAttention pages: FA4 head 256 on SM10x 128 (v0.30+), SM90 fp8 head 512 64 (v0.33).

    Not modelled: other platforms (XPU/CPU/TPU: 16, estimated), ``VLLM_ROCM_USE_AITER=1``,
    per-model backend overrides (Gemma 4), models mixing backends beyond DSA indexer + MLA,
    ``--attention-config`` options, 0.10/0.11's ``VLLM_ATTENTION_BACKEND``. Conformance:
    tests/conformance/test_vllm_block_size.py (the releases' own selection code).
    """
    version = Version(traits.version)
    rocm = vendor == "amd" and gpu_sm.startswith("gfx")
    cap = _cap(gpu_sm) if vendor == "nvidia" else None
    if cap is None and not rocm:
        if user_block_size is not None:
            return user_block_size, None, "flag"
        return 16, None, "CacheConfig.DEFAULT_BLOCK_SIZE (backend registry of this platform not modelled) [estimated]"
    if rocm:
        cands = _rocm_candidates(version, gpu_sm, is_mla=is_mla, is_sparse_mla=is_sparse_mla,
                                 kv_cache_dtype=kv_cache_dtype, head_size=head_size, has_sink=has_sink,
                                 block=user_block_size)
    else:
        cands = _backend_candidates(version, cap, is_mla=is_mla, is_sparse_mla=is_sparse_mla,
                                    kv_cache_dtype=kv_cache_dtype, head_size=head_size, num_heads=num_heads,
                                    qk_nope_head_dim=qk_nope_head_dim, has_sink=has_sink, block=user_block_size)
    if selected_backend is not None:
        # get_attn_backend_cls: the selected backend alone is validated; invalid raises
        sel = selected_backend.upper()
        hit = next(((n, sz, ok) for n, sz, ok, _listed in cands if n == sel), None)
        if hit is None and sel not in (_ROCM_BACKENDS if rocm else _CUDA_BACKENDS):
            raise ConfigError(f"--attention-backend {selected_backend}: not modelled by kvscope for "
                              f"{'ROCm' if rocm else 'CUDA'}", field="--attention-backend",
                              fix="drop it (kvscope then follows vLLM's priority order)")
        if hit is None or not hit[2]:
            # not in this GPU's priority list: wrong compute capability / MLA kind for it
            raise ConfigError(f"Selected backend AttentionBackendEnum.{sel} is not valid for this configuration "
                              f"(vLLM {traits.version}, {gpu_sm}, head_size={head_size}, kv_cache_dtype="
                              f"{kv_cache_dtype}, block_size={user_block_size}, use_mla={is_mla}, "
                              f"use_sparse={is_sparse_mla}).", field="--attention-backend",
                              fix="drop --attention-backend or pick a backend this GPU and model support")
        cands = [hit + (True,)]
    chosen = next(((n, sz) for n, sz, ok, listed in cands if ok and listed), None)
    if chosen is None:
        raise ConfigError(f"No valid attention backend found for {'rocm' if rocm else 'cuda'} "
                          f"(vLLM {traits.version}, {gpu_sm}, "
                          f"head_size={head_size}, kv_cache_dtype={kv_cache_dtype}, block_size={user_block_size}, "
                          f"use_mla={is_mla}, use_sparse={is_sparse_mla}).",
                          field="--block-size" if user_block_size is not None else "--kv-cache-dtype",
                          fix="drop --block-size, or use another --kv-cache-dtype")
    name, sizes = chosen
    if user_block_size is not None:
        return user_block_size, name, "flag"
    if is_hybrid and version < Version("0.20"):  # hybrid phase 1 applies from v0.20.0 (read in 0.20.0)
        return 16, name, "CacheConfig.DEFAULT_BLOCK_SIZE (hybrid model: update_block_size_for_backend skips it)"
    if is_sparse_mla and is_mla:
        if rocm:  # DeepseekV32IndexerBackend: kernel block 1 on ROCm (v0.33: [1, MultipleOf(16)])
            return 16, name, f"CacheConfig.DEFAULT_BLOCK_SIZE: DSA indexer (first layer) and {name} accept 16"
        return 64, name, f"64: first layer is the DSA indexer (kernel block 64), backend {name}"
    if name == "ROCM_AITER_UNIFIED_ATTN" and version >= Version("0.19"):
        # get_preferred_block_size returns 64 (rocm_aiter_unified_attn.py @ v0.19.0; absent in v0.18.0)
        return 64, name, f"{name} preferred block size 64"
    if _multiple(16, sizes):
        return 16, name, f"CacheConfig.DEFAULT_BLOCK_SIZE, accepted by {name}"
    block = min(sizes)
    return block, name, f"{name} preferred block size (smallest kernel block {block})"


def backend_inputs(spec: Any) -> dict[str, Any]:
    """The model facts ``default_block_size`` needs, from a ``ModelSpec`` (duck-typed): attention
    head size (MLA: ``kv_lora_rank + qk_rope_head_dim``, the size MLAAttention passes the selector),
    ``qk_nope_head_dim``, attention sinks (gpt-oss: ``GptOssForCausalLM`` layers carry ``sinks``),
    DeepSeek-V4 (own backends)."""
    is_mla = bool(getattr(spec, "is_mla", False))
    head = spec.mla_kv_dim if is_mla else getattr(spec, "head_dim", None)
    return {"head_size": head, "qk_nope_head_dim": getattr(spec, "qk_nope_head_dim", None),
            "has_sink": getattr(spec, "model_type", "") == "gpt_oss",
            "is_deepseek_v4": getattr(spec, "dsv4", None) is not None}


def resolve_args(flags: VllmFlags, *, traits: VersionTraits, model_max_len: int, gpu_memory_bytes: int,
                 gpu_name: str, is_mla: bool, is_hybrid_mamba: bool, num_attention_heads: int,
                 gpu_sm: str | None = None, derived_max_len: DerivedMaxModelLen | None = None,
                 is_sparse_mla: bool = False, head_size: int | None = None,
                 qk_nope_head_dim: int | None = None, has_sink: bool = False,
                 gpu_vendor: str = "nvidia", is_deepseek_v4: bool = False) -> VllmArgs:
    """Apply vLLM's defaults and validations (the ones that raise before any memory is touched).

    Block size: 0.10-0.11 ``block_size_classic``; from 0.19 ``default_block_size`` (the attention
    backend's choice; ``head_size`` = the attention head size, MLA ``kv_lora_rank + qk_rope_head_dim``;
    heads per rank = ``num_attention_heads // tp``). Without ``gpu_sm`` the backend is unknown: 16,
    MLA 64 [estimated].

    ``derived_max_len`` (``derive_max_model_len`` of the HF config) replaces ``model_max_len`` when
    given; without it ``model_max_len`` is taken as ``max_position_embeddings`` with no RoPE factor."""
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
    if mml is not None and not auto and mml <= 0:
        raise FlagError(f"--max-model-len must be positive or -1/auto, got {mml}", field="--max-model-len",
                        fix="e.g. 8192")
    derived = derived_max_len or DerivedMaxModelLen(model_max_len, "max_position_embeddings", model_max_len,
                                                    None, True)
    # _get_and_verify_max_len (vllm/config/model.py @ v0.11.0 … v0.33.0)
    mml = verify_max_model_len(mml, derived, traits, flags.allow_long_max_model_len)
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
    if flags.block_size is not None and flags.block_size < 1:
        raise FlagError("--block-size must be positive", field="--block-size", fix="e.g. 16")
    backend: str | None = None
    kv_dtype = flags.kv_cache_dtype
    if flags.attention_backend is not None and traits.classic_block_rule:
        raise FlagError(f"--attention-backend is modelled from vLLM 0.18 (got {traits.version}; the "
                        "check_and_update_config era is not modelled)", field="--attention-backend",
                        fix="drop it, or use --engine-version 0.18 or later")
    if traits.classic_block_rule and gpu_sm is not None:
        block, source = block_size_classic(flags.block_size, is_mla=is_mla, gpu_sm=gpu_sm,
                                           is_sparse_mla=is_sparse_mla, traits=traits,
                                           qk_nope_head_dim=qk_nope_head_dim)
    elif is_deepseek_v4:
        # DeepSeek-V4's own backends (deepseek_v4.py): DeepseekSparseSWABackend prefers 256
        block, source = (flags.block_size, "flag") if flags.block_size is not None else \
            (256, "DeepseekSparseSWABackend.get_preferred_block_size (v0.33.0)")
        backend = "DEEPSEEK_V4 sparse MLA"
    elif gpu_sm is not None and not traits.is_v0 and not traits.classic_block_rule:
        block, backend, source = default_block_size(
            traits, gpu_sm=gpu_sm, vendor=gpu_vendor, is_mla=is_mla, is_sparse_mla=is_sparse_mla and is_mla,
            kv_cache_dtype=flags.kv_cache_dtype, head_size=head_size or (576 if is_mla else 128),
            num_heads=max(num_attention_heads // tp, 1), qk_nope_head_dim=qk_nope_head_dim,
            has_sink=has_sink, user_block_size=flags.block_size, is_hybrid=is_hybrid_mamba,
            selected_backend=flags.attention_backend)
        if is_mla:
            kv_dtype = mla_cache_dtype(traits, backend, flags.kv_cache_dtype)
    elif flags.block_size is not None:
        block, source = flags.block_size, "flag"
    elif is_mla:
        # no GPU arch: MLA backend taken as FlashMLA (64-token kernel blocks) [estimated]
        block, source = 64, "MLA backend default (64) [estimated: GPU arch unknown]"
    else:
        block, source = 16, "CacheConfig.DEFAULT_BLOCK_SIZE"
    prefix = flags.enable_prefix_caching
    if prefix is None:
        prefix = (not is_hybrid_mamba) or traits.hybrid_prefix_caching
    return VllmArgs(
        traits=traits, tp=tp, pp=pp, dp=dp, ep=flags.enable_expert_parallel,
        gpu_memory_utilization=util, max_model_len=mml, max_model_len_auto=auto,
        max_num_seqs=seqs, max_num_batched_tokens=mnbt, kv_cache_dtype=kv_dtype,
        block_size=block, block_size_source=source, attention_backend=backend, enforce_eager=flags.enforce_eager,
        kv_cache_memory_bytes=flags.kv_cache_memory_bytes, num_gpu_blocks_override=flags.num_gpu_blocks_override,
        num_speculative_tokens=flags.num_speculative_tokens, speculative_method=flags.speculative_method,
        enable_prefix_caching=prefix,
    )


# ---------------------------------------------------------------------------------------------
# max_model_len from the HF config: ModelConfig ``_get_and_verify_max_len``

# vllm/config/model.py @ v0.11.0 (``possible_keys``); model_arch_config_convertor.py
# ``derive_max_model_len_and_key`` @ v0.19.1 … v0.33.0: the smallest present value wins.
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_ROPE_KEYS_V4_PATCH = ("rope_theta", "rotary_emb_base", "partial_rotary_factor", "rotary_pct",
                       "rotary_emb_fraction", "original_max_position_embeddings")
DEFAULT_MAX_LEN_NO_KEYS = 2048


def _rope_default_keys(traits: VersionTraits) -> tuple[str, ...]:
    """The config keys for which the transformers-v4 branch of ``patch_rope_parameters`` creates
    ``rope_parameters = {"rope_type": "default"}`` (vllm/transformers_utils/config.py): only
    ``rope_theta`` in v0.12.0; + rotary_emb_base / partial_rotary_factor / rotary_pct /
    rotary_emb_fraction in v0.13.0; + original_max_position_embeddings from v0.14.1."""
    v = Version(traits.version)
    if v < Version("0.13"):
        return ("rope_theta",)
    if v < Version("0.14"):
        return _ROPE_KEYS_V4_PATCH[:-1]
    return _ROPE_KEYS_V4_PATCH


@dataclass(frozen=True)
class DerivedMaxModelLen:
    """``derived_max_model_len`` as vLLM holds it (a float once a RoPE factor was applied, which
    shows in its error text: ``max_position_embeddings=32768.0``), the key it came from, the
    default ``max_model_len`` and the ``model_max_length`` escape hatch."""

    derived: int | float
    key: str | None
    default_max_model_len: int
    model_max_length: int | None
    keys_found: bool
    error: str | None = None  # the engine fails deriving it (raised by verify_max_model_len)
    default_error: str | None = None  # the engine fails only when it takes the default (no user value / -1)


def _rope_dicts(config: Mapping[str, Any], traits: VersionTraits) -> list[dict] | None:
    """The RoPE dicts ``_get_and_verify_max_len`` iterates, after vLLM's config patching.

    0.10-0.11: ``rope_scaling`` (``patch_rope_scaling``: ``type`` -> ``rope_type``, ``su`` ->
    ``longrope``). 0.19-0.28 (transformers v4 path of ``patch_rope_parameters``):
    ``rope_parameters = rope_scaling``, or ``{"rope_type": "default"}`` when any of rope_theta /
    rotary_emb_base / partial_rotary_factor / rotary_pct / rotary_emb_fraction /
    original_max_position_embeddings is set (nested per layer type when keyed by layer type).
    From 0.26 (transformers v5 only: ``patch_rope_parameters`` calls ``standardize_rope_params``
    when rope_theta / rotary_emb_base or rope_parameters is set): the same dicts, the default one
    only for rope_theta / rotary_emb_base."""
    rs = config.get("rope_scaling")
    rp = config.get("rope_parameters")
    if traits.max_len_generation == 10:
        if not isinstance(rs, Mapping):
            return None
        dicts = [dict(rs)]
    else:
        base = rp if isinstance(rp, Mapping) and rp else rs
        if isinstance(base, Mapping) and base:
            nested = all(isinstance(v, Mapping) for v in base.values()) and \
                set(base) <= {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"}
            dicts = [dict(v) for v in base.values()] if nested else [dict(base)]
            if nested and not traits.transformers_v5 and Version(traits.version) >= Version("0.22"):
                # v0.22.1 / v0.23: the transformers-v4 branch of patch_rope_parameters leaves nested
                # rope_parameters unpatched (transformers_utils/config.py @ v0.22.1): the dicts as
                # written (a legacy ``type`` key then fails ``rp["rope_type"]``: KeyError)
                return dicts
        elif any(config.get(k) is not None for k in (_rope_default_keys(traits) if not traits.transformers_v5
                                                      else ("rope_theta", "rotary_emb_base"))):
            dicts = [{"rope_type": "default"}]
        else:
            return None
    ompe = config.get("original_max_position_embeddings")
    if traits.max_len_generation == 19 and not traits.transformers_v5 and ompe is not None and len(dicts) == 1:
        dicts[0]["original_max_position_embeddings"] = ompe  # the v4 branch patches the top-level key in
    for d in dicts:
        if "rope_type" not in d and "type" in d:
            d["rope_type"] = d["type"]
        d.setdefault("rope_type", "default")
        if d["rope_type"] == "su":
            d["rope_type"] = "longrope"
        elif d["rope_type"] == "mrope":
            d["rope_type"] = "default"
    return dicts


def derive_max_model_len(config: Mapping[str, Any], traits: VersionTraits) -> DerivedMaxModelLen:
    """``_get_and_verify_max_len`` without a user value (vllm/config/model.py @ v0.11.0, v0.19.1 …
    v0.28.0, v0.33.0; vllm/config/__init__.py @ v0.10.1.1), for the text config of a generate model.

    * the smallest of ``MAX_LEN_KEYS`` present; a truthy ``model_max_length`` overrides it; none:
      2048 (only when the user passes no value);
    * RoPE (skipped for ``gemma3*``): types other than su/longrope/llama3 (0.33: also yarn,
      deepseek_yarn, deepseek_llama_scaling) multiply by ``factor`` (default 1.0, ``None`` -> 1.0
      from 0.18; a TypeError before); up to 0.28 yarn starts from ``original_max_position_embeddings``;
    * from 0.12 a longrope model defaults to the top-level ``original_max_position_embeddings``.

    Not modelled: ``tokenizer_config.json``'s ``model_max_length``, ``--disable-sliding-window``,
    encoder configs, draft models.
    """
    gen = traits.max_len_generation
    derived: int | float = float("inf")
    key = None
    for k in MAX_LEN_KEYS:
        v = config.get(k)
        if v is not None:
            if v < derived:
                key = k
            derived = min(derived, v)
    mml_key = config.get("model_max_length")
    if mml_key:
        key, derived = "model_max_length", mml_key
    found = derived != float("inf")
    if not found:
        derived = DEFAULT_MAX_LEN_NO_KEYS
    error = None
    default_error = None
    rope = _rope_dicts(config, traits)
    missing = (f"rope_parameters: a per-layer-type dict has no rope_type: vLLM {traits.version} fails "
               "reading it (KeyError in _get_and_verify_max_len; its transformers-v4 branch of "
               "patch_rope_parameters does not patch nested dicts)")
    gemma3 = "gemma3" in str(config.get("model_type", ""))
    if rope and not gemma3 and any("rope_type" not in rp for rp in rope):
        error, rope = missing, None  # the scaling loop reads every dict
    if rope and not gemma3:
        if gen == 10:
            rp = rope[0]
            if rp["rope_type"] not in ("su", "longrope", "llama3"):
                factor = rp.get("factor", 1.0)
                if rp["rope_type"] == "yarn":
                    derived = rp["original_max_position_embeddings"]
                if factor is None:
                    error = (f"rope_scaling.factor is null: vLLM {traits.version} fails reading it "
                             "(TypeError in _get_and_verify_max_len; 0.19+ falls back to 1.0)")
                else:
                    derived *= factor
        else:
            unscaled = ("su", "longrope", "llama3") if gen == 19 else \
                ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
            factor: Any = 1.0
            for rp in rope:
                if rp["rope_type"] not in unscaled:
                    factor = rp.get("factor", factor)
                    if gen == 19 and rp["rope_type"] == "yarn":
                        derived = rp["original_max_position_embeddings"]
            if factor is None and not traits.max_len_null_factor_ok:
                error = (f"rope_scaling.factor is null: vLLM {traits.version} fails reading it "
                         "(TypeError in _get_and_verify_max_len; 0.18+ falls back to 1.0)")
            else:
                derived *= 1.0 if factor is None else factor
    default = int(derived) if error is None else 0
    if gen >= 19 and rope:
        for rp in rope:  # any(rp["rope_type"] == "longrope" ...): stops at the first longrope
            if "rope_type" not in rp:  # only for gemma3 here (the default-length path alone reads it)
                default_error = missing
                break
            if rp["rope_type"] == "longrope":
                default = int(config.get("original_max_position_embeddings", derived))
                break
    return DerivedMaxModelLen(derived, key, default, config.get("model_max_length"), found, error,
                              default_error)


def max_model_len_error(user: int, d: DerivedMaxModelLen, traits: VersionTraits) -> str:
    """The ValueError of ``_get_and_verify_max_len`` (text per version, see ``derive_max_model_len``)."""
    msg = (f"User-specified max_model_len ({user}) is greater than the derived max_model_len "
           f"({d.key}={d.derived} or model_max_length={d.model_max_length} in model's config.json).")
    if not traits.max_len_error_warning:
        return (f"{msg} This may lead to incorrect model outputs or CUDA errors. To allow overriding this "
                "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    warning = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
               "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. "
               "If the model uses absolute position encoding, positions exceeding derived_max_model_len "
               "will cause a CUDA array out-of-bounds error.")
    return f"{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {warning}"


def verify_max_model_len(user: int | None, d: DerivedMaxModelLen, traits: VersionTraits,
                         allow_long: bool = False) -> int:
    """``max_model_len`` after ``_get_and_verify_max_len``; raises FlagError with the engine's text.
    ``-1`` (auto-fit, v0.14+) takes the default like ``None``."""
    if not d.keys_found and user is not None:
        return user
    if d.error:
        raise ConfigError(d.error, field="rope_scaling", fix="set rope_scaling.factor or drop it")
    if user is None or (user == -1 and traits.requested_memory_ceil):
        if d.default_error:
            raise ConfigError(d.default_error, field="rope_parameters", fix="add rope_type to every dict")
        return d.default_max_model_len
    if user > d.derived:
        if d.model_max_length is None or user > d.model_max_length:
            if not allow_long:
                raise FlagError(max_model_len_error(user, d, traits), field="--max-model-len",
                                fix=f"use --max-model-len <= {int(d.derived)}, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    return int(user)


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
