"""Predicted speed of a fit option: decode throughput at the target concurrency, time to first token
at the target context. Estimated: every figure comes from ``kvscope perf`` (``perf.report.build_perf``,
one call per TP size), composed over the layout here.

* TP t × DP d replicas: ``d ×`` the decode rate of one TP-t engine at ``ceil(C / d)`` requests.
* TP t × PP p: a pipeline keeps every stage busy with micro-batches, so each GPU reads its share of
  the weights once per micro-batch: the aggregate rate is that of one TP-t group holding the whole
  model (``build_perf(tp=t)``) — ``p ×`` slower per token than TP ``t·p`` in the memory-bound regime,
  which is why engines put TP within a node before PP. TTFT: the same prefill work on ``t`` GPUs.
* DP-attention (SGLang, MLA; and vLLM DP on MoE models, whose expert layers span the DP engines):
  attention is data-parallel (each of the ``t`` workers reads the latent
  KV of its own ``ceil(C / t)`` requests, and holds the whole attention weights), the MLP / experts
  stay split over the ``t`` GPUs. From the TP-t step: memory time scaled to
  ``weights + (t − 1) × attention weights + C/t × KV`` instead of ``weights + C × KV`` (MLA latent KV is
  replicated on every TP rank, so plain TP reads all ``C`` requests' KV on every GPU).
"""

from __future__ import annotations

from ..errors import KvscopeError
from .request import FitRequest
from .results import Candidate, Speed


def _perf(r: FitRequest, tp: int, batch: int, kv_cache_dtype: str):
    from dataclasses import fields

    from ..perf.report import PerfOptions, build_perf  # imported on use: plan and fit start faster
    opts = dict(tp=tp, batches=(max(1, batch),), context_tokens=r.context_tokens, kv_cache_dtype=kv_cache_dtype)
    if "engine" in {f.name for f in fields(PerfOptions)}:
        opts["engine"] = r.engine  # per-engine step cost
    return build_perf(r.spec, r.gpu, PerfOptions(**opts))


def _moe_over_dp(r: FitRequest, c: Candidate) -> bool:
    """vLLM data parallelism on an MoE model: the DP engines' expert layers form one group over
    ``dp x tp`` GPUs (``FusedMoEParallelConfig.make``), attention stays per engine: attention-DP."""
    return c.expert_parallel or (r.engine == "vllm" and c.dp > 1 and r.spec.moe is not None)


def _kv_share(r: FitRequest, attn_tp: int, group: int) -> float:
    """KV bytes per sequence on one GPU with attention TP ``attn_tp``, relative to TP ``group``
    (perf/traffic.py: MLA latent replicated; GQA heads split, at least one per rank)."""
    if r.spec.is_mla:
        return 1.0
    kvh = r.spec.num_key_value_heads
    return max(1, kvh // attn_tp) / max(1, kvh // group)


def option_speed(r: FitRequest, c: Candidate) -> Speed | None:
    """The estimated speed of candidate ``c`` (None when perf cannot model it, e.g. TP not dividing heads)."""
    per = c.requests_per_engine(r.concurrency)
    attn_dp = c.dp_attention or _moe_over_dp(r, c)
    group = c.tp if c.dp_attention else c.tp * c.dp if attn_dp else c.tp  # GPUs the MLP / experts span
    try:
        rep = _perf(r, group, r.concurrency if attn_dp else per, c.kv_cache_dtype)
    except (KvscopeError, ArithmeticError, ValueError):
        return None
    step = rep.primary
    ttft = getattr(rep, "ttft_s", 0.0) or rep.prefill.prefill_time_s
    ttft_range = tuple(getattr(rep, "ttft_range_s", ()) or ()) or None
    decode_range = tuple(rep.decode_range[0]) if getattr(rep, "decode_range", ()) else None
    if attn_dp:
        attn_tp = 1 if c.dp_attention else c.tp  # SGLang DP-attention: one GPU per worker
        kv_seq = step.kv_bytes_per_gpu_per_step / max(1, step.batch) * _kv_share(r, attn_tp, group)
        old = step.weight_bytes_per_gpu_per_step + step.kv_bytes_per_gpu_per_step
        new = step.weight_bytes_per_gpu_per_step + (group // attn_tp - 1) * step.attn_weight_bytes + per * kv_seq
        mem = step.memory_time_s * new / old if old else step.memory_time_s
        t = step.step_time_s - max(step.memory_time_s, step.compute_time_s) + max(mem, step.compute_time_s)
        total = r.concurrency / t
        bound = "compute" if step.compute_time_s > mem else "memory"
        per_request = 1.0 / t
    else:
        total, per_request, bound = step.decode_tokens_per_s * c.dp, step.per_stream_tokens_per_s, step.bound
    scale = total / step.decode_tokens_per_s if step.decode_tokens_per_s else 1.0
    rng = (round(decode_range[0] * scale, 1), round(decode_range[1] * scale, 1)) if decode_range else None
    return Speed(round(total, 1), round(per_request, 2), round(ttft, 4), bound, decode_tokens_per_s_range=rng,
                 ttft_range_s=(round(ttft_range[0], 4), round(ttft_range[1], 4)) if ttft_range else None)
