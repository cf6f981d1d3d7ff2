"""vLLM's knob: ``--gpu-memory-utilization`` (``_VllmKnob``)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..engines.vllm.args import VllmFlags
from ..engines.vllm.decision import VllmDecision, VllmPlanExtra
from ..engines.vllm.plan import plan_vllm
from ..engines.vllm.release import version_traits
from ..timeline import Timeline
from ..units import GiB
from .knob import _Counter, _Knob
from .request import VLLM_SETTABLE, FitRequest
from .results import Candidate, Rejection


def _request_ok(t: Timeline) -> bool:
    """vLLM's ``request_memory`` check: free memory at startup >= total x utilization."""
    d: VllmDecision = t.ranks[0].decision
    return d.initial_free_bytes >= d.requested_memory_bytes


class _VllmKnob(_Knob):
    """``--gpu-memory-utilization``: the smallest value whose plan starts with vLLM's own "Maximum
    concurrency" >= the requests wanted; upper end: the largest value vLLM accepts (requested memory
    <= free memory at startup). The first plan is at the engine's default value."""

    engine = "vllm"
    fixed_key = "gpu_memory_utilization"
    launcher = "vllm serve"

    def __init__(self, r: FitRequest, c: Candidate, counter: _Counter) -> None:
        super().__init__(r, c, counter)
        base = VllmFlags(**{k: v for k, v in r.fixed.items() if k != self.fixed_key})
        self.base = replace(base, tensor_parallel_size=c.tp, pipeline_parallel_size=c.pp, data_parallel_size=c.dp,
                            kv_cache_dtype=c.kv_cache_dtype, max_model_len=r.context_tokens,
                            max_num_seqs=self.per_engine)
        if self._expert_parallel():
            self.base = replace(self.base, enable_expert_parallel=True)
        self.default = version_traits(r.version).default_gpu_memory_utilization
        self.k0 = max(self.lo, min(self.hi, round(self.default / self.step)))

    def _expert_parallel(self) -> bool:
        """``--enable-expert-parallel`` for DP on an MoE model (``Candidate.expert_parallel``), as vLLM's
        data-parallel deployment guide launches it (experts span the DP engines either way)."""
        return self.c.expert_parallel

    def _top(self, step: float) -> int:
        return int(math.floor(1 / step + 1e-9))

    def _plan(self, value: float | None) -> Timeline:
        return plan_vllm(self.r.spec, self.r.gpu, replace(self.base, gpu_memory_utilization=value), self.r.version,
                         check_fixes=False)  # fit reads no fixes

    def first_key(self) -> int:
        return self.k0

    def default_value(self, first: Timeline) -> float | None:
        return None if self.fixed is not None else self.value(self.k0)

    def recommended(self, first: Timeline, k_min: int, k_max: int) -> tuple[float, Timeline]:
        """The default (or the floor above it), but never above what vLLM accepts at startup: past
        ``k_max`` it refuses to start (requested memory > free memory), so the largest it accepts."""
        value, t = super().recommended(first, k_min, k_max)
        if value > self.value(k_max) + 1e-9 and k_max >= k_min:
            return self.value(k_max), self.plan(k_max)
        return value, t

    def flags(self, value: float) -> dict[str, Any]:
        """``vllm serve`` flags."""
        c, r = self.c, self.r
        f: dict[str, Any] = {"--tensor-parallel-size": c.tp}
        if c.pp > 1:
            f["--pipeline-parallel-size"] = c.pp
        if c.dp > 1:
            f["--data-parallel-size"] = c.dp
        f["--gpu-memory-utilization"] = value
        f["--max-model-len"] = r.context_tokens
        f["--max-num-seqs"] = self.per_engine
        if self._expert_parallel():
            f["--enable-expert-parallel"] = True
        if c.kv_cache_dtype != "auto":
            f["--kv-cache-dtype"] = c.kv_cache_dtype
        for k, v in r.fixed.items():
            if k == self.fixed_key:
                continue
            if k == "enable_prefix_caching" and v is False:
                f["--no-enable-prefix-caching"] = True
            else:
                f[VLLM_SETTABLE[k]] = v
        return f

    def _total(self, first: Timeline) -> float:
        """CUDA total memory, as the plan used it (requested = total x utilization)."""
        return first.ranks[0].decision.requested_memory_bytes / (self.k0 * self.step)

    def meets(self, k: int) -> bool:
        t = self.plan(k)
        return ((t.extra.max_concurrency or 0) >= self.per_engine
                and (bool(t.starts) or not _request_ok(t)))

    def upper_ok(self, k: int) -> bool:
        t = self.plan(k)  # vLLM accepts the request, and the CUDA graphs still fit after the KV cache
        return _request_ok(t) and "while capturing CUDA graphs" not in (t.error or "")

    def guess_min(self, first: Timeline) -> int | None:
        total, per_req = self._total(first), first.ranks[0].decision.needed_memory_bytes or 0
        if not (total and per_req):
            return None
        # available KV bytes grow by ``total`` per unit of utilization
        x: VllmPlanExtra = first.extra
        need_bytes = per_req * self.per_engine + (x.bytes_per_block or 0)
        have = x.available_kv_cache_bytes or 0
        return self.k0 + math.ceil((need_bytes - have) / total / self.step)

    def guess_max(self, first: Timeline, k_min: int | None) -> int | None:
        total = self._total(first)
        return int(first.ranks[0].decision.initial_free_bytes / total / self.step) if total else None

    def figures(self, first: Timeline, t: Timeline, tm: Timeline) -> dict[str, Any]:
        return dict(kv_cache_tokens=t.kv_cache_tokens or 0, kv_cache_tokens_max=tm.kv_cache_tokens or 0,
                    concurrency=round((t.extra.max_concurrency or 0.0) * self.c.dp, 4),
                    headroom=round((tm.extra.max_concurrency or 0) / self.per_engine, 4),
                    tokens_per_step=None, engine_default=None if self.fixed is not None else self.default,
                    estimated=tuple(t.estimated))

    def reject(self, first: Timeline, k_min: int | None, k_max: int | None) -> Rejection:
        c, r, per_engine = self.c, self.r, self.per_engine
        if k_max is None:
            free = first.ranks[0].decision.initial_free_bytes
            return Rejection(c, f"even --gpu-memory-utilization {self.value(self.lo)} requests more than the "
                                f"{free / GiB:.1f} GiB free at startup (est.)")
        tm = self.plan(k_max)
        umax = self.value(k_max)
        conc = tm.extra.max_concurrency or 0.0
        ratio = round(conc / per_engine, 4)
        est = " (est.)" if tm.estimated else ""
        per = " per replica" if c.dp > 1 else ""
        if (tm.extra.available_kv_cache_bytes or 0) <= 0:
            req = tm.ranks[0].decision.requested_memory_bytes
            return Rejection(c, f"weights {(tm.weights_bytes or 0) / GiB:.1f} GiB per rank + profile peaks exceed "
                                f"{umax} x {req / (k_max * self.step) / GiB:.1f} GiB = {req / GiB:.1f} GiB, the most "
                                f"vLLM accepts (free at startup{est})", ratio, umax, tm.kv_cache_tokens)
        if k_min is None or k_min > k_max:
            return Rejection(c, f"at --gpu-memory-utilization {umax} (all free memory{est}): concurrency {conc:.2f} "
                                f"< {per_engine}{per} at --max-model-len {r.context_tokens} "
                                f"({per_engine / max(conc, 1e-9):.2f}x short)", ratio, umax, tm.kv_cache_tokens)
        t = self.plan(k_min)
        return Rejection(c, f"does not start at --gpu-memory-utilization {self.value(k_min)}: "
                            f"{(t.error or '').splitlines()[0][:160]}", ratio, umax, tm.kv_cache_tokens)
