"""Candidate layouts: TP x PP, TP x DP replicas, DP-attention (MLA on SGLang), KV dtype auto / fp8."""

from __future__ import annotations

from ..engines.sglang import kv_cache as sgl_kv_cache
from ..engines.vllm import memory as vllm_mem
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


def candidates(r: FitRequest, gpus: int | None = None) -> list[Candidate]:
    """Layouts with at most ``gpus`` GPUs: TP x PP and TP x DP-replicas over powers of two (and the count
    itself), DP-attention (dp = tp) for MLA models on SGLang; KV dtype auto and fp8 unless fixed or the
    checkpoint's KV is already 1 byte."""
    n = gpus or r.gpus
    tps = [r.tp] if r.tp else _powers(n)
    pps = [r.pp] if r.pp else _powers(n)
    if r.dp:
        dps = [r.dp]
    else:
        dps = _powers(n) if r.allow_dp_replicas else [1]
    if r.kv_cache_dtype is not None:
        dtypes = [r.kv_cache_dtype]
    else:
        auto_bytes = (sgl_kv_cache.kv_cache_dtype(r.spec, "auto")[1] if r.engine == "sglang"
                      else vllm_mem.kv_dtype_bytes(r.spec, "auto"))
        dtypes = ["auto"] if auto_bytes <= 1 else ["auto", FP8[r.engine]]
    dp_attn = (r.engine == "sglang" and r.allow_dp_attention and r.spec.is_mla and r.pp in (None, 1)
               and r.dp is None and r.measured is None)  # measured free memory belongs to the plain-TP layout
    out = []
    for kv in dtypes:
        for tp in tps:
            for pp in pps:
                for dp in dps:
                    if tp * pp * dp <= n and (dp == 1 or pp == 1 or r.dp):
                        out.append(Candidate(r.engine, tp, pp, dp, False, kv))
            if dp_attn and tp > 1:
                out.append(Candidate(r.engine, tp, 1, tp, True, kv))
    return out
