"""Decode step time: memory traffic + all-reduces + a fixed per-step overhead.

``T_step = max(T_mem, T_compute) + N_coll * t_AR(hidden * tokens * 2 B) + T_fixed``
(shared/specs/perf.md §3.1). ``T_mem = bytes / (eta_bw * BW_peak)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..model.spec import ModelSpec
from .allreduce import AllReduceEstimate, Fabric, allreduce, allreduce_count
from .traffic import (KVTraffic, WeightTraffic, attention_flops_per_token, expected_distinct_experts,
                      expert_read_bytes)

DEFAULT_BANDWIDTH_EFFICIENCY = 0.7
BANDWIDTH_EFFICIENCY_SOURCE = (
    "[E] default 0.70 of peak: 'well-optimized CUDA stacks commonly run in the 70 to 85 percent range' "
    "(open-source-ai.tech glossary, a rule of thumb); W4A16 Marlin and small expert GEMMs at M=1 sit at "
    "the low end (shared/specs/perf.md §3.1)")
DEFAULT_FLOPS_EFFICIENCY = 0.5
FLOPS_EFFICIENCY_SOURCE = "[E] default 0.5 of dense peak (shared/specs/perf.md §3.2: 0.4-0.6, no verified source)"
DEFAULT_FIXED_OVERHEAD_S = 1.0e-3
FIXED_OVERHEAD_SOURCE = ("[E] 1 ms: sampling, router/top-k, >1,000 small kernels, scheduler/CPU with CUDA graphs "
                         "(0.5-1.5 ms, shared/specs/perf.md §3.1)")


@dataclass(frozen=True)
class Hardware:
    """The per-GPU figures the step model needs, each with its source (from the GPU catalog)."""

    gpu_key: str
    mem_bandwidth_gbps: float
    tflops: float  # dense tensor TFLOPS of the GEMM dtype the kernels run
    tflops_dtype: str  # "bf16" | "fp8"
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StepSettings:
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    bandwidth_efficiency_source: str = BANDWIDTH_EFFICIENCY_SOURCE
    flops_efficiency: float = DEFAULT_FLOPS_EFFICIENCY
    flops_efficiency_source: str = FLOPS_EFFICIENCY_SOURCE
    fixed_overhead_s: float = DEFAULT_FIXED_OVERHEAD_S
    fixed_overhead_source: str = FIXED_OVERHEAD_SOURCE
    communicator: str = "nccl"  # "nccl" | "custom" (after the engine's choice)
    allreduce_latency_us: float | None = None  # measured override for every all-reduce of the step

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DecodeStep:
    """One forward of ``batch`` sequences x ``tokens_per_seq`` tokens (1 = decode, k = spec verify)."""

    batch: int
    tokens_per_seq: int
    context_tokens: int
    experts_touched_per_layer: float
    attn_weight_bytes: int
    dense_weight_bytes: int  # dense MLP + shared experts
    other_weight_bytes: int  # router, norms, lm_head
    expert_weight_bytes: int
    weight_bytes_per_gpu_per_step: int
    kv_bytes_per_gpu_per_step: int
    memory_time_s: float
    compute_time_s: float
    bound: str  # "memory" | "compute"
    allreduce_count: int
    allreduce: AllReduceEstimate
    allreduce_time_s: float
    fixed_overhead_s: float
    step_time_s: float
    decode_tokens_per_s: float  # aggregate over the batch (tokens_per_seq = 1)
    per_stream_tokens_per_s: float
    estimated: bool = True

    @property
    def bytes_per_gpu_per_step(self) -> int:
        return self.weight_bytes_per_gpu_per_step + self.kv_bytes_per_gpu_per_step

    def to_dict(self) -> dict:
        d = asdict(self)
        d["allreduce"] = self.allreduce.to_dict()
        d["bytes_per_gpu_per_step"] = self.bytes_per_gpu_per_step
        d["allreduce_latency_us"] = self.allreduce.latency_us
        return d


def forward_flops(spec: ModelSpec, w: WeightTraffic, num_tokens: int, context_tokens: int, attn_tp: int) -> float:
    """FLOPs on one rank for ``num_tokens`` tokens: 2 x active parameters + attention [E]."""
    active = w.dense_numel + w.num_moe_layers * w.num_experts_per_tok * w.expert_numel_per_expert
    return 2.0 * active * num_tokens + num_tokens * attention_flops_per_token(spec, context_tokens, attn_tp)


def decode_step(spec: ModelSpec, w: WeightTraffic, kv: KVTraffic, hw: Hardware, fabric: Fabric,
                settings: StepSettings, *, batch: int, tokens_per_seq: int = 1,
                num_layers: int | None = None) -> DecodeStep:
    """One decode (or verify) step. The ``tokens_per_seq`` tokens of one sequence share one KV read."""
    tokens = batch * tokens_per_seq
    experts = expert_read_bytes(w, tokens)
    weights = w.always_read_bytes + experts
    kv_bytes = batch * kv.bytes_per_seq
    mem_s = (weights + kv_bytes) / (settings.bandwidth_efficiency * hw.mem_bandwidth_gbps * 1e9)
    flops = forward_flops(spec, w, tokens, kv.context_tokens, fabric.world_size)
    compute_s = flops / (settings.flops_efficiency * hw.tflops * 1e12)
    n_ar = allreduce_count(num_layers if num_layers is not None else spec.num_hidden_layers, fabric.world_size)
    payload = spec.hidden_size * tokens * spec.dtype_bytes
    ar = allreduce(fabric, payload, settings.communicator, settings.allreduce_latency_us)
    ar_s = n_ar * ar.latency_us * 1e-6
    step = max(mem_s, compute_s) + ar_s + settings.fixed_overhead_s
    return DecodeStep(
        batch=batch, tokens_per_seq=tokens_per_seq, context_tokens=kv.context_tokens,
        experts_touched_per_layer=expected_distinct_experts(w.num_experts, w.num_experts_per_tok, tokens),
        attn_weight_bytes=w.attn_bytes, dense_weight_bytes=w.dense_mlp_bytes, other_weight_bytes=w.other_bytes,
        expert_weight_bytes=experts, weight_bytes_per_gpu_per_step=weights, kv_bytes_per_gpu_per_step=kv_bytes,
        memory_time_s=mem_s, compute_time_s=compute_s, bound="compute" if compute_s > mem_s else "memory",
        allreduce_count=n_ar, allreduce=ar, allreduce_time_s=ar_s, fixed_overhead_s=settings.fixed_overhead_s,
        step_time_s=step, decode_tokens_per_s=batch / step, per_stream_tokens_per_s=1.0 / step,
    )
