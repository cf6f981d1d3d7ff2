"""SGLang releases as values: every version-dependent behaviour kvscope models, in ONE table.

Each behaviour is a named trait: the releases that have it, as a ``packaging`` specifier, and the
release (and file) whose code pins it. Eras with more than two behaviours are :class:`Era` traits
whose values are named constants (never era numbers). :func:`release` turns a version text into a
frozen :class:`SGLangRelease` (one field per trait, built once per version); the engine simulation
reads ``rel.<trait>`` and never compares versions itself.

Provenance. Conformance-run wheels (tests/conformance): 0.4.6.post5, 0.5.6, 0.5.9, 0.5.13, 0.5.14,
0.5.18, 0.5.23 (default) and 0.4.8.post1, 0.4.10.post2, 0.5.3, 0.5.4, 0.5.5, 0.5.7, 0.5.8.post1,
0.5.10, 0.5.12, 0.5.15, 0.5.20, 0.5.21, 0.5.22 (full run). Boundaries between two read releases are
read from the releases in between where named (0.4.7, 0.4.8, 0.4.9, 0.5.1, 0.5.2, 0.5.8, 0.5.11,
0.5.16, 0.5.17); otherwise a change is gated at the first read release that has it.

``Trait`` / ``Era`` are the shared ones of :mod:`kvscope.release_table`; this table binds the SGLang
containment rule (:func:`~kvscope.release_table.by_order_else_pep440`): ``>=X``, ``<X`` and their
conjunctions by plain ``Version`` ordering, pre-releases included (``0.5.14rc1`` sorts before 0.5.14, so
it behaves as the releases before it); the log formats' ``>X`` as PEP 440 has it (X's post-releases
are not after X).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from packaging.version import InvalidVersion, Version

from ...errors import FlagError
from ...release_table import Era, Trait, bind_rule, by_order_else_pep440

LATEST = "0.5.23"
KNOWN_VERSIONS = (
    "0.4.6.post5", "0.4.8.post1", "0.4.10.post2", "0.5.3", "0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.8",
    "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.18", "0.5.20", "0.5.21",
    "0.5.22", "0.5.23",
)
OLDEST = "0.4.0"  # older than any release kvscope models: refused


# --- era values (named, compared by identity of meaning, never ordered) -----------------------

class DefaultsLadder:
    """How ``mem_fraction_static`` / chunk / max_bs defaults are derived from the GPU size."""
    FIXED_TABLE = "fixed_table"  # < 0.4.8: fraction by tp*pp (0.79..0.88), chunk 2048|8192
    RESERVED_BUCKETS = "reserved_buckets"  # 0.4.8-0.5.2: reserved GiB per GPU bucket, one rounding
    RESERVE_FORMULA = "reserve_formula"  # 0.5.3+: 512 + chunk*1.5 + max_bs*2 + ... MiB


class VlmFraction:
    """The multimodal factor on the default fraction, in the pre-0.5.3 ladders."""
    NONE = "none"  # < 0.4.9
    FLAT_090 = "flat_0.90"  # 0.4.9: x0.90
    ADJUST = "adjust_mem_fraction_for_vlm"  # 0.4.10+ (and every 0.5.3+ release)


class PrefillGraph:
    """When the prefill (piecewise) CUDA graph is captured."""
    NONE = "none"  # < 0.5.4: no piecewise graph
    OPT_IN = "opt_in"  # 0.5.4-0.5.9: --enable-piecewise-cuda-graph
    AUTO = "auto"  # 0.5.10-0.5.13: on unless DP attention, PP, ROCm, DeepEP, multimodal, or disabled
    BREAKABLE = "breakable"  # 0.5.14+: CUDA, PP 1, not disabled


class PrefillGraphMaxTokens:
    """The prefill graph's largest captured token count."""
    FIELD_4096 = "field_default_4096"  # 0.5.4-0.5.6: piecewise_cuda_graph_max_tokens default 4096
    CHUNK = "chunk"  # 0.5.7: chunked_prefill_size
    MLA_2048 = "mla_2048_else_chunk"  # 0.5.8-0.5.22: MLA 2048, else chunk
    MLA_8192 = "mla_min_8192_chunk_else_chunk"  # 0.5.23: MLA min(8192, chunk), else chunk


class PrefillGraphSizes:
    """The generator of the prefill graph's capture list."""
    STEP_128 = "640..4096/128, 4352../256"  # < 0.5.8
    START_640 = "capture_token_sizes from 640"  # 0.5.8 (and .post1)
    START_576 = "capture_token_sizes from 576"  # 0.5.9+


class PiecewiseReserve:
    """What the default-fraction reserve adds for the prefill graph (when it is on)."""
    NONE = "none"  # 0.5.4-0.5.5
    QUARTER_4096 = "4096 // 4, after the floor"  # 0.5.6
    CHUNK_EIGHTH = "chunk // 8, after the floor"  # 0.5.7
    PER_ENTRY_8 = "8 MiB per entry (MLA 1.5 GiB from 0.5.10)"  # 0.5.8+


class MambaCarveEra:
    """How ``handle_max_mamba_cache`` carves the mamba / linear-attention state pool."""
    RUNNER = "runner"  # < 0.5.9: model_runner.py, (1 + D) per request, GDN divides by attn-DP
    MIXIN = "mixin"  # 0.5.9-0.5.12: spec subtracts running//dp * D first
    JOINT = "joint"  # 0.5.13-0.5.17: spec solved jointly, RuntimeError when <= 0
    PADDED = "padded"  # 0.5.18+: + the padding slot on both buffers


class SwaSplit:
    """How the hybrid sliding-window pools are split."""
    LAYER_COUNT = "layer_count"  # < 0.5.9: set_num_token_hybrid by layer count (Llama 4 chunk rule)
    MIXIN_UNROUNDED = "mixin_unrounded"  # 0.5.9: swa from the unrounded full
    MIXIN_ROUNDED = "mixin_rounded"  # 0.5.10: swa from the page-rounded full
    CONFIGURATOR = "configurator"  # 0.5.11+: HybridSWAPoolConfigurator


class OomErrorText:
    """The RuntimeError text when ``max_total_num_tokens <= 0``."""
    BARE = "bare"  # < 0.5.0
    WITH_VALUE = "with_value"  # 0.5.0-0.5.9: "... Current value: self.server_args.mem_fraction_static=…"
    CONFIG = "memory_pool_config"  # 0.5.10+: MemoryPoolConfig, no value (the configs never carry it)


class ReqRowExtra:
    """Row headroom of ``req_to_token`` beyond ``context_len``."""
    FOUR = "context_len + 4"  # < 0.5.0
    DRAFT_TOKENS = "4 + draft tokens"  # 0.5.0-0.5.12
    TOPK_PAGED = "max(.., 2 alloc_len) with page > 1 and topk > 1"  # 0.5.13-0.5.17
    PAGED = "max(.., 2 alloc_len + page - 1) with page > 1"  # 0.5.18+


class CodeHome:
    """Which module holds the sizing functions the probe wraps (and the conformance adapters call)."""
    MODEL_RUNNER = "model_runner"  # < 0.5.7: ModelRunner in model_executor/model_runner.py
    KV_CACHE_MIXIN = "model_runner_kv_cache_mixin"  # 0.5.7+: ModelRunnerKVCacheMixin
    MIXIN_POOL_CONFIGURATOR = "kv_cache_mixin + pool_configurator"  # 0.5.14-0.5.17: the mixin's profile split
    KV_CACHE_CONFIGURATOR = "kv_cache_configurator"  # 0.5.18+: mem_cache/kv_cache_configurator.py


class GraphInit:
    """The ModelRunner method that captures the CUDA graphs."""
    DEVICE_GRAPHS = "init_device_graphs"  # < 0.5.14
    CUDA_GRAPHS = "init_cuda_graphs"  # 0.5.14+


class BaselineCode:
    """Where the pre-load free memory (the profile's baseline) is measured."""
    RUNNER_RETURN = "ModelRunner.init_torch_distributed returns it"  # < 0.5.23
    BOOTSTRAP = "distributed/bootstrap.py measure_pre_model_load_memory"  # 0.5.23+


# --- THE TABLE ---------------------------------------------------------------------------------

TRAITS: dict[str, Trait | Era] = bind_rule(by_order_else_pep440, {
    # defaults (server_args.py ServerArgs.__post_init__ <= 0.5.2, _handle_gpu_memory_settings 0.5.3-0.5.18,
    # arg_groups/memory_hook.py 0.5.19+)
    "defaults_ladder": Era((
        ("<0.4.8", DefaultsLadder.FIXED_TABLE, "0.4.6.post5 server_args.py l.246-305 (same in 0.4.7)"),
        (">=0.4.8,<0.5.3", DefaultsLadder.RESERVED_BUCKETS, "0.4.8 server_args.py l.285-338; 0.4.10.post2 l.310-380"),
        (">=0.5.3", DefaultsLadder.RESERVE_FORMULA, "0.5.3 server_args.py _handle_gpu_memory_settings"),
    )),
    "vlm_fraction": Era((
        ("<0.4.9", VlmFraction.NONE, "0.4.8 server_args.py (no multimodal term)"),
        (">=0.4.9,<0.4.10", VlmFraction.FLAT_090, "0.4.9 server_args.py l.327-329"),
        (">=0.4.10", VlmFraction.ADJUST, "0.4.10.post2 server_args.py l.357-359, 2040 adjust_mem_fraction_for_vlm"),
    )),
    "small_gpu_max_bs_24": Trait(">=0.5.5", "0.5.5 server_args.py (tp<4 below 35 GiB: 24; 16 in 0.5.3/0.5.4)"),
    "bucket_35gib_4096": Trait(">=0.5.20", "0.5.20 memory_hook.py (32 GB Blackwell: chunk 4096, max_bs 48|160)"),
    "fallback_fraction_095": Trait(">=0.5.20", "0.5.20 memory_hook.py (no GPU size: 0.95; 0.88 before)"),
    "max_bs_clamped_to_running": Trait(">=0.5.22", "0.5.22 memory_hook.py l.183-188 (absent in 0.5.21)"),
    "prefill_graph": Era((
        ("<0.5.4", PrefillGraph.NONE, "0.5.3 server_args.py (no piecewise_cuda_graph_tokens)"),
        (">=0.5.4,<0.5.10", PrefillGraph.OPT_IN, "0.5.4 server_args.py --enable-piecewise-cuda-graph"),
        (">=0.5.10,<0.5.14", PrefillGraph.AUTO, "0.5.13 server_args.py _handle_piecewise_cuda_graph"),
        (">=0.5.14", PrefillGraph.BREAKABLE,
         "0.5.14 cuda_graph_config.py default_prefill_backend; 0.5.23 cuda_graph_hook.py"),
    )),
    "prefill_graph_max_tokens": Era((
        ("<0.5.7", PrefillGraphMaxTokens.FIELD_4096, "0.5.6 server_args.py (field default 4096)"),
        (">=0.5.7,<0.5.8", PrefillGraphMaxTokens.CHUNK, "0.5.7 server_args.py l.96-100"),
        (">=0.5.8,<0.5.23", PrefillGraphMaxTokens.MLA_2048, "0.5.8.post1 server_args.py; 2048 in 0.5.22"),
        (">=0.5.23", PrefillGraphMaxTokens.MLA_8192, "0.5.23 memory_hook.py l.238"),
    )),
    "prefill_graph_sizes": Era((
        ("<0.5.8", PrefillGraphSizes.STEP_128, "0.5.6 / 0.5.7 server_args.py _generate_piecewise_cuda_graph_tokens"),
        (">=0.5.8,<0.5.9", PrefillGraphSizes.START_640, "0.5.8 / 0.5.8.post1 server_args.py"),
        (">=0.5.9", PrefillGraphSizes.START_576, "0.5.9 server_args.py; 0.5.23 cuda_graph_hook.py"),
    )),
    "prefill_graph_total_tokens_clamp": Trait(">=0.5.10", "0.5.10 server_args.py (--max-total-tokens clamp)"),
    "prefill_graph_context_clamp": Trait(">=0.5.13,<0.5.18",
                                         "0.5.13 server_args.py l.136-141 (#21112; absent in 0.5.12, gone by 0.5.18)"),
    "piecewise_reserve": Era((
        ("<0.5.6", PiecewiseReserve.NONE, "0.5.4 / 0.5.5 server_args.py (no piecewise term)"),
        (">=0.5.6,<0.5.7", PiecewiseReserve.QUARTER_4096, "0.5.6 server_args.py l.141-143"),
        (">=0.5.7,<0.5.8", PiecewiseReserve.CHUNK_EIGHTH, "0.5.7 server_args.py l.141-143"),
        (">=0.5.8", PiecewiseReserve.PER_ENTRY_8, "0.5.8.post1 server_args.py; 0.5.23 memory_hook.py"),
    )),
    "mla_prefill_graph_flat_reserve": Trait(">=0.5.10", "0.5.10 server_args.py (MLA: flat 1.5 GiB)"),
    "deepep_prefill_graph_reserve": Trait(">=0.5.17",
                                          "0.5.17 server_args.py (absent in 0.5.16); 0.5.23 memory_hook.py l.384"),
    "deepep_reserve": Trait(">=0.5.15", "0.5.15 server_args.py (+2 GiB; absent in 0.5.14)"),
    "speculative_reserve_4gib": Trait(">=0.5.10", "0.5.10 server_args.py (EAGLE +4 GiB; +2 GiB in 0.5.3-0.5.9)"),
    # the draft is budgeted in the profile (its weights load before it, its KV joins the cell); the
    # default-fraction speculative reserve is gone
    "draft_in_budget": Trait(">=0.5.14", "0.5.14 pool_configurator.py DefaultPoolConfigurator.__init__"),

    # attention backend, page size, aiter (model_runner.py <= 0.5.3, server_args.py 0.5.4-0.5.18,
    # arg_groups/overrides.py / attention_hook.py 0.5.19+)
    # Llama 4's vision tower: HF's Llama4VisionModel built unconditionally, whole on every rank (0.4.8.post1 /
    # 0.4.9 models/mllama4.py); from 0.4.10 only with --enable-multimodal (off by default for
    # Llama4ForConditionalGeneration, configs/model_config.py), TP-sharded then
    "llama4_vision_opt_in": Trait(">=0.4.10", "0.4.10.post2 models/mllama4.py has_vision (0.5.9, 0.5.23 alike)"),
    "llama4_backend_override": Trait(">=0.5.3", "0.5.3 server_args.py _handle_model_specific_adjustments"),
    # DeepSeek NSA (V3.2) in _handle_model_specific_adjustments, after the memory defaults: DP attention with
    # dp_size = tp_size in 0.5.3-0.5.5 (from 0.5.6 dp_size is left as passed and dp_size 1 turns it off again
    # in _handle_data_parallelism); mem_fraction_static = 0.8 whatever was passed in 0.5.3 only
    "dsa_dp_attention_forced": Trait(">=0.5.3,<0.5.6", "0.5.3 server_args.py l.814-818, 0.5.5 l.1070-1073 "
                                     "(0.5.6 l.950: enable_dp_attention only)"),
    "dsa_indexer_in_profile": Trait(">=0.5.4", "0.5.4 model_runner.py profile_max_num_token l.1406-1416 "
                                    "(the NSA indexer per token; absent in 0.5.3, sgl-project/sglang#11309)"),
    "dsa_mem_fraction_08": Trait(">=0.5.3,<0.5.4", "0.5.3 server_args.py l.823 (absent in 0.5.4)"),
    "dsa_forced_page": Trait(">=0.5.3", "0.5.3 server_args.py (DSA: page 64 CUDA, 1 ROCm)"),
    # DSA KV dtype: `auto` -> fp8_e4m3 on SM >= 10, bfloat16 below (0.5.6 server_args.py l.977-986 ... 0.5.23
    # arg_groups/overrides.py); 0.5.3/0.5.4 set fp8_e4m3 on SM >= 10 whatever --kv-cache-dtype said
    "dsa_kv_fp8_default": Trait(">=0.5.3", "0.5.3 server_args.py l.826-832; 0.5.9 _set_default_nsa_kv_cache_dtype"),
    "dsa_kv_fp8_forced": Trait("<0.5.5", "0.5.4 server_args.py l.1026-1032 (0.5.5 l.1083: only when auto)"),
    "hybrid_gdn_sm100_backend": Trait(">=0.5.13", "0.5.13 server_args.py l.2506; 0.5.18 overrides.py"),
    "deepseek_v3_sm100_trtllm_mla": Trait(">=0.5.4", "0.5.4 server_args.py l.872-886 (absent in 0.5.3)"),
    "rocm_mla_aiter": Trait(">=0.4.7", "0.4.7 model_runner.py l.342-350 (absent in 0.4.6.post5)"),
    "rocm_mla_aiter_with_speculative": Trait(">=0.5.0", "0.5.6 server_args.py l.1315-1320 (no speculative condition; "
                                             "the 0.4.x rule excludes speculative decoding; gated at 0.5.0)"),
    "fa3_default_all_mha": Trait(">=0.5.9", "0.5.9 server_args.py (<= 0.5.8: is_fa3_default_architecture only)"),
    "sm100_trtllm_mha_default": Trait(">=0.5.7", "0.5.7 server_args.py (absent in 0.5.6)"),
    "trtllm_mla_page_constraint": Trait(">=0.4.10", "0.4.10.post2 server_args.py l.428 (no trtllm_mla in 0.4.9)"),
    "trtllm_mha_page_128": Trait(">=0.5.23", "0.5.23 overrides.py _mla_backend_page_constraints"),
    "aiter_fraction_factor": Trait(">=0.4.7", "0.4.7 model_runner.py l.423-425 (absent in 0.4.6.post5)"),

    # cell size (model_runner.py <= 0.5.6 inline, mixin 0.5.7-0.5.17, kv_cache_configurator.py 0.5.18+)
    "mha_cell_v_head_dim": Trait(">=0.5.7",
                                 "0.5.7 mixin get_cell_size_per_token (0.5.6 l.1417-1423 ignores v_head_dim)"),
    "dsa_fp8_scaled_buffer": Trait(">=0.5.7",
                                   "0.5.9 mixin calculate_mla_kv_cache_dim l.212 (a 0.5.8 GLM-5 log prints it)"),
    "dsa_fp8_scaled_cell": Trait(">=0.5.18", "0.5.18 kv_cache_configurator.py calculate_mla_kv_cache_dim"),
    "fp4_dequant_workspace": Trait(">=0.5.18", "0.5.18 kv_cache_configurator.py (one FP8 workspace per pool)"),
    "mxfp8_scales": Trait(">=0.5.18", "0.5.18 kv_cache_configurator.py (mxfp8 scale bytes)"),
    "fp4_recipe_cell": Trait(">=0.5.21", "0.5.21 fp4_kv_cache_quant_method.py compute_cell_size (0.5.20 without)"),
    "draft_cell_dsa_indexer_split": Trait(">=0.5.18",
                                          "0.5.18 kv_cache_configurator.py (DSA draft: KV share + own indexer)"),
    "draft_cell_share": Trait(">=0.5.22", "0.5.22 kv_cache_configurator.py int(cell * d / L) (0.5.21: (1 + d/L) form)"),

    # mamba / linear-attention state
    "mamba_carve": Era((
        ("<0.5.9", MambaCarveEra.RUNNER, "0.5.6 model_runner.py handle_max_mamba_cache l.1450"),
        (">=0.5.9,<0.5.13", MambaCarveEra.MIXIN, "0.5.9 mixin l.151"),
        (">=0.5.13,<0.5.18", MambaCarveEra.JOINT, "0.5.13 mixin l.82 = 0.5.14 l.122"),
        (">=0.5.18", MambaCarveEra.PADDED,
         "0.5.18 kv_cache_configurator.py _handle_max_mamba_cache l.1970; 0.5.23 l.3229"),
    )),
    "mamba_pp_stage_share": Trait(">=0.5.18", "0.5.18 kv_cache_configurator.py _handle_max_mamba_cache l.1975"),
    "running_per_dp_at_least_one": Trait(
        ">=0.5.23", "0.5.23 kv_cache_configurator.py max(1, running // dp): resolve_max_num_reqs, "
        "_handle_max_mamba_cache, compute_swa_request_cap (absent in 0.5.20)"),

    # profile and its errors
    "mm_reservation": Trait(">=0.5.18", "0.5.18 kv_cache_configurator.py mm_runtime_reservation_gb"),
    "no_kv_value_error": Trait(">=0.5.14", "0.5.14 mixin _profile_available_bytes (ValueError when rest <= 0)"),
    "oom_error_text": Era((
        ("<0.5.0", OomErrorText.BARE, "0.4.6.post5 model_runner.py"),
        (">=0.5.0,<0.5.10", OomErrorText.WITH_VALUE, "0.5.6 model_runner.py; 0.5.9 mixin"),
        (">=0.5.10", OomErrorText.CONFIG, "0.5.10 mixin l.55 MemoryPoolConfig; 0.5.23 pool_configurator.py l.94"),
    )),

    # hybrid SWA pools
    "swa_split": Era((
        ("<0.5.9", SwaSplit.LAYER_COUNT, "0.5.6 model_runner.py set_num_token_hybrid l.1526"),
        (">=0.5.9,<0.5.10", SwaSplit.MIXIN_UNROUNDED, "0.5.9 mixin set_num_tokens_hybrid_swa l.251"),
        (">=0.5.10,<0.5.11", SwaSplit.MIXIN_ROUNDED, "0.5.10 mixin _resolve_hybrid_swa_tokens"),
        (">=0.5.11", SwaSplit.CONFIGURATOR, "0.5.13 pool_configurator.py HybridSWAPoolConfigurator l.196"),
    )),
    "swa_split_in_profile": Trait(">=0.5.14", "0.5.14 pool_configurator.py (the profile's tokens are the SWA split's)"),
    "swa_request_cap": Trait(">=0.5.14", "0.5.14 pool_configurator.py SWAChunkCapPoolConfigurator l.339"),
    "swa_request_cap_needs_chunk": Trait(">=0.5.22",
                                         "0.5.22 / 0.5.23 SWARequestCapPoolConfigurator (chunk > 0; 0.5.21 without)"),
    "swa_draft_share": Trait(">=0.5.18", "0.5.18 pool_configurator.py (eagle_draft_num_layers at the full width)"),
    "validate_swa_pool_size": Trait(">=0.5.18", "0.5.18 pool_configurator.py validate_swa_pool_size"),

    # request pools (init_memory_pool < 0.5.10, _resolve_memory_pool_config 0.5.10+)
    "mamba_request_cap": Trait(">=0.5.0", "0.5.6 model_runner.py (mamba state pool; none in 0.4.x)"),
    "mamba_cap_running_per_dp": Trait(">=0.5.9,<0.5.10", "0.5.9 mixin l.355 (speculative + DP attention)"),
    "mamba_state_too_small_error": Trait(">=0.5.13", "0.5.13 mixin _resolve_max_num_reqs"),
    "reqs_from_final_tokens": Trait(">=0.5.10", "0.5.13 mixin _resolve_max_num_reqs l.876 (page, cap, then requests)"),
    "user_reqs_capped_by_half_tokens": Trait(">=0.5.14", "0.5.14 mixin l.981; 0.5.23 kv_cache_configurator.py l.3119"),
    "req_pool_size_plus_one": Trait("<0.4.7", "0.4.6.post5 model_runner.py l.904 (size=max_num_reqs from 0.4.7 l.926)"),
    "classic_draft_headroom": Trait("<0.5.9", "0.5.6 model_runner.py init_memory_pool draft_runner_cache_size"),
    "ngram_has_no_draft_kv": Trait(">=0.5.14", "0.5.14 mem_cache/common.py has_draft_kv"),
    "req_row_extra": Era((
        ("<0.5.0", ReqRowExtra.FOUR, "0.4.6.post5 model_runner.py l.905"),
        (">=0.5.0,<0.5.13", ReqRowExtra.DRAFT_TOKENS, "0.5.6 model_runner.py; 0.5.9-0.5.12 mixin"),
        (">=0.5.13,<0.5.18", ReqRowExtra.TOPK_PAGED, "0.5.13 / 0.5.14 mem_cache/common.py"),
        (">=0.5.18", ReqRowExtra.PAGED, "0.5.18 / 0.5.23 mem_cache/allocation_sizing.py"),
    )),
    "req_to_token_padding_row": Trait(">=0.5.12", "0.5.12 memory_pool.py ReqToTokenPool.__init__ l.145"),

    # command line and log (outside the simulation: what a printed command or log line shows)
    "attn_dp_size_flag": Trait(">=0.5.23", "0.5.23 server_args.py (--attn-dp-size; --enable-dp-attention deprecated)"),
    "server_args_dump_after_aiter_factor": Trait(
        ">=0.5.4", "0.5.6 server_args.py l.1420 (x0.85 in ServerArgs, before the dump); 0.4.8.post1-0.5.3 "
                   "model_runner.py applies it after the dump"),
    # code layout (where the functions the probe hooks live; hooks/sglang.py and the conformance
    # adapters follow it). Bounds between the read wheels are those of shared/specs/sglang.md §0.1.
    "profile_code": Era((
        ("<0.5.7", CodeHome.MODEL_RUNNER,
         "0.5.6 model_runner.py ModelRunner.profile_max_num_token (0.4.6.post5 l.785)"),
        (">=0.5.7,<0.5.14", CodeHome.KV_CACHE_MIXIN,
         "0.5.9 model_runner_kv_cache_mixin.py profile_max_num_token l.116, get_cell_size_per_token l.47"),
        (">=0.5.14,<0.5.18", CodeHome.MIXIN_POOL_CONFIGURATOR,
         "0.5.14 model_runner_kv_cache_mixin.py _profile_available_bytes l.85, _resolve_memory_pool_config "
         "l.1051"),
        (">=0.5.18", CodeHome.KV_CACHE_CONFIGURATOR,
         "0.5.18 mem_cache/kv_cache_configurator.py _profile_available_bytes l.1764 (0.5.23 l.2990)"),
    )),
    "pool_init_code": Era((
        ("<0.5.7", CodeHome.MODEL_RUNNER, "0.5.6 model_runner.py ModelRunner.init_memory_pool (0.4.6.post5 l.822)"),
        (">=0.5.7,<0.5.18", CodeHome.KV_CACHE_MIXIN,
         "0.5.9 model_runner_kv_cache_mixin.py init_memory_pool l.339 (0.5.14 l.1078)"),
        (">=0.5.18", CodeHome.KV_CACHE_CONFIGURATOR,
         "0.5.18 mem_cache/kv_cache_configurator.py KVCacheConfigurator.configure l.276 (0.5.23 l.457)"),
    )),
    "pool_configurator_code": Trait(">=0.5.14", "0.5.14 model_executor/pool_configurator.py "
                                    "DefaultPoolConfigurator.calculate_pool_sizes l.95 (0.5.23 l.180)"),
    "graph_init_code": Era((
        ("<0.5.14", GraphInit.DEVICE_GRAPHS,
         "0.5.9 model_runner.py ModelRunner.init_device_graphs l.2119 (0.4.6.post5: init_cuda_graphs l.1082)"),
        (">=0.5.14", GraphInit.CUDA_GRAPHS, "0.5.14 model_runner.py ModelRunner.init_cuda_graphs l.887 (0.5.23 l.1170)"),
    )),
    "baseline_code": Era((
        ("<0.5.23", BaselineCode.RUNNER_RETURN,
         "0.5.9 model_runner.py init_torch_distributed l.729 returns it (0.5.18 l.1029 has no "
         "measure_pre_model_load_memory)"),
        (">=0.5.23", BaselineCode.BOOTSTRAP,
         "0.5.23 distributed/bootstrap.py measure_pre_model_load_memory l.193 (0.5.19-0.5.22 not read)"),
    )),

    # log line formats (what the engine prints; the doctor's version range, logs.VERSION_MARKERS).
    # A marker's range is the releases that print the line so; where the change falls between two
    # read wheels the range stays open over the unread ones (">0.5.6" with "<0.5.9": 0.5.7-0.5.8
    # fit both shapes).
    "log_init_end_no_elapsed": Trait("<0.5.9", "0.4.6.post5 model_runner.py l.495 \"Init torch distributed ends. "
                                     "mem usage=\" (0.5.6 the same)"),
    "log_init_end_elapsed": Trait(">0.5.6", "0.5.9 model_runner.py l.850 \"Init torch distributed ends. elapsed=\" "
                                  "(absent in 0.5.6)"),
    "log_init_parallel": Trait(">0.5.20", "0.5.23 distributed/bootstrap.py l.115/190 \"Init parallel begin/ends\" (absent in 0.5.20 logs)"),
    "log_baseline_taken": Trait(">0.5.20", "0.5.23 distributed/bootstrap.py \"Memory baseline taken\" (absent in 0.5.20 logs)"),
    "log_load_end_no_elapsed": Trait("<0.5.9", "0.4.6.post5 model_runner.py l.575 \"Load weight end. type=\" "
                                     "(0.5.6 the same)"),
    "log_load_end_elapsed_dtype": Trait(">0.5.6,<0.5.10", "0.5.9 model_runner.py l.1041 \"Load weight end. "
                                        "elapsed=…, type=…, dtype=\" (no dtype from 0.5.10)"),
    "log_load_end_no_dtype": Trait(">0.5.9", "0.5.14 model_runner.py l.1493 \"Load weight end. elapsed=\" "
                                   "without dtype (0.5.10 on)"),
    "log_load_end_committed": Trait(">0.5.15", "0.5.23 model_runner_components/startup_weight_load.py l.538 "
                                    "\"Committed real weights\" (absent in 0.5.15)"),
    "log_kv_alloc_dtype": Trait(">0.5.9", "0.5.14 mem_cache/memory_pool.py l.1023 \"KV Cache is allocated. "
                                "dtype: …\" (0.5.9 l.652 without)"),
    "log_kv_alloc_no_dtype": Trait("<0.5.14", "0.4.6.post5 mem_cache/memory_pool.py l.274 \"KV Cache is allocated. "
                                   "#tokens\" (0.5.13 the same)"),
    "log_capture_legacy": Trait("<0.5.14", "0.4.6.post5 model_runner.py l.1096 \"Capture cuda graph begin\" "
                                "(lower-case; 0.5.13 the same)"),
    "log_capture_backend": Trait(">0.5.13", "0.5.14 model_runner.py l.2743 \"Capture {name} CUDA graph begin\" "
                                 "with backend= (0.5.23 cuda_graph_setup.py l.685)"),
    "log_no_kv_mem_error": Trait(">0.5.13", "0.5.14 model_runner_kv_cache_mixin.py l.111 \"Loaded weights leave "
                                 "no GPU memory for the KV cache\""),
    "log_mm_reserve": Trait(">0.5.15", "0.5.18 kv_cache_configurator.py l.143 \"Reserving … of the KV "
                            "budget\" (absent in 0.5.15)"),
    "log_summary_no_avail": Trait("<0.5.3", "0.4.6.post5 managers/scheduler.py summary without "
                                  "available_gpu_mem (0.4.10.post2 the same)"),
    "log_summary_avail": Trait(">0.4.10.post2", "0.5.9 managers/scheduler.py summary with available_gpu_mem= (0.5.3 on)"),
    "log_unbalanced_min_per_gpu": Trait("<0.5.10", "0.5.9 model_runner.py l.843 \"min_per_gpu_memory=\" "
                                        "(0.4.6.post5 l.486)"),
    "log_unbalanced_pre_model_load": Trait(">0.5.9", "0.5.14 model_runner.py l.1278 \"pre_model_load_memory=\""),
    # --- CUDA graphs (plan.py graph_stage) ---
    "disable_cuda_graph_all_phases": Trait(">=0.5.23", "0.5.23 arg_groups/cuda_graph_hook.py l.55: --disable-cuda-graph "
                                           "disables the decode and the prefill graph (0.5.10 server_args.py: the "
                                           "piecewise prefill graph has its own --disable-piecewise-cuda-graph)"),
})


@dataclass(frozen=True)
class SGLangRelease:
    """One SGLang release as the simulation sees it: one field per entry of :data:`TRAITS`."""

    version: Version
    defaults_ladder: str
    vlm_fraction: str
    small_gpu_max_bs_24: bool
    bucket_35gib_4096: bool
    fallback_fraction_095: bool
    max_bs_clamped_to_running: bool
    prefill_graph: str
    prefill_graph_max_tokens: str
    prefill_graph_sizes: str
    prefill_graph_total_tokens_clamp: bool
    prefill_graph_context_clamp: bool
    piecewise_reserve: str
    mla_prefill_graph_flat_reserve: bool
    deepep_prefill_graph_reserve: bool
    deepep_reserve: bool
    speculative_reserve_4gib: bool
    draft_in_budget: bool
    llama4_vision_opt_in: bool
    llama4_backend_override: bool
    dsa_dp_attention_forced: bool
    dsa_indexer_in_profile: bool
    dsa_mem_fraction_08: bool
    dsa_forced_page: bool
    dsa_kv_fp8_default: bool
    dsa_kv_fp8_forced: bool
    hybrid_gdn_sm100_backend: bool
    deepseek_v3_sm100_trtllm_mla: bool
    rocm_mla_aiter: bool
    rocm_mla_aiter_with_speculative: bool
    fa3_default_all_mha: bool
    sm100_trtllm_mha_default: bool
    trtllm_mla_page_constraint: bool
    trtllm_mha_page_128: bool
    aiter_fraction_factor: bool
    mha_cell_v_head_dim: bool
    dsa_fp8_scaled_buffer: bool
    dsa_fp8_scaled_cell: bool
    fp4_dequant_workspace: bool
    mxfp8_scales: bool
    fp4_recipe_cell: bool
    draft_cell_dsa_indexer_split: bool
    draft_cell_share: bool
    mamba_carve: str
    mamba_pp_stage_share: bool
    running_per_dp_at_least_one: bool
    mm_reservation: bool
    no_kv_value_error: bool
    oom_error_text: str
    swa_split: str
    swa_split_in_profile: bool
    swa_request_cap: bool
    swa_request_cap_needs_chunk: bool
    swa_draft_share: bool
    validate_swa_pool_size: bool
    mamba_request_cap: bool
    mamba_cap_running_per_dp: bool
    mamba_state_too_small_error: bool
    reqs_from_final_tokens: bool
    user_reqs_capped_by_half_tokens: bool
    req_pool_size_plus_one: bool
    classic_draft_headroom: bool
    ngram_has_no_draft_kv: bool
    req_row_extra: str
    req_to_token_padding_row: bool
    attn_dp_size_flag: bool
    server_args_dump_after_aiter_factor: bool
    profile_code: str
    pool_init_code: str
    pool_configurator_code: bool
    graph_init_code: str
    baseline_code: str
    log_init_end_no_elapsed: bool
    log_init_end_elapsed: bool
    log_init_parallel: bool
    log_baseline_taken: bool
    log_load_end_no_elapsed: bool
    log_load_end_elapsed_dtype: bool
    log_load_end_no_dtype: bool
    log_load_end_committed: bool
    log_kv_alloc_dtype: bool
    log_kv_alloc_no_dtype: bool
    log_capture_legacy: bool
    log_capture_backend: bool
    log_no_kv_mem_error: bool
    log_mm_reserve: bool
    log_summary_no_avail: bool
    log_summary_avail: bool
    log_unbalanced_min_per_gpu: bool
    log_unbalanced_pre_model_load: bool
    disable_cuda_graph_all_phases: bool

    def __str__(self) -> str:
        return str(self.version)


def parse_version(text: str | None) -> Version:
    """``--engine-version`` text -> Version (None, "" and "latest": :data:`LATEST`); FlagError if invalid."""
    if text is None or text in ("", "latest"):
        return Version(LATEST)
    try:
        v = Version(text.lstrip("v"))
    except InvalidVersion:
        raise FlagError(f"not a version: {text!r}", field="--engine-version",
                        fix=f"use e.g. {LATEST} (known: {', '.join(KNOWN_VERSIONS)})") from None
    if v < Version(OLDEST):
        raise FlagError(f"SGLang {text} is older than any version kvscope models", field="--engine-version",
                        fix=f"use a version from 0.4.6 to {LATEST}")
    return v


def check_modelled(text: str | None) -> Version:
    """``--engine-version`` within the modelled releases (0.4.x .. :data:`LATEST`, post releases of it
    included); a newer one is refused naming the nearest modelled release (FlagError)."""
    v = parse_version(text)
    if v.release[:3] > Version(LATEST).release:
        raise FlagError(f"SGLang {text} is newer than the releases kvscope models (up to {LATEST})",
                        field="--engine-version",
                        fix=f"the nearest modelled release is {LATEST}: pass --engine-version {LATEST}, or add "
                            f"--allow-unmodelled-version to plan it as {LATEST} with a warning")
    return v


def nearest_modelled(text: str | None) -> str:
    """The modelled release closest to ``text`` (``--allow-unmodelled-version``); FlagError when
    ``text`` is not a version at all."""
    if text is None or text in ("", "latest"):
        return LATEST
    try:
        v = Version(text.lstrip("v"))
    except InvalidVersion:
        return str(parse_version(text))  # raises the one-line "not a version"
    if v < Version(OLDEST):
        return KNOWN_VERSIONS[0]
    return LATEST if v.release[:3] > Version(LATEST).release else str(v)


@lru_cache(maxsize=128)
def _build(v: Version) -> SGLangRelease:
    return SGLangRelease(version=v, **{name: trait.value(v) for name, trait in TRAITS.items()})


def release(version: "str | Version | SGLangRelease | None" = None) -> SGLangRelease:
    """The release value for a version text (or a ``Version``; a release is returned as is)."""
    if isinstance(version, SGLangRelease):
        return version
    v = version if isinstance(version, Version) else parse_version(version)
    return _build(v)


def era_spec(name: str, value: str) -> str:
    """The specifier of the row of Era ``name`` whose value is ``value`` (e.g. a hook's ``versions``)."""
    era = TRAITS[name]
    if not isinstance(era, Era):
        raise TypeError(f"{name} is not an Era")
    return era.spec_of(value)


def _check_table() -> None:
    names = [f.name for f in dataclasses.fields(SGLangRelease) if f.name != "version"]
    if names != list(TRAITS):
        raise AssertionError(f"SGLangRelease fields and TRAITS differ: {set(names) ^ set(TRAITS)}")


_check_table()
