"""SGLang's fixes, re-planned: every value ``plan`` prints starts when applied (``engines.fixcheck``).

``recheck`` runs the SGLang simulation again with each fix applied (``plan_sglang(..., check_fixes=False)``
through the ``replan`` callback ``plan_sglang`` passes) and says what the engine arithmetic gives
when no ``--mem-fraction-static`` both starts and holds what a recommendation promised: the tokens
at the largest value that starts, the ``--context-length`` that fits there, fp8 KV at that value
(planned), and more GPUs.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable, Mapping, Optional

from ...errors import KvscopeError
from ...timeline import Fix, Timeline
from ..fixcheck import Advice, Knob, checked_fixes
from .args import SGLangArgs

KNOB = Knob("--mem-fraction-static", step=0.001, top=0.999)
# the fix's flag -> the SGLangArgs field it sets (a flag not here is kept as printed: --tp changes the
# layout, and measured free memory belongs to one layout)
FIELDS = {"--mem-fraction-static": "mem_fraction_static", "--kv-cache-dtype": "kv_cache_dtype",
          "--context-length": "context_length", "--disable-cuda-graph": "disable_cuda_graph",
          "--disable-radix-cache": "disable_radix_cache", "--attention-backend": "attention_backend",
          "--max-running-requests": "max_running_requests", "--cuda-graph-max-bs": "cuda_graph_max_bs",
          "--page-size": "page_size"}


def recheck(t: Timeline, a: SGLangArgs, context_len: int, current: float | None,
            simulate: Callable[[SGLangArgs], Timeline], measured: bool = False) -> tuple[Fix, ...]:
    """``t.fix`` with each fix re-planned by ``simulate`` (``plan_sglang`` without this check);
    ``current``: the plan's own ``--mem-fraction-static`` (flag units) when it starts; ``measured``:
    the free memory was measured (it belongs to this layout: a ``--tp`` fix is kept as printed)."""
    fields = FIELDS if measured else {**FIELDS, "--tp": "tp_size"}

    def replan(changes: Mapping[str, Any]) -> Optional[Timeline]:
        if any(flag not in fields for flag in changes):
            return None
        try:
            return simulate(replace(a, **{fields[k]: v for k, v in changes.items()}))
        except KvscopeError:
            return None

    per = " per DP worker" if a.attn_dp_size > 1 else ""

    def held(r: Timeline) -> str:
        return (f"{r.kv_cache_tokens:,} KV tokens{per} = {r.kv_cache_tokens // context_len} full "
                f"{context_len:,}-token request(s)")

    def claim(f: Fix) -> Optional[Callable[[Timeline], bool]]:
        if not f.why.startswith("recommended"):
            return None
        m = re.search(r"\((\d+)(?: per DP worker)?\) at [\d,]+ tokens", f.why)
        n = int(m.group(1)) if m else 1 if "holds one full" in f.why else None
        return None if n is None else (lambda r: r.kv_cache_tokens >= n * context_len)

    def alternatives(value: float, r: Timeline, again: Callable[[Mapping[str, Any]], Optional[Timeline]],
                     wanted: float) -> str:
        out = []
        tokens = r.kv_cache_tokens
        w = again({KNOB.flag: wanted})
        n = (w.kv_cache_tokens if w is not None else 0) // context_len * max(1, a.attn_dp_size)
        if n and (a.max_running_requests is None or n < a.max_running_requests):
            # fewer request slots: a smaller req_to_token pool leaves room for the CUDA graphs
            m = again({KNOB.flag: wanted, "--max-running-requests": n})
            if m is not None and m.starts and m.kv_cache_tokens >= context_len:
                out.append(f"--max-running-requests {n} with {KNOB.flag} {wanted:g} starts and holds "
                           f"{m.kv_cache_tokens:,} tokens{per}")
        c = again({KNOB.flag: value, "--context-length": tokens}) if 0 < tokens < context_len else None
        if c is not None and c.starts and c.kv_cache_tokens >= tokens:
            out.append(f"--context-length {tokens} with it fits one full request")
        if a.kv_cache_dtype == "auto":
            f8 = again({KNOB.flag: value, "--kv-cache-dtype": "fp8_e4m3"})
            if f8 is not None and f8.starts:
                out.append(f"--kv-cache-dtype fp8_e4m3 with it holds {f8.kv_cache_tokens:,} tokens{per} "
                           f"({f8.kv_cache_tokens // context_len} full request(s))")
        out.append(f"more GPUs (--tp {a.tp_size * 2})")
        return "alternatives: " + "; ".join(out)

    unchecked = tuple(f.flag for f in t.fix if f.flag not in fields)
    return checked_fixes(t.fix, KNOB, replan, Advice(claim, held, alternatives, unchecked, ("--tp",)), current)
