"""vLLM's fixes, re-planned: every value ``plan`` prints starts when applied (``engines.fixcheck``).

``recheck`` runs the vLLM simulation again with each fix applied (``plan_vllm(..., check_fixes=False)``
through the callback ``plan_vllm`` passes). A ``--gpu-memory-utilization`` above the largest value
that starts (CUDA graphs captured after the KV cache, vLLM's request against the free memory) moves
to that value, with what it holds and the alternatives (a ``--max-model-len`` that fits, fp8 KV,
more GPUs); a fix that does not start on its own (a flag the release lacks …) is dropped.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable, Mapping, Optional

from ...errors import KvscopeError
from ...timeline import Fix, Timeline
from ..fixcheck import Advice, Knob, checked_fixes
from .args import VllmFlags, parse_human_bytes

KNOB = Knob("--gpu-memory-utilization", step=0.01, top=1.0, scan=1)
# the fix's flag -> the VllmFlags field it sets (--tensor-parallel-size changes the layout: kept as printed)
FIELDS = {"--gpu-memory-utilization": "gpu_memory_utilization", "--max-model-len": "max_model_len",
          "--kv-cache-dtype": "kv_cache_dtype", "--max-num-seqs": "max_num_seqs",
          "--kv-cache-memory-bytes": "kv_cache_memory_bytes", "--enforce-eager": "enforce_eager",
          "--block-size": "block_size"}


def recheck(t: Timeline, flags: VllmFlags, max_model_len: int, current: float | None,
            simulate: Callable[[VllmFlags], Timeline], measured: bool = False) -> tuple[Fix, ...]:
    """``t.fix`` with each fix re-planned by ``simulate`` (``plan_vllm`` without this check);
    ``current``: the plan's own ``--gpu-memory-utilization`` when it starts; ``measured``: figures
    from a log (they belong to this layout: a ``--tensor-parallel-size`` fix is kept as printed)."""
    fields = FIELDS if measured else {**FIELDS, "--tensor-parallel-size": "tensor_parallel_size"}

    def replan(changes: Mapping[str, Any]) -> Optional[Timeline]:
        if any(flag not in fields for flag in changes):
            return None
        values = {fields[k]: parse_human_bytes(v) if k == "--kv-cache-memory-bytes" and isinstance(v, str) else v
                  for k, v in changes.items()}
        try:
            return simulate(replace(flags, **values))
        except KvscopeError:
            return None

    def concurrency(r: Timeline) -> float:
        return float(getattr(r.extra, "max_concurrency", 0) or 0)

    def held(r: Timeline) -> str:
        return (f"{r.kv_cache_tokens:,} KV tokens, Maximum concurrency {concurrency(r):.2f}x at "
                f"{max_model_len:,} tokens")

    def claim(f: Fix) -> Optional[Callable[[Timeline], bool]]:
        if not f.why.startswith("recommended"):
            return None
        m = re.search(r"holds (?:--max-num-seqs )?(\d+) requests", f.why)
        n = int(m.group(1)) if m else 1 if "holds one full" in f.why else None
        return None if n is None else (lambda r: concurrency(r) >= n)

    def alternatives(value: float, r: Timeline, again: Callable[[Mapping[str, Any]], Optional[Timeline]],
                     wanted: float) -> str:
        out = []
        est = getattr(r.extra, "estimated_max_model_len", None)
        if est:
            out.append(f"--max-model-len {est} fits at it")
        if flags.kv_cache_dtype == "auto":
            f8 = again({KNOB.flag: value, "--kv-cache-dtype": "fp8"})
            if f8 is not None and f8.starts:
                out.append(f"--kv-cache-dtype fp8 with it: Maximum concurrency {concurrency(f8):.2f}x")
        out.append(f"more GPUs (--tensor-parallel-size {flags.tensor_parallel_size * 2})")
        return "alternatives: " + "; ".join(out)

    unchecked = tuple(f.flag for f in t.fix if f.flag not in fields)
    advice = Advice(claim, held, alternatives, unchecked, ("--tensor-parallel-size",))
    return checked_fixes(t.fix, KNOB, replan, advice, current)
