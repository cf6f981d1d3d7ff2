"""The typed records of an SGLang plan: the per-rank sizing decision and the plan-wide extra figures.

Field names are the documented JSON keys, in their JSON order (``Record.to_dict``). GiB figures are
floats as SGLang computes them (bytes / 2**30); byte figures are integers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...record import Record


@dataclass(frozen=True)
class SGLangDecision(Record):
    """One rank's sizing decision (``RankTimeline.decision`` of an SGLang plan)."""

    pre_model_load_gib: float  # pre_model_load_memory: MIN over ranks of free memory before the weights (GiB)
    pre_model_load_bytes: int  # the same, bytes
    available_gpu_gib: float  # free memory after the weights (MIN over ranks, float32 all-reduce), GiB
    available_gpu_bytes: int  # the same, bytes (MIN over ranks)
    local_free_after_load_bytes: int  # this rank's free memory after the weights, bytes
    mem_fraction_static: float  # the effective fraction the profile uses (after the aiter x0.85)
    mem_fraction_static_source: str  # "user" | "default"
    reserved_mem_mib: float | None  # the default formula's reserve, MiB (None: the user set the fraction)
    vlm_factor: float | None  # multimodal factor applied to the default fraction (None: not applied)
    slack_gib: float  # pre x (1 - mem_fraction_static), GiB: what the profile leaves outside the pools
    mm_reservation_gib: float  # multimodal runtime reservation (0.5.18+), GiB
    mamba_state_gib: float  # the mamba / linear-attention state pool carved from the budget, GiB
    max_mamba_cache_size: int | None  # state slots per DP worker (None: no state pool)
    rest_memory_gib: float  # the KV budget: available - slack - mm - mamba state, GiB
    rest_memory_bytes: int  # int(rest x 2**30)
    cell_size: int  # bytes per token of max_total_num_tokens on this rank's PP stage
    cell_formula: str  # how cell_size is made (heads x dims x layers, DSA, draft share ...)
    kv_cache_dtype: str  # the KV dtype name SGLang uses (e.g. bfloat16, float8_e4m3fn)
    profiled_tokens: int  # this stage's tokens before page rounding and caps (may be negative, classic)
    page_size: int  # tokens per KV page after the backend's constraints
    max_total_tokens_flag: int | None  # --max-total-tokens as given
    max_total_num_tokens: int | None  # the final token pool (None: the start fails)
    swa_tokens: int | None  # the sliding-window pool's tokens (hybrid SWA / DeepSeek-V4), else None
    max_num_reqs: int | None  # ReqToTokenPool.size (None: the start fails)
    max_running_requests: int | None  # per DP worker (None: the start fails)
    req_to_token_bytes: int  # the req_to_token int32 table, bytes
    kv_buffer_bytes: int  # the target's KV buffers as allocated (+1 page), bytes
    draft_kv_bytes: int  # the draft's KV buffers (classic EAGLE / MTP), bytes
    runtime_headroom_bytes_estimated: int | None  # slack - req_to_token - graphs - activations - classic draft
    error: str | None  # the engine's error text when the start fails at KV sizing


@dataclass(frozen=True)
class SGLangPlanExtra(Record):
    """Plan-wide figures of an SGLang plan (``Timeline.extra``; top-level JSON keys)."""

    mem_fraction_static: float  # the effective fraction (after the aiter x0.85)
    mem_fraction_static_source: str  # "user" | "default"
    mem_fraction_static_flag: float  # the fraction before the aiter factor (the flag's value or the default)
    attention_backend: str  # the attention backend SGLang runs
    attention_backend_source: str  # "user" | "default" | "model override"
    attention_backend_reason: str  # one line: why this backend
    page_size_source: str  # "user" | "default" | why the backend forced it
    aiter_fraction_factor: float | None  # 0.85 when aiter scales the fraction (context > 8192), else None
    min_mem_fraction_static: float | None  # the smallest --mem-fraction-static that leaves a KV page (flag units)
    min_effective_mem_fraction_static: float | None  # the same as an effective fraction
    engine_min_mem_fraction_static: float  # the engine's own 1 - available/pre
    tokens_per_0_01_mem_fraction: int  # KV tokens one +0.01 of the fraction buys
    context_len: int  # --context-length, else the model's derived context length
    page_size: int  # tokens per KV page
    kv_cache_dtype: str  # the KV dtype name
    chunked_prefill_size: int  # resolved chunked_prefill_size
    cuda_graph_max_bs: int | None  # resolved decode CUDA-graph max batch size (None: the runner's own)
    pre_model_load_bytes: int  # MIN over ranks, bytes
    available_gpu_bytes: int  # MIN over ranks after the weights, bytes
    rest_memory_bytes: int  # the KV budget, bytes
    swa_tokens: int | None  # sliding-window pool tokens, else None
    req_to_token_bytes: int  # the req_to_token table, bytes
    draft_weights_bytes: int  # speculative draft weights per rank, bytes (0: none)
    custom_all_reduce: bool  # SGLang's custom all-reduce is enabled
    tp: int  # --tp
    pp: int  # --pp
    dp: int  # --dp
    enable_dp_attention: bool  # --enable-dp-attention
    weights_estimated: bool  # the weights phase is estimated (no --post-load-free-gib, no safetensors headers)
    measured_inputs: bool  # free memory was given (--pre-load-free-gib / --post-load-free-gib)
