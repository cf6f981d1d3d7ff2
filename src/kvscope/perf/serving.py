"""The stable high-level entry point: one serving configuration -> decode tok/s, TPOT and TTFT with ranges.

``estimate_serving(spec, gpu, tp=8, concurrency=64, context_tokens=8192, engine="sglang")`` is what
``fit`` (and any caller ranking layouts) should use: it composes the mechanism model (``build_perf``) with
the serving effects a benchmark at ``concurrency`` sees (the other requests' prefills share the decode
steps). Every figure is an estimate; ``*_range`` are the values at the fast and slow ends of every
parameter's documented range (``perf/params.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..hardware.gpus import GPU
from ..model.spec import ModelSpec
from .prefill import prefill
from .report import PerfOptions, PerfReport, build_perf
from .traffic import kv_traffic


@dataclass(frozen=True)
class ServingEstimate:
    tp: int
    ep: int
    engine: str
    concurrency: int
    context_tokens: int
    prompt_tokens: int
    output_tokens: int
    decode_tokens_per_s: float  # aggregate output tok/s at the concurrency (steady state)
    decode_tokens_per_s_range: tuple[float, float]  # (slow, fast)
    tpot_s: float  # time per output token seen by one request, prefill interference included
    tpot_s_range: tuple[float, float]  # (fast, slow)
    ttft_s: float  # time to first token of one prompt on an idle server
    ttft_s_range: tuple[float, float]  # (fast, slow)
    step_time_s: float  # one decode step of ``concurrency`` sequences, no prefill
    prefill_interference_s: float  # added to every output token by the other requests' prefills
    bound: str  # memory | kernel floor | compute
    speculative_speedup: float | None
    estimated: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def estimate_serving(spec: ModelSpec, gpu: GPU, *, tp: int = 1, ep: int = 1, concurrency: int = 1,
                     context_tokens: int = 2048, prompt_tokens: int | None = None, output_tokens: int | None = None,
                     engine: str = "sglang", kv_cache_dtype: str = "auto", cuda_graph: bool = True,
                     pcie_topology: str | None = None, options: PerfOptions | None = None) -> ServingEstimate:
    """Decode throughput, TPOT and TTFT of ``concurrency`` requests whose context averages ``context_tokens``
    (prompt ``prompt_tokens``, default: the context; output ``output_tokens``, default 1024).

    ``options`` (a ``PerfOptions``) passes anything else ``kvscope perf`` takes, e.g. speculative decoding;
    its ``tp``/``batches``/``context_tokens``/``engine``/``ep`` are replaced by the arguments here."""
    prompt = max(1, prompt_tokens if prompt_tokens is not None else context_tokens)
    out = max(1, output_tokens if output_tokens is not None else 1024)
    base = options or PerfOptions()
    opts = replace(base, tp=tp, ep=ep, batches=(max(1, concurrency),), context_tokens=max(1, context_tokens),
                   engine=engine, kv_cache_dtype=kv_cache_dtype, cuda_graph=cuda_graph,
                   pcie_topology=pcie_topology if pcie_topology is not None else base.pcie_topology)
    rep = build_perf(spec, gpu, opts)
    d = rep.primary
    step = d.step_time_s
    per_token = step
    sp = rep.speculative
    if sp is not None:
        per_token = sp.step_time_s / sp.accepted_tokens_per_step
    interference, ttft = _prefill_terms(rep, spec, prompt)
    extra = (concurrency - 1) * interference / out if concurrency > 1 else 0.0
    tpot = per_token + extra
    slow, fast = rep.decode_range[0]
    scale = per_token / step  # speculative decoding scales the range alike
    tpot_range = (concurrency / fast * scale + extra, concurrency / slow * scale + extra)
    return ServingEstimate(
        tp=tp, ep=ep, engine=engine, concurrency=concurrency, context_tokens=context_tokens, prompt_tokens=prompt,
        output_tokens=out, decode_tokens_per_s=concurrency / tpot,
        decode_tokens_per_s_range=(concurrency / tpot_range[1], concurrency / tpot_range[0]),
        tpot_s=tpot, tpot_s_range=tpot_range, ttft_s=ttft, ttft_s_range=rep.ttft_range_s if prompt == max(
            1, opts.context_tokens) else (ttft, ttft),
        step_time_s=step, prefill_interference_s=extra, bound=d.bound,
        speculative_speedup=sp.speedup if sp is not None else None)


def _prefill_terms(rep: PerfReport, spec: ModelSpec, prompt: int) -> tuple[float, float]:
    """(prefill compute of one prompt without the fixed first-token cost, TTFT of one prompt)."""
    kv = kv_traffic(spec, prompt, rep.options.tp, rep.options.kv_cache_dtype)
    kv_tok = kv.full_layer_bytes_per_token + kv.sliding_layer_bytes_per_token
    hw, fabric = rep.hardware, rep.fabric
    pre = prefill(spec, rep.weights, kv_tok, hw, fabric, rep.settings, prompt_tokens=prompt,
                  chunk_tokens=rep.options.chunked_prefill_size)
    return pre.prefill_time_s - pre.fixed_time_s, pre.prefill_time_s
