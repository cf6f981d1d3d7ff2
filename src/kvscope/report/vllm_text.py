"""Text of a vLLM plan (``kvscope plan --engine vllm``): budget, profile terms, KV groups, capacity,
verdict, fixes, with GiB figures as vLLM prints them."""

from __future__ import annotations

from ..engines.vllm.decision import VllmDecision, VllmPlanExtra
from ..timeline import Timeline
from ..units import GiB
from .sections import assemble, failed_at, verdict_lines

__all__ = ["render_vllm"]


def _gib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f} GiB"


def render_vllm(t: Timeline) -> str:
    """Readable text of a ``plan_vllm`` Timeline (its ``extra`` a ``VllmPlanExtra``, each rank's
    ``decision`` a ``VllmDecision``)."""
    x: VllmPlanExtra = t.extra
    d: VllmDecision = t.ranks[0].decision
    est = set(t.estimated)
    mark = lambda name: " (estimated)" if name in est else ""  # noqa: E731
    setup = [
        ("vLLM", f"{t.engine_version}  model {t.model}  GPU {t.gpu}"),
        ("parallel", f"tp {x.tensor_parallel_size}  pp {x.pipeline_parallel_size}  "
                     f"dp {x.data_parallel_size} (per DP engine)"),
    ]
    memory = [
        ("requested memory", f"{_gib(d.requested_memory_bytes)}  (gpu_memory_utilization "
                             f"{x.gpu_memory_utilization} x total)"),
        ("initial free", _gib(d.initial_free_bytes) + mark("initial_free")),
        ("Model loading took", _gib(d.weights_bytes) + mark("weights")),
        ("torch peak increase", _gib(d.activation_peak_bytes) + mark("activation_peak")
         + f"  at max_num_batched_tokens {x.max_num_batched_tokens}"),
        ("non-torch increase", _gib(d.non_torch_bytes) + mark("non_torch")),
        ("CUDA graph estimate", _gib(d.cudagraph_estimate_bytes) + mark("cudagraph")
         + ("  (subtracted)" if d.cudagraph_applied_bytes else "  (not subtracted)")),
    ]
    sizing = [
        ("Available KV cache memory", _gib(x.available_kv_cache_bytes) + mark("available_kv_cache_bytes")),
        ("formula", str(d.formula)),
        ("block size", f"{x.block_size} tokens, {x.bytes_per_block} B per block, "
                       f"kv dtype {x.kv_cache_dtype}"),
        ("attention backend", f"{x.attention_backend or 'not modelled'} (block size: "
                              f"{x.block_size_source})"),
    ]
    for i, g in enumerate(x.kv_cache_groups):
        sizing.append((f"  group {i}", f"{g.kind}: {g.num_layers} layers x {g.page_size_bytes} B page "
                                       f"({g.block_size} tokens)"))
    capacity = [
        ("num_gpu_blocks", f"{x.num_gpu_blocks:,}"),
        ("GPU KV cache size", f"{t.kv_cache_tokens:,} tokens" if t.kv_cache_tokens is not None else "-"),
        ("Maximum concurrency", f"{x.max_concurrency:.2f}x for {x.max_model_len:,} tokens per request"),
        ("max_num_seqs", str(t.max_running_requests)),
    ]
    width = max(len(k) for k, _ in setup + memory + sizing + capacity)
    table = lambda rows: [f"  {k.ljust(width)}  {v}" for k, v in rows]  # noqa: E731
    notes = [f"  fix: {f.flag} {f.value}  # {f.why}" for f in t.fix] + [f"  warning: {w}" for w in t.warnings]
    return assemble(verdict_lines(t, failed_at(t), "KV tokens (GPU KV cache size)"),
                    {"setup": table(setup), "memory per rank": table(memory), "sizing decision": table(sizing),
                     "capacity": table(capacity), "fixes and notes": notes})
