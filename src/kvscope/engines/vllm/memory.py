"""vLLM V1 startup memory: requested memory, the profile terms, available KV memory, blocks.

Sequence (``vllm/v1/worker/gpu_worker.py`` and ``vllm/v1/engine/core.py`` @ v0.33.0, spec §1):
init (CUDA context, NCCL, custom all-reduce) → ``init_snapshot`` + ``request_memory`` → load weights
("Model loading took") → ``determine_available_memory`` (profile run at ``max_num_batched_tokens``,
CUDA-graph estimate) → ``get_kv_cache_configs`` (groups, num_blocks = min over workers, admission
check) → KV allocation → CUDA graph capture (after KV, outside the budget unless estimated).

The profile terms are measurements in vLLM; here they are **estimates** from the model spec with
stated bounds (calibrated on the H100 llm-d sweep logs in ``shared/logs``), each replaceable by a
measured figure (``VllmMeasured``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...hardware.gpus import GPU
from ...hardware.overhead import NCCL_INIT_BYTES_EST, fabric_class
from ...model.spec import ModelSpec
from ...units import GiB
from . import deepseek_v4 as dsv4
from . import kv_cache as kvc
from .args import VllmArgs
from .kv_cache import ModelKV, WorkerKV, get_pp_indices
from .release import VersionTraits


@dataclass(frozen=True)
class Estimate:
    """A named figure: value with low/high bounds and where it came from."""

    name: str
    bytes: int
    low_bytes: int
    high_bytes: int
    estimated: bool
    source: str


def measured(name: str, value_bytes: int, source: str = "measured (given)") -> Estimate:
    return Estimate(name, value_bytes, value_bytes, value_bytes, False, source)


# ---------------------------------------------------------------------------------------------
# Budget


def requested_memory_bytes(total_bytes: int, util: float, traits: VersionTraits) -> int | float:
    """``request_memory``: ``math.ceil(total * util)`` (vllm/v1/worker/utils.py @ v0.14.1+);
    a float ``total * util`` before (gpu_worker.py ``init_device`` @ v0.10.2 / v0.11.0)."""
    if traits.requested_memory_ceil:
        return math.ceil(total_bytes * util)
    return total_bytes * util


def request_memory_error(free_bytes: int, total_bytes: int, util: float, requested: int | float,
                         traits: VersionTraits, device: str = "cuda:0") -> str:
    """"Free memory on device ... is less than desired GPU memory utilization" (utils.py @ v0.19.0
    ``request_memory``; inline without the device in gpu_worker.py @ v0.10.2 / v0.11.0)."""
    dev = f" {device}" if traits.requested_memory_ceil else ""
    return (f"Free memory on device{dev} "
            f"({kvc.format_gib(free_bytes)}/{kvc.format_gib(total_bytes)} GiB) on startup "
            f"is less than desired GPU memory utilization "
            f"({util}, {kvc.format_gib(requested)} GiB). Decrease GPU memory "
            f"utilization or reduce GPU memory used by other processes.")


def request_memory(total_bytes: int, free_bytes: int, util: float, traits: VersionTraits,
                   external_weight_bytes: int = 0, device: str = "cuda:0") -> tuple[int | float | None, str | None]:
    """(the worker's budget, None) or (None, the ValueError text) of ``request_memory``
    (vllm/v1/worker/utils.py @ v0.19.1 … v0.33.0; inline in gpu_worker.py ``init_device`` @
    v0.10.1.1 / v0.11.0). From v0.33.0 weights held by another process
    (``get_external_weight_memory``) come out of the budget: ``engine = ceil(total x util) -
    external``, an error when that is <= 0 or above the free memory."""
    requested = requested_memory_bytes(total_bytes, util, traits)
    if external_weight_bytes > 0 and traits.external_weight_budget:
        engine = requested - external_weight_bytes
        fg = kvc.format_gib
        if engine <= 0:
            return None, (f"Externally held weights on device {device} ({fg(external_weight_bytes)}/"
                          f"{fg(total_bytes)} GiB) exceed the desired GPU memory utilization ({util}, "
                          f"{fg(requested)} GiB). Increase GPU memory utilization or reduce GPU memory used "
                          "by other processes.")
        if free_bytes < engine:
            return None, (f"Free memory on device {device} ({fg(free_bytes)}/{fg(total_bytes)} GiB) on startup "
                          "is less than the engine's budget after excluding external process's weights "
                          f"({util}, {fg(engine)} GiB). Decrease GPU memory utilization or reduce GPU memory "
                          "used by other processes.")
        return engine, None
    if free_bytes < requested:
        return None, request_memory_error(free_bytes, total_bytes, util, requested, traits, device)
    return requested, None


# ---------------------------------------------------------------------------------------------
# Profile-term estimates (vLLM measures these; kvscope models them)

# Bytes per logit element at the sampler peak of the dummy sampler run, fit to the H100 logs:
# Llama-3.1-8B 1.89 GiB, Qwen3-14B (0.17) 2.23 GiB, gpt-oss-20b 2.87 GiB at 1024 dummy requests
# give 14.7-15.0 B/logit (fp32 logits + triton top-k/top-p buffers, topk_topp_sampler.py @ v0.17.0).
SAMPLER_BYTES_PER_LOGIT = 14.9
# Before v0.17.0 top-k/top-p sorted the full vocab (values fp32 + int64 indices + scatter copy):
# Qwen3-14B at 0.16.0 printed 5.64 GiB -> 38.4 B/logit.
SAMPLER_SORT_BYTES_PER_LOGIT = 38.4
# Forward peak per token, in hidden-size units of the model dtype, beyond the MLP/MoE buffers.
# Dense: at the MLP peak of a decoder layer the residual, the normed input and the MLP output are live
# next to gate_up (2I/tp) and the activation output (I/tp): 3 (mechanism; held out: the V0 RTX 3090
# Llama-3.1-8B logs of vllm#10517, 2.07 GiB at 20,000 tokens and 2.99 GiB at 29,000, estimated 2.06 / 2.99).
# Fused MoE: more hidden-sized buffers (topk ids/weights, sorted-token and dtype copies) next to the
# expert caches: 7 (fit, in-sample: Mixtral TP2 1.21 GiB, vLLM 0.19 llm-d log). Estimated.
FORWARD_HIDDEN_COPIES_DENSE = 3
FORWARD_HIDDEN_COPIES_MOE = 7


# non_torch_increase at TP1 (estimated): logs 0.13 (Qwen3-14B, H100 v0.16/0.17), 0.25 (Llama-3.1-8B,
# H100 v0.19), 0.16 / 0.35 (V0 H100 / RTX 3090).
NON_TORCH_BASE_BYTES_EST = int(0.2 * GiB)
# Extra non-torch memory at the first large all-reduce with TP/PP > 1, per fabric class (estimated):
# NVLink fit on the training log lld-vllm-gptoss20b-h100-tp2 (2.07 - 0.2 = 1.87 GiB; held out: Mixtral
# TP2 2.07, vllm#10511 TP2 - TP1 = 1.79); PCIe: the PCIe NCCL figure of hardware/overhead.py (0.04 GiB,
# fit on the L4 TP4 SGLang log; held out: vllm#14447 RTX 3090 TP4 0.20 GiB in all).
NON_TORCH_NCCL_FIRST_USE_BYTES_EST = {"nvlink": int(1.87 * GiB), "pcie": NCCL_INIT_BYTES_EST["pcie"]}


def vocab_padded(vocab: int) -> int:
    """``pad_vocab_size(vocab, 64)`` (vllm/model_executor/layers/vocab_parallel_embedding.py)."""
    return -(-vocab // 64) * 64


VLLM_FUSED_MOE_CHUNK_SIZE = 16 * 1024  # envs.py default @ v0.14.1 … v0.17.0


def _round_256(n: int) -> int:
    return -(-n // 256) * 256


def triton_moe_workspace_bytes(spec: ModelSpec, a: VllmArgs) -> int:
    """The fused-MoE workspace the profile run leaves allocated: exact where vLLM runs unquantized MoE
    with ``TritonExperts`` in the modular kernel (``traits.triton_moe_workspace``, v0.14 … v0.19, no
    DP), else 0.

    ``TritonExperts.workspace_shapes`` (fused_moe.py @ v0.14.1 / v0.19.1): workspace13 ``(M, topk,
    max(N/2, K))``, workspace2 ``(M, topk, max(N, K))`` with ``N = 2 x moe_intermediate / tp`` (w13)
    and ``K = hidden``, in the activation dtype; ``FusedMoEModularKernel._allocate_buffers``
    (modular_kernel.py) takes both from ``current_workspace_manager().get_simultaneous`` (each
    rounded up to 256 bytes, v1/worker/workspace.py), the output ``(M, K)`` aliased into
    workspace13; with more than one chunk (M > ``VLLM_FUSED_MOE_CHUNK_SIZE``, v0.14 … v0.17) the
    workspaces are per chunk and the ``(M, K)`` output is a third buffer. The manager keeps the buffer
    after the forward (it only grows; ``lock_workspace`` after warm-up), so it is still allocated when
    the dummy sampler runs."""
    t = a.traits
    if (not t.triton_moe_workspace or spec.moe is None or "moe" not in spec.ffn_types or spec.quant.is_quantized
            or a.dp > 1):
        return 0
    e, k, h = spec.dtype_bytes, spec.moe.num_experts_per_tok, spec.hidden_size
    n = 2 * -(-spec.moe.moe_intermediate_size // a.tp)
    m_full = a.max_num_batched_tokens
    m = min(m_full, VLLM_FUSED_MOE_CHUNK_SIZE) if t.moe_workspace_chunked else m_full
    ws13, ws2, out = m * k * max(n // 2, h) * e, m * k * max(n, h) * e, m_full * h * e
    if m == m_full and ws13 >= out:
        return _round_256(ws13) + _round_256(ws2)
    return _round_256(ws13) + _round_256(ws2) + _round_256(out)


def activation_peak_estimate(spec: ModelSpec, a: VllmArgs, *, is_last_pp_stage: bool = True) -> Estimate:
    """``torch_peak_increase`` of ``profile_run``: max(forward at ``max_num_batched_tokens``,
    dummy sampler at ``min(max_num_seqs, max_num_batched_tokens)`` requests x vocab) plus the hidden
    states held across both (gpu_model_runner.py ``profile_run`` / ``_dummy_sampler_run`` @ v0.19.0).

    Forward: dense MLP gate_up + act (3 x I/tp per token) plus ``FORWARD_HIDDEN_COPIES_DENSE`` x H,
    or fused-MoE caches (topk x (2I + I)/tp + topk x H per token) plus ``FORWARD_HIDDEN_COPIES_MOE`` x H.
    The same shape holds for V0's ``profile_run`` (``max_num_seqs`` dummy sequences, sampler over
    the vocab with the sorting top-k/top-p: vllm/worker/model_runner.py @ v0.6.4).
    Where the fused-MoE workspace outlives the forward (:func:`triton_moe_workspace_bytes`, exact) it
    adds to the sampler phase.
    Estimated; bounds -30 % / +50 % (residuals on the logs: docs/overheads-accuracy.md).
    """
    n = a.max_num_batched_tokens
    e = spec.dtype_bytes
    h = spec.hidden_size
    tp = a.tp
    if spec.moe is not None and "moe" in spec.ffn_types:
        inter = -(-spec.moe.moe_intermediate_size // tp)
        k = spec.moe.num_experts_per_tok
        ffn = k * (3 * inter + h) * e
        copies = FORWARD_HIDDEN_COPIES_MOE
    else:
        inter = -(-spec.intermediate_size // tp)
        ffn = 3 * inter * e
        copies = FORWARD_HIDDEN_COPIES_DENSE
    forward = n * (ffn + copies * h * e)
    held = n * h * e
    sampler = 0
    if is_last_pp_stage:
        num_reqs = min(a.max_num_seqs, n)
        per_logit = SAMPLER_SORT_BYTES_PER_LOGIT if a.traits.sampler_sorts_vocab else SAMPLER_BYTES_PER_LOGIT
        sampler = int(num_reqs * vocab_padded(spec.vocab_size) * per_logit) + held
    workspace = triton_moe_workspace_bytes(spec, a) if sampler else 0
    sampler += workspace  # the fused-MoE workspace the forward left allocated (exact)
    peak = max(forward, sampler)
    src = ("estimated: max(forward %.2f GiB at %d tokens, sampler %.2f GiB at %d requests x %d vocab)"
           % (forward / GiB, n, sampler / GiB, min(a.max_num_seqs, n), vocab_padded(spec.vocab_size)))
    if workspace:
        src += " (sampler incl. the fused-MoE workspace %.2f GiB, exact)" % (workspace / GiB)
    return Estimate("activation_peak", peak, int(peak * 0.7), int(peak * 1.5), True, src)


def non_torch_estimate(gpu: GPU, a: VllmArgs) -> Estimate:
    """``non_torch_increase`` since ``init_snapshot`` (taken after ``init_worker_distributed_environment``,
    gpu_worker.py ``init_device`` @ v0.19.0), estimated.

    TP1: kernels loaded lazily by the profile run (``CUDA_MODULE_LOADING=LAZY``) and library
    workspaces outside torch's allocator: ``NON_TORCH_BASE_BYTES_EST`` (logs: 0.13-0.35 GiB).
    TP > 1 (or DP): plus the NCCL buffers that appear at the first large all-reduce (algorithms and
    protocols connected on first use, ``NCCL_RUNTIME_CONNECT``; NVLS on NVSwitch parts, which vLLM
    leaves enabled): ``NON_TORCH_NCCL_FIRST_USE_BYTES_EST`` per fabric (hardware/overhead.py classes).
    Pipeline stages without TP never all-reduce: their send/recv adds no such buffers (llm-d planner
    v0.19.0 H100 logs, Llama-3.1-8B PP2 and PP4: "non-torch forward increase memory: 0.07GiB" on every
    stage, the TP1 range), so PP-only layouts get the TP1 figure.
    Held-out errors in docs/overheads-accuracy.md."""
    base = NON_TORCH_BASE_BYTES_EST
    if a.tp == 1 and a.dp == 1:
        return Estimate("non_torch", base, int(0.05 * GiB), int(0.4 * GiB), True,
                        "estimated: 0.2 GiB lazily loaded kernels + workspaces (logs: 0.13-0.35 GiB at TP1, "
                        "0.07 per stage at PP2/PP4)")
    fab = fabric_class(gpu)
    nccl = NON_TORCH_NCCL_FIRST_USE_BYTES_EST[fab]
    total = base + nccl
    return Estimate("non_torch", total, int(total * 0.5), int(total * 1.5), True,
                    f"estimated: 0.2 GiB kernels/workspaces + NCCL first-use buffers {nccl / GiB:.2f} GiB ({fab}; "
                    "fit: H100 NVLink TP2 gpt-oss-20b log / L4 PCIe SGLang init)")


def cudagraph_estimate(spec: ModelSpec, a: VllmArgs) -> Estimate:
    """``profile_cudagraph_memory`` (gpu_model_runner.py @ v0.20.2 / v0.33.0): first capture +
    per-graph cost x (captures - 1). H100 logs: 0.84 GiB (Llama-3.1-8B), 0.82 (Mixtral TP2),
    1.09 (gpt-oss-20b TP2). Estimated flat 0.9 GiB, 0 with --enforce-eager."""
    if a.enforce_eager:
        return Estimate("cudagraph", 0, 0, 0, False, "--enforce-eager: no CUDA graphs")
    return Estimate("cudagraph", int(0.9 * GiB), int(0.5 * GiB), int(1.6 * GiB), True,
                    "estimated: 0.9 GiB (H100 logs 0.82-1.09 GiB)")


# ---------------------------------------------------------------------------------------------
# Available KV memory


@dataclass(frozen=True)
class AvailableKV:
    """``determine_available_memory``'s result for one PP stage."""

    requested_bytes: int | float
    non_kv_cache_bytes: int
    cudagraph_applied_bytes: int
    available_kv_cache_bytes: int
    formula: str


def available_kv_cache_bytes(requested: int | float, weights: int, activation_peak: int, non_torch: int,
                             cudagraph: int, traits: VersionTraits, kv_cache_memory_bytes: int | None = None,
                             *, torch_unreleased_bytes: int = 0) -> AvailableKV:
    """``determine_available_memory``.

    Classic (<= v0.26): ``requested - (non_torch_increase + torch_peak_increase + weights) -
    cudagraph_applied`` (gpu_worker.py + utils/mem_utils.py ``memory_profiling`` @ v0.19.1 / v0.20.2 /
    v0.26.0; utils/__init__.py @ v0.10.1.1 / v0.11.0). From v0.27.0 ``non_kv = total_consumed +
    transient_peak_headroom`` (mem_utils.py @ v0.28.0 / v0.33.0 ``memory_profiling``): the drop in
    driver free memory since ``init_snapshot`` plus ``peak - allocated`` after the profile run. With
    the same parts this equals the classic sum (tensors the profile run keeps cancel out) plus
    ``torch_unreleased_bytes``: memory torch's allocator still holds after ``empty_cache`` beyond its
    live tensors (fragmentation), which the classic formula does not see and ``total_consumed`` does.
    The CUDA-graph estimate is subtracted only where ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
    defaults to 1 (envs.py @ v0.20.2+). ``--kv-cache-memory-bytes`` skips all of it (returned
    unchanged; gpu_worker.py @ v0.11.0+).
    """
    if kv_cache_memory_bytes:
        return AvailableKV(requested, 0, 0, int(kv_cache_memory_bytes), "kv_cache_memory_bytes (profiling skipped)")
    non_kv = weights + activation_peak + non_torch
    if traits.total_consumed_formula:
        non_kv += torch_unreleased_bytes
    applied = cudagraph if traits.cudagraph_estimate_applied else 0
    avail = int(requested - non_kv - applied)
    if traits.total_consumed_formula:
        formula = "requested - (total_consumed + transient_peak_headroom) - cudagraph_estimate"
    elif traits.cudagraph_estimate_applied:
        formula = "requested - (weights + torch_peak_increase + non_torch_increase) - cudagraph_estimate"
    else:
        formula = "requested - (weights + torch_peak_increase + non_torch_increase)"
    return AvailableKV(requested, non_kv, applied, avail, formula)


# ---------------------------------------------------------------------------------------------
# Workers, layouts, KV plan


def kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str) -> int:
    """``--kv-cache-dtype auto`` = the model dtype (vLLM does not read the checkpoint's
    kv_cache_quant_algo for ``auto`` in the V1 spec path); fp8 variants are 1 byte."""
    if kv_cache_dtype == "auto":
        return spec.dtype_bytes
    return kvc.KV_CACHE_DTYPE_BYTES[kv_cache_dtype]


def cache_layout(spec: ModelSpec, a: VllmArgs, max_model_len: int) -> kvc.CacheLayout:
    """Block size after the hybrid-mamba alignment and the mamba page padding."""
    e = kv_dtype_bytes(spec, a.kv_cache_dtype)
    block = a.block_size
    padded = None
    mamba_block = None
    mamba_cache_mode = "align" if (spec.mamba is not None and a.enable_prefix_caching) else "none"
    num_spec = a.num_speculative_tokens if a.speculative_method in ("mtp", "eagle", "eagle3", "qwen3_next_mtp") else 0
    if spec.mamba is not None and spec.num_kv_layers > 0:
        # kv_cache.hybrid_kernel_block_alignment: 16 up to v0.19 (HybridAttentionMambaModelConfig,
        # models/config.py: 16 for every model @ v0.10.2 / v0.11.0, MLA 64 @ v0.16.0 … v0.19.1);
        # max(backend's smallest kernel block, block_size) from v0.20.2; MLA at least 128 and the
        # backends' common kernel block in v0.33.0 (platforms/interface.py ``_align_hybrid_block_size``).
        # MLA's backend is FlashMLA: ``get_supported_kernel_block_sizes() -> [64]``
        # (v1/attention/backends/mla/flashmla.py @ v0.20.2 / v0.33.0); FlashAttention MultipleOf(16).
        # [MLA + mamba: no catalog model, not conformance-tested; v0.11.0 sizes the MLA 1-token page
        # as a FullAttentionSpec (K and V), not modelled]
        if spec.is_mla:
            attn_1 = kvc.mla_page_size_bytes(1, spec.kv_lora_rank or 0, spec.qk_rope_head_dim or 0, e, a.kv_cache_dtype)
        else:
            attn_1 = kvc.attention_page_size_bytes(1, kvc.num_kv_heads_per_rank(spec, a.tp), spec.head_dim, e)
        align, backend_align = kvc.hybrid_kernel_block_alignment(
            a.traits, a.block_size, spec.is_mla, backend_min_kernel_block=64 if spec.is_mla else 16)
        mamba_page = kvc.mamba_page_size_bytes(spec, a.tp, spec.dtype_bytes, num_spec)
        block = kvc.hybrid_attention_block_size(attn_1, mamba_page, a.block_size, align, backend_align)
        attn_page = block * attn_1
        padded = attn_page if attn_page != mamba_page else None
        mamba_block = block if mamba_cache_mode == "align" else max_model_len
    return kvc.CacheLayout(
        block_size=block, kv_dtype_bytes=e, cache_dtype=a.kv_cache_dtype, tp=a.tp,
        mamba_page_padded=padded, mamba_block_size=mamba_block, num_speculative_tokens=num_spec,
        is_chunked_local=spec.model_type in ("llama4", "llama4_text"),
    )


def scheduler_view(spec: ModelSpec, a: VllmArgs, max_model_len: int) -> kvc.SchedulerView:
    """The ``VllmConfig`` figures the KV specs read, as the release reads them
    (:func:`kv_cache.scheduler_view_for`: ``max_num_batched_tokens`` as the sliding-window /
    chunked in-flight allowance before v0.26, one mamba page and no speculative blocks before v0.19).

    From v0.26 ``max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens``
    (vllm/config/vllm.py @ v0.26.0+; async scheduling on by default: 2 batches at PP 1, PP batches
    otherwise); ``mamba_cache_mode`` align with prefix caching; speculative blocks per mamba state."""
    in_flight = a.max_num_batched_tokens * (2 if a.pp == 1 else a.pp)
    mode = "align" if (spec.mamba is not None and a.enable_prefix_caching) else "none"
    num_spec_blocks = 0
    if spec.mamba is not None and a.num_speculative_tokens and a.speculative_method:
        num_spec_blocks = a.num_speculative_tokens
    view = kvc.SchedulerView(max_model_len=max_model_len, max_num_batched_tokens=a.max_num_batched_tokens,
                             in_flight_tokens=in_flight, mamba_cache_mode=mode,
                             num_speculative_blocks=num_spec_blocks)
    return kvc.scheduler_view_for(view, a.traits)


def model_kv(spec: ModelSpec, a: VllmArgs, max_model_len: int, extra_layer_specs: dict | None = None) -> ModelKV:
    """Global groups (``get_kv_cache_groups`` over the merged specs of all workers), then each PP
    stage's projection and bytes per block."""
    if spec.dsv4 is not None:  # DeepSeek-V4: packed SWA + compressed-MLA groups (deepseek_v4.py)
        return dsv4.model_kv(spec, a, max_model_len)
    layout = cache_layout(spec, a, max_model_len)
    specs = kvc.layer_specs(spec, layout)
    if extra_layer_specs:
        specs = {**specs, **extra_layer_specs}
    groups, padding = kvc.get_kv_cache_groups(specs, a.traits)
    workers = []
    for r in range(a.pp):
        lo, hi = get_pp_indices(spec.num_hidden_layers, r, a.pp)
        own = {i for i in specs if lo <= i < hi or (i >= spec.num_hidden_layers and r == a.pp - 1)}
        proj = kvc.project_to_worker(groups, own)
        workers.append(WorkerKV(r, (lo, hi), kvc.make_plan(proj, padding)))
    return ModelKV(layout, groups, padding, tuple(workers))


# ---------------------------------------------------------------------------------------------
# Capacity from available bytes (the measured-mode core; also what the doctor calls)


@dataclass(frozen=True)
class KVCapacity:
    """Outcome of ``get_kv_cache_configs`` + ``update_kv_cache_capacity`` for one DP engine."""

    available_kv_cache_bytes: int  # min over workers, as passed to the planner
    num_gpu_blocks: int
    kv_cache_tokens: int  # "GPU KV cache size: N tokens"
    max_concurrency: float  # "Maximum concurrency for L tokens per request: X"
    max_model_len: int  # after auto-fit
    bytes_per_block: int
    needed_memory_bytes: int
    check_memory_bytes: int  # available (minus one null block from v0.30)
    error: str | None
    estimated_max_model_len: int | None


def capacity_from_available(available_per_worker: list[int], kv: ModelKV, spec: ModelSpec, a: VllmArgs,
                            max_model_len: int) -> KVCapacity:
    """``get_kv_cache_configs`` for one DP engine, given each PP stage's available KV bytes:
    :func:`kv_cache.kv_cache_configs` (the conformance-tested per-release order: override fold,
    null block, auto-fit, admission check, min over workers, capacity log) on the stages' plans and
    the release's :func:`scheduler_view`. V0 (< 0.8) has no V1 admission check: its blocks are the
    same min over workers, its capacity and error are V0's (:func:`_v0_capacity`)."""
    t = a.traits
    plans = [w.plan for w in kv.workers]
    cfg = scheduler_view(spec, a, max_model_len)
    res = kvc.kv_cache_configs(plans, available_per_worker, cfg, t,
                               num_gpu_blocks_override=a.num_gpu_blocks_override,
                               cache_block_size=kv.layout.block_size,
                               auto_fit=a.max_model_len_auto and not t.is_v0)
    avail = kvc.planner_available_bytes(plans, available_per_worker, t, a.num_gpu_blocks_override)
    cap = KVCapacity(
        available_kv_cache_bytes=min(avail), num_gpu_blocks=res.num_blocks, kv_cache_tokens=res.kv_cache_tokens,
        max_concurrency=res.max_concurrency, max_model_len=res.max_model_len,
        bytes_per_block=plans[0].bytes_per_block, needed_memory_bytes=max(res.needed_memory_bytes, default=0),
        check_memory_bytes=min(res.check_memory_bytes, default=min(avail)), error=res.error,
        estimated_max_model_len=res.estimated_max_model_len,
    )
    return _v0_capacity(cap, plans[0], t) if t.is_v0 else cap


def _v0_capacity(cap: KVCapacity, plan0: kvc.KVCachePlan, traits: VersionTraits) -> KVCapacity:
    """V0 (spec §11, vllm/worker/worker.py + executor/executor_base.py @ v0.6.6.post1): "# GPU
    blocks" = the min over workers, capacity ``num_gpu_blocks x block_size`` tokens, concurrency
    ``num_gpu_blocks x block_size / max_model_len``, errors from ``raise_if_cache_size_invalid``."""
    if plan0.is_attention_free:
        return replace(cap, error=None, estimated_max_model_len=None)
    blocks, bs, mml = cap.num_gpu_blocks, plan0.min_block_size, cap.max_model_len
    error = None
    if blocks <= 0:
        error = kvc.no_available_memory_error(traits)
    elif blocks * bs < mml:
        error = kvc.v0_cache_size_error(mml, blocks, bs)
    return replace(cap, kv_cache_tokens=blocks * bs, max_concurrency=blocks * bs / mml, error=error,
                   estimated_max_model_len=None)


def mamba_blocks_check(kv: ModelKV, a: VllmArgs, num_blocks: int) -> tuple[str | None, str | None]:
    """(error, warning) of the mamba-blocks vs ``max_num_seqs`` check with FULL decode CUDA graphs:
    v0.20.2+ raises (vllm/config/compilation.py), v0.19.0 caps the capture sizes with a warning."""
    if a.enforce_eager or not any(w.plan.has_mamba_layers for w in kv.workers):
        return None, None
    if a.max_num_seqs <= num_blocks:
        return None, None
    if a.traits.mamba_blocks_error:
        return kvc.mamba_max_num_seqs_error(a.max_num_seqs, num_blocks), None
    if a.traits.mamba_blocks_cap_warning:
        return None, (f"Capping cudagraph capture sizes to fit Mamba cache blocks ({num_blocks} blocks "
                      f"available) (max_num_seqs={a.max_num_seqs})")
    return None, None


__all__ = [
    "Estimate", "AvailableKV", "KVCapacity", "ModelKV", "WorkerKV", "activation_peak_estimate",
    "available_kv_cache_bytes", "cache_layout", "capacity_from_available", "cudagraph_estimate",
    "get_pp_indices", "kv_dtype_bytes", "mamba_blocks_check", "model_kv", "non_torch_estimate",
    "request_memory", "request_memory_error", "requested_memory_bytes", "scheduler_view",
]
