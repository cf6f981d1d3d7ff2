"""SGLang's knob: ``--mem-fraction-static`` (``_SGLangKnob``)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..engines.sglang import memory as sgl_mem
from ..engines.sglang.args import SGLangArgs
from ..engines.sglang.decision import SGLangDecision, SGLangPlanExtra
from ..engines.sglang.plan import plan_sglang
from ..engines.sglang.release import release as sglang_release
from ..timeline import Timeline
from ..units import GiB
from .knob import _Counter, _Knob
from .request import SGLANG_SETTABLE, FitRequest
from .results import Candidate, Rejection


def _headroom(t: Timeline) -> int:
    return min(rk.decision.runtime_headroom_bytes_estimated or 0 for rk in t.ranks)


class _SGLangKnob(_Knob):
    """``--mem-fraction-static``: the smallest fraction whose plan starts with the tokens and requests
    wanted; upper end: the largest whose estimated runtime headroom is still >= 0."""

    engine = "sglang"
    fixed_key = "mem_fraction_static"
    launcher = "python -m sglang.launch_server --model-path"

    def __init__(self, r: FitRequest, c: Candidate, counter: _Counter) -> None:
        super().__init__(r, c, counter)
        self.need = r.context_tokens * self.per_engine
        # --max-running-requests: SGLang divides it by the DP-attention size (``max_num_reqs``,
        # kv_cache_configurator.py @ v0.5.23), so round up to a multiple; each plain-DP replica reads it whole.
        self.running = self.per_engine * c.dp if c.dp_attention else self.per_engine
        base = SGLangArgs(**{k: v for k, v in r.fixed.items() if k != self.fixed_key})
        self.base = replace(base, tp_size=c.tp, pp_size=c.pp, dp_size=c.dp, enable_dp_attention=c.dp_attention,
                            kv_cache_dtype=c.kv_cache_dtype, context_length=r.context_tokens,
                            max_running_requests=self.running)
        exact = r.exact_weights
        self.exact = exact(c.tp) if (exact is not None and c.pp == 1 and not c.dp_attention) else None

    def _top(self, step: float) -> int:
        return int(round(1 / step)) - 1

    def _plan(self, value: float | None) -> Timeline:
        r = self.r
        return plan_sglang(r.spec, r.gpu, replace(self.base, mem_fraction_static=value), r.version, r.measured,
                           None, self.exact, check_fixes=False)  # fit reads no fixes

    def first_key(self) -> int | None:
        return None if self.fixed is None else self.lo

    def default_value(self, first: Timeline) -> float | None:
        """SGLang's default fraction for this layout (``first`` is planned without the flag), in flag
        units (before the aiter factor), rounded up to 3 decimals for the command line (0.811485 -> 0.812:
        the default or a little more, never less)."""
        d = first.extra.mem_fraction_static_flag
        if self.fixed is not None or d is None:
            return None
        return math.ceil(round(d, 9) * 1000) / 1000

    def default_plan(self, first: Timeline) -> Timeline:
        d = first.extra.mem_fraction_static_flag
        value = self.default_value(first)
        return first if value is None or abs(value - d) < 1e-9 else self.plan_at(value)

    def flags(self, value: float) -> dict[str, Any]:
        """``sglang.launch_server`` flags. Full names (``--tp-size``): 0.5.14+ builds the parser from
        field names, so the abbreviation ``--tp`` is not guaranteed. DP-attention: ``--attn-dp-size N``
        from 0.5.23 (``--enable-dp-attention`` is deprecated there, server_args.py @ v0.5.23),
        ``--dp-size N --enable-dp-attention`` before."""
        c, r = self.c, self.r
        f: dict[str, Any] = {"--tp-size": c.tp}
        if c.pp > 1:
            f["--pp-size"] = c.pp
        if c.dp > 1:
            if c.dp_attention and sglang_release(r.version).attn_dp_size_flag:
                f["--attn-dp-size"] = c.dp
            else:
                f["--dp-size"] = c.dp
                if c.dp_attention:
                    f["--enable-dp-attention"] = True
        f["--mem-fraction-static"] = value
        f["--context-length"] = r.context_tokens
        f["--max-running-requests"] = self.running
        if c.kv_cache_dtype != "auto":
            f["--kv-cache-dtype"] = c.kv_cache_dtype
        for k, v in r.fixed.items():
            if k != self.fixed_key:
                f[SGLANG_SETTABLE[k]] = v
        return f

    def meets(self, k: int) -> bool:
        t = self.plan(k)
        return bool(t.starts) and t.kv_cache_tokens >= self.need and (t.max_running_requests or 0) >= self.per_engine

    def upper_ok(self, k: int) -> bool:
        t = self.plan(k)
        if not t.starts:  # below the start (no KV budget) the constraint does not bind (monotone); a start
            return not t.kv_cache_tokens  # that fails after the KV pool (CUDA graph capture) is above the max
        return _headroom(t) >= 0

    def guess_min(self, first: Timeline) -> int | None:
        x: SGLangPlanExtra = first.extra
        pre_bytes = x.pre_model_load_bytes or 0
        if not (pre_bytes and first.kv_cell_bytes):
            return None
        d: SGLangDecision = first.ranks[0].decision
        reserve = (d.mm_reservation_gib or 0.0) + (d.mamba_state_gib or 0.0)
        f = sgl_mem.min_viable_fraction(pre_model_load_gib=pre_bytes / GiB,
                                        available_gpu_gib=(x.available_gpu_bytes or 0) / GiB,
                                        reserve_gib=reserve, need_bytes=self.need * first.kv_cell_bytes)
        return math.ceil(f / self.step - 1e-9) if math.isfinite(f) else None

    def impossible(self, first: Timeline) -> Rejection | None:
        """SGLang's budget solved for the fraction (``min_mem_fraction_static``, memory.min_viable_fraction):
        when even the top of the grid is below it, no fraction leaves a KV budget — one plan decides."""
        m = first.extra.min_mem_fraction_static
        if self.fixed is not None or first.starts or (m is not None and m <= self.hi * self.step + 1e-9):
            return None  # (None: the minimum is >= 1)
        w, pre = first.weights_bytes or 0, first.extra.pre_model_load_bytes or 0
        est = " (est.)" if "weights" in first.estimated else ""
        return Rejection(self.c, f"weights {w / GiB:.1f} GiB per rank leave no KV budget in the {pre / GiB:.1f} "
                                 f"GiB free after init{est} even at --mem-fraction-static {self.value(self.hi)}")

    def hopeless(self, k_min: int | None) -> bool:
        return k_min is None and not self.plan(self.hi).kv_cache_tokens  # tokens grow with the fraction

    def guess_max(self, first: Timeline, k_min: int | None) -> int | None:
        k_ref = k_min if k_min is not None else self.hi
        hr = _headroom(self.plan(k_ref))  # slack shrinks by pre x step per grid step
        pre_bytes = first.extra.pre_model_load_bytes or 0
        return k_ref + math.floor(hr / (pre_bytes * self.step)) if pre_bytes else None

    def usable_max(self, k_max: int | None) -> int | None:
        return None if k_max is not None and not self.plan(k_max).starts else k_max  # never starts

    def figures(self, first: Timeline, t: Timeline, tm: Timeline) -> dict[str, Any]:
        default = None if self.fixed is not None else first.extra.mem_fraction_static
        return dict(kv_cache_tokens=t.kv_cache_tokens, kv_cache_tokens_max=tm.kv_cache_tokens,
                    concurrency=round(t.kv_cache_tokens * self.c.dp / self.r.context_tokens, 4),
                    headroom=round(tm.kv_cache_tokens / self.need, 4),
                    tokens_per_step=t.extra.tokens_per_0_01_mem_fraction,
                    engine_default=None if default is None else round(default, 4),
                    estimated=tuple(t.estimated) + ("runtime_headroom (fraction_max)",))

    def reject(self, first: Timeline, k_min: int | None, k_max: int | None) -> Rejection:
        c, need, top = self.c, self.need, self.hi
        est = " (est.)" if "weights" in self.plan(top).estimated else ""
        per = " per DP worker" if c.dp_attention else " per replica" if c.dp > 1 else ""
        if k_max is None:  # never starts with runtime headroom >= 0
            t = self.plan(top)
            w, pre = t.weights_bytes or 0, t.extra.pre_model_load_bytes or 0
            if not t.kv_cache_tokens:
                return Rejection(c, f"weights {w / GiB:.1f} GiB per rank leave no KV budget in the {pre / GiB:.1f} "
                                    f"GiB free after init{est} even at --mem-fraction-static {self.value(top)}")
            return Rejection(c, f"no --mem-fraction-static both starts and keeps runtime headroom >= 0 (est.): "
                                f"weights {w / GiB:.1f} GiB per rank of {pre / GiB:.1f} GiB free{est}")
        tm = self.plan(k_max)
        ratio = round(tm.kv_cache_tokens / need, 4)
        fmax = self.value(k_max)
        if k_min is None:
            if tm.kv_cache_tokens >= need:  # the tokens suffice; the request limit does not
                why = f"max_running_requests {tm.max_running_requests} < {self.per_engine}{per}"
            else:
                why = (f"{tm.kv_cache_tokens:,} KV tokens < {need:,} needed{per} "
                       f"({need / max(tm.kv_cache_tokens, 1):.2f}x short)")
            return Rejection(c, f"at --mem-fraction-static {fmax} (highest with est. runtime headroom >= 0): {why}",
                             ratio, fmax, tm.kv_cache_tokens)
        return Rejection(c, f"needs --mem-fraction-static >= {self.value(k_min)} for {need:,} tokens{per}, but above "
                            f"{fmax} the est. runtime headroom (CUDA graphs, activations) is negative",
                         ratio, fmax, tm.kv_cache_tokens)
