"""Prefill throughput: chunked prefill of one prompt, compute- or all-reduce-bandwidth bound.

Per chunk of T tokens (shared/specs/perf.md §3.2):
``T_chunk = max(2 * N_active * T / (eta_f * FLOPS) + attention, W_read / (eta_bw * BW))
            + N_coll * t_AR(hidden * T * 2 B)``
All-reduces are not overlapped with compute (each layer waits for its all-reduce). On PCIe TP 8 the
all-reduce term dominates: Kimi moves 123 x 14,336 B x 1.75 = 3.1 MB of bus traffic per token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..model.spec import ModelSpec
from .allreduce import NORM_ALLREDUCE_BYTES_PER_TOKEN, Fabric, allreduce, allreduce_count, norm_allreduce_count
from .decode import Hardware, StepSettings, forward_flops, layer_counts, mechanism_time, tokens_per_expert
from .traffic import WeightTraffic, expert_read_bytes_ep, mla_prefix_expansion_flops

DEFAULT_CHUNKED_PREFILL_SIZE = 8192  # SGLang --chunked-prefill-size on large GPUs; vLLM max_num_batched_tokens 8192


@dataclass(frozen=True)
class PrefillEstimate:
    prompt_tokens: int
    chunk_tokens: int
    num_chunks: int
    compute_time_s: float
    memory_time_s: float
    allreduce_count_per_chunk: int
    allreduce_latency_us: float  # one all-reduce of a full chunk
    allreduce_time_s: float
    prefill_time_s: float
    prefill_tokens_per_s: float
    bound: str  # "compute" | "memory" | "allreduce"
    allreduce_bus_bytes_per_token: int
    fixed_time_s: float = 0.0  # HTTP, tokenization, scheduling, first sample (mechanism model)
    estimated: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def prefill(spec: ModelSpec, w: WeightTraffic, kv_per_token_bytes: int, hw: Hardware, fabric: Fabric,
            settings: StepSettings, *, prompt_tokens: int, chunk_tokens: int = DEFAULT_CHUNKED_PREFILL_SIZE
            ) -> PrefillEstimate:
    """Prefill of one prompt in chunks; attention of chunk i sees the i earlier chunks [E].

    ``allreduce_latency_us`` overrides are decode-sized measurements, so prefill always uses the model."""
    chunk_tokens = max(1, min(chunk_tokens, prompt_tokens))
    n_ar = allreduce_count(spec.num_hidden_layers, fabric.world_size)
    n_norm = norm_allreduce_count(spec.model_type, spec.num_hidden_layers, fabric.world_size, settings.engine)
    compute = memory = comm = work = 0.0
    done = 0
    chunks = 0
    while done < prompt_tokens:
        t = min(chunk_tokens, prompt_tokens - done)
        mid_ctx = done + t // 2  # average context seen by the chunk's queries
        flops = (forward_flops(spec, w, t, mid_ctx, fabric.world_size, absorbed=False)
                 + mla_prefix_expansion_flops(spec, done, fabric.world_size))
        experts = expert_read_bytes_ep(w, t, settings.ep)
        kv_read = (done + t) * kv_per_token_bytes
        if settings.params is not None:
            moe_l, dense_l = layer_counts(spec, w)
            mem, flops_s, floor = mechanism_time(settings.params, hw, dense_bytes=w.always_read_bytes,
                                                 expert_bytes=experts, kv_bytes=kv_read, flops=flops,
                                                 moe_layers=moe_l, dense_layers=dense_l, tokens=t,
                                                 tokens_per_expert=tokens_per_expert(w, t), prefill=True)
        else:
            flops_s = flops / (settings.flops_efficiency * hw.tflops * 1e12)
            mem = (w.always_read_bytes + experts + kv_read) / (settings.bandwidth_efficiency * hw.mem_bandwidth_gbps * 1e9)
            floor = 0.0
        compute += flops_s
        memory += mem
        work += max(flops_s, mem, floor)
        ar = allreduce(fabric, spec.hidden_size * t * spec.dtype_bytes, settings.communicator)
        comm += n_ar * ar.latency_us * 1e-6
        if n_norm:
            norm = allreduce(fabric, NORM_ALLREDUCE_BYTES_PER_TOKEN * t, settings.communicator)
            comm += n_norm * norm.latency_us * 1e-6
        done += t
        chunks += 1
    full_ar = allreduce(fabric, spec.hidden_size * chunk_tokens * spec.dtype_bytes, settings.communicator)
    fixed = settings.params.ttft_fixed_ms * 1e-3 if settings.params is not None else 0.0
    total = work + comm + fixed
    bound = "allreduce" if comm > work else ("compute" if compute >= memory else "memory")
    bus = int(n_ar * spec.hidden_size * spec.dtype_bytes * 2 * (fabric.world_size - 1) / fabric.world_size) \
        if fabric.world_size > 1 else 0
    return PrefillEstimate(prompt_tokens=prompt_tokens, chunk_tokens=chunk_tokens, num_chunks=chunks,
                           compute_time_s=compute, memory_time_s=memory, allreduce_count_per_chunk=n_ar,
                           allreduce_latency_us=full_ar.latency_us, allreduce_time_s=comm, prefill_time_s=total,
                           prefill_tokens_per_s=prompt_tokens / total, bound=bound,
                           allreduce_bus_bytes_per_token=bus, fixed_time_s=fixed)
