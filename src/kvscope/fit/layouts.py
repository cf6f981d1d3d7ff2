"""Candidate layouts: TP x PP, TP x DP replicas, DP-attention (MLA on SGLang), KV dtype auto / fp8."""

from __future__ import annotations

from .request import FP8, FitRequest
from .results import Candidate


def _powers(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    if n not in out:
        out.append(n)
    return out


def _auto_kv_bytes(r: FitRequest) -> int:
    """Bytes per KV element with ``--kv-cache-dtype auto`` (the engine's own rule; imported per engine)."""
    if r.engine == "sglang":
        from ..engines.sglang import kv_cache as sgl_kv_cache
        return sgl_kv_cache.kv_cache_dtype(r.spec, "auto")[1]
    from ..engines.vllm import memory as vllm_mem
    return vllm_mem.kv_dtype_bytes(r.spec, "auto")


def gpus_per_node(r: FitRequest) -> int:
    """GPUs in one server for the TP-before-PP rule: 8 (HGX / DGX / MI300X platforms), or the NVLink
    domain when larger (GB200 NVL72: 72)."""
    return max(8, r.gpu.interconnect.max_nvlink_domain)


def _tp_node(r: FitRequest, tps: list[int], n: int) -> int | None:
    """The largest TP within one node that divides the attention heads (where PP stages start)."""
    inside = [t for t in tps if t <= min(n, gpus_per_node(r)) and r.spec.num_attention_heads % t == 0]
    return max(inside) if inside else None


def candidates(r: FitRequest, gpus: int | None = None) -> list[Candidate]:
    """Layouts with at most ``gpus`` GPUs, as the engines are deployed: TP and TP x DP-replicas over
    powers of two (and the count itself), DP-attention (dp = tp) for MLA models on SGLang, and TP x PP
    only with TP filling a node first (PP stages span nodes: ``tp`` = the largest TP within one node);
    KV dtype auto and fp8 unless fixed or the checkpoint's KV is already 1 byte. Replicas come after
    their one-engine layout, PP after the rest (``fit`` tries PP only when nothing else holds the target)."""
    n = gpus or r.gpus
    tps = [r.tp] if r.tp else _powers(n)
    dps = [r.dp] if r.dp else (_powers(n) if r.allow_dp_replicas else [1])
    if r.kv_cache_dtype is not None:
        dtypes = [r.kv_cache_dtype]
    else:
        auto_bytes = _auto_kv_bytes(r)
        dtypes = ["auto"] if auto_bytes <= 1 else ["auto", FP8[r.engine]]
    dp_attn = (r.engine == "sglang" and r.allow_dp_attention and r.spec.is_mla and r.pp in (None, 1)
               and r.dp is None and r.measured is None)  # measured free memory belongs to the plain-TP layout
    tp_node = _tp_node(r, tps, n)
    # vLLM DP on an MoE model: expert parallel over the DP engines, as its DP deployment guide launches it
    ep = r.engine == "vllm" and r.spec.moe is not None and "enable_expert_parallel" not in r.fixed
    out = []
    for kv in dtypes:
        for tp in tps:
            pps = [r.pp] if r.pp else ([p for p in _powers(n) if p > 1] if tp == tp_node else [])
            if r.pp in (None, 1):
                out.extend(Candidate(r.engine, tp, 1, dp, False, kv, expert_parallel=ep and dp > 1)
                           for dp in dps if tp * dp <= n)
            if dp_attn and tp > 1:
                out.append(Candidate(r.engine, tp, 1, tp, True, kv))
            for pp in pps:
                if pp > 1:
                    out.extend(Candidate(r.engine, tp, pp, dp, False, kv) for dp in (dps if r.dp else [1])
                               if tp * pp * dp <= n)
    return out
