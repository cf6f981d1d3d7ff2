"""Decode step time: memory traffic + all-reduces + a fixed per-step overhead.

``T_step = max(T_mem, T_compute) + N_coll * t_AR(hidden * tokens * 2 B) + T_fixed``
(shared/specs/perf.md §3.1). ``T_mem = bytes / (eta_bw * BW_peak)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..model.spec import ModelSpec
from .allreduce import (NORM_ALLREDUCE_BYTES_PER_TOKEN, AllReduceEstimate, Fabric, allreduce, allreduce_count,
                        norm_allreduce_count)
from .attention import split_kv_ctas
from .params import ModelParams
from .traffic import (KVTraffic, WeightTraffic, attention_flops_per_token, expected_distinct_experts,
                      expert_read_bytes_ep)

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
    sm: str = ""  # compute capability / arch (GPU catalog), picks the engine's attention kernel (perf/attention.py)

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
    # The mechanism model (perf/params.py): per-family bandwidth, expert-GEMM factor, per-layer kernel
    # floors, per-engine step cost. None: the plain roofline above (bytes / (eta * BW) + fixed).
    params: ModelParams | None = None
    ep: int = 1  # expert parallel ranks (routed experts split whole across ranks)
    engine: str = "sglang"  # model files differ per engine (allreduce.NORM_ALLREDUCES_PER_LAYER)

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
    floor_time_s: float = 0.0  # kernel-latency floor of the layers (mechanism model)
    norm_allreduce_count: int = 0  # q/k-norm all-reduces (allreduce.NORM_ALLREDUCES_PER_LAYER), in allreduce_time_s
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


def forward_flops(spec: ModelSpec, w: WeightTraffic, num_tokens: int, context_tokens: int, attn_tp: int,
                  absorbed: bool = True) -> float:
    """FLOPs on one rank for ``num_tokens`` tokens: 2 x active parameters + attention [E]
    (``absorbed=False``: MLA prefill as MHA over up-projected K/V, see ``attention_flops_per_token``)."""
    active = w.dense_numel + w.num_moe_layers * w.num_experts_per_tok * w.expert_numel_per_expert
    return 2.0 * active * num_tokens + num_tokens * attention_flops_per_token(spec, context_tokens, attn_tp, absorbed)


def layer_counts(spec: ModelSpec, w: WeightTraffic) -> tuple[int, int]:
    """(MoE layers, other layers) of the decode stack."""
    n = spec.num_hidden_layers
    return w.num_moe_layers, max(0, n - w.num_moe_layers)


def mechanism_time(p: ModelParams, hw: Hardware, *, dense_bytes: float, expert_bytes: float, kv_bytes: float,
                   flops: float, moe_layers: int, dense_layers: int, tokens: int = 1,
                   tokens_per_expert: float = 1.0, prefill: bool = False,
                   kv_ctas: int | None = None) -> tuple[float, float, float]:
    """(memory, compute, floor) seconds of one forward under the mechanism model (perf/params.py):
    dense weights and KV at ``bandwidth_efficiency``; routed experts at ``x f(M_e)`` with
    ``f(M_e) = 1 - (1 - expert_bandwidth_factor) / M_e`` (M_e tokens per touched expert); GEMMs at
    ``flops_efficiency`` (prefill chunks: ``x M / (M + gemm_half_tokens)``, M the chunk's tokens; decode
    GEMMs with few rows are bounded by their weight reads, the memory term); a kernel-latency floor per layer scaled by
    ``(1 - share) + share * 989 / bf16 TFLOPS`` (share = ``floor_compute_share``). The forward takes the largest of the three (``_body``)."""
    bw = p.bandwidth_efficiency * hw.mem_bandwidth_gbps * 1e9
    f_e = 1.0 - (1.0 - p.expert_bandwidth_factor) / max(1.0, tokens_per_expert)
    kv_bw = min(bw, kv_ctas * p.split_kv_cta_gbps * 1e9) if kv_ctas else bw  # perf/attention.py
    mem = dense_bytes / bw + kv_bytes / kv_bw + expert_bytes / (bw * f_e)
    eff = p.flops_efficiency * (tokens / (tokens + p.gemm_half_tokens) if prefill else 1.0)
    compute = flops / (eff * hw.tflops * 1e12)
    bf16 = hw.tflops / (2.0 if hw.tflops_dtype == "fp8" else 1.0)
    share = p.floor_compute_exponent
    scale = (1.0 - share) + share * 989.0 / max(1.0, bf16)
    floor = (moe_layers * p.moe_layer_floor_us + dense_layers * p.dense_layer_floor_us) * 1e-6 * scale
    return mem, compute, floor


def _body(mem_s: float, compute_s: float, floor_s: float) -> float:
    """A layer is either bandwidth-bound (weights and KV streamed at the achievable rate), latency-bound
    (its kernels' launch/latency floor) or compute-bound; under CUDA graphs the kernels' latencies overlap
    their neighbours' streaming, so the step takes the largest of the three, not their sum. (The sum fitted
    the public set no better on held-out sources, 15.9 % vs 16.2 % median, and misses the origin case by 26 %.)"""
    return max(mem_s, floor_s, compute_s)


def tokens_per_expert(w: WeightTraffic, tokens: int) -> float:
    """Mean tokens routed to each touched expert in one MoE layer."""
    e = expected_distinct_experts(w.num_experts, w.num_experts_per_tok, tokens)
    return tokens * w.num_experts_per_tok / e if e > 0 else 1.0


def decode_step(spec: ModelSpec, w: WeightTraffic, kv: KVTraffic, hw: Hardware, fabric: Fabric,
                settings: StepSettings, *, batch: int, tokens_per_seq: int = 1,
                num_layers: int | None = None) -> DecodeStep:
    """One decode (or verify) step. The ``tokens_per_seq`` tokens of one sequence share one KV read."""
    tokens = batch * tokens_per_seq
    experts = expert_read_bytes_ep(w, tokens, settings.ep)
    weights = w.always_read_bytes + experts
    kv_bytes = batch * kv.bytes_per_seq
    flops = forward_flops(spec, w, tokens, kv.context_tokens, fabric.world_size)
    n_ar = allreduce_count(num_layers if num_layers is not None else spec.num_hidden_layers, fabric.world_size)
    payload = spec.hidden_size * tokens * spec.dtype_bytes
    ar = allreduce(fabric, payload, settings.communicator, settings.allreduce_latency_us)
    ar_s = n_ar * ar.latency_us * 1e-6
    n_norm = norm_allreduce_count(spec.model_type, num_layers if num_layers is not None else spec.num_hidden_layers,
                                  fabric.world_size, settings.engine)
    if n_norm:
        norm = allreduce(fabric, NORM_ALLREDUCE_BYTES_PER_TOKEN * tokens, settings.communicator,
                         settings.allreduce_latency_us)
        ar_s += n_norm * norm.latency_us * 1e-6
    floor_s = 0.0
    fixed = settings.fixed_overhead_s
    if settings.params is not None:
        p = settings.params
        moe_l, dense_l = layer_counts(spec, w)
        mem_s, compute_s, floor_s = mechanism_time(p, hw, dense_bytes=w.always_read_bytes, expert_bytes=experts,
                                                   kv_bytes=kv_bytes, flops=flops, moe_layers=moe_l,
                                                   dense_layers=dense_l, tokens=tokens,
                                                   tokens_per_expert=tokens_per_expert(w, tokens),
                                                   kv_ctas=split_kv_ctas(spec, hw.sm, settings.engine, batch,
                                                                         fabric.world_size))
        fixed += p.step_fixed_ms * 1e-3 + spec.num_hidden_layers * p.eager_launch_us_per_layer * 1e-6
    else:
        mem_s = (weights + kv_bytes) / (settings.bandwidth_efficiency * hw.mem_bandwidth_gbps * 1e9)
        compute_s = flops / (settings.flops_efficiency * hw.tflops * 1e12)
    step = _body(mem_s, compute_s, floor_s) + ar_s + fixed
    bound = "compute" if compute_s > max(mem_s, floor_s) else ("kernel floor" if floor_s > mem_s else "memory")
    return DecodeStep(
        batch=batch, tokens_per_seq=tokens_per_seq, context_tokens=kv.context_tokens,
        experts_touched_per_layer=expected_distinct_experts(w.num_experts, w.num_experts_per_tok, tokens),
        attn_weight_bytes=w.attn_bytes, dense_weight_bytes=w.dense_mlp_bytes, other_weight_bytes=w.other_bytes,
        expert_weight_bytes=experts, weight_bytes_per_gpu_per_step=weights, kv_bytes_per_gpu_per_step=kv_bytes,
        memory_time_s=mem_s, compute_time_s=compute_s, bound=bound,
        allreduce_count=n_ar, allreduce=ar, allreduce_time_s=ar_s, fixed_overhead_s=fixed,
        step_time_s=step, decode_tokens_per_s=batch / step, per_stream_tokens_per_s=1.0 / step,
        floor_time_s=floor_s, norm_allreduce_count=n_norm,
    )
