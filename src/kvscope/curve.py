"""Use-case: the memory knob → KV tokens curve (``--mem-fraction-static`` / ``--gpu-memory-utilization``).

``curve(model, gpu, engine=..., **flags)`` plans the same start at every value of the engine's memory
knob on a grid (``plan()``, the same call ``kvscope plan`` makes; nothing is interpolated) and marks
the values a user asks about: the minimum viable value (below it the engine's start-up error fires),
the engine's default, the user's value, the value whose KV pool holds one full-context request, the value above which the start
fails again (CUDA graphs / runtime memory) and, with
``concurrency``, the value that holds that many full-context requests. The marks are found by
bisection between grid points (to ``1e-4``), each a real ``plan()`` call.

This is what ``kvscope plan --html`` and ``kvscope serve`` draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .errors import FlagError, KvscopeError
from .plan import plan
from .timeline import Timeline

__all__ = ["curve", "Curve", "CurvePoint", "KNOBS"]

# engine -> (plan() keyword, the flag as the engine spells it)
KNOBS = {"sglang": ("mem_fraction_static", "--mem-fraction-static"),
         "vllm": ("gpu_memory_utilization", "--gpu-memory-utilization")}
_TOL = 1e-4


@dataclass(frozen=True)
class CurvePoint:
    """One ``plan()`` at one value of the memory knob."""

    value: float  # the knob's value
    starts: bool  # whether the engine starts
    kv_cache_tokens: int | None  # KV pool in tokens (0 or None when it does not start)
    max_running_requests: int | None  # requests the engine admits
    runtime_headroom_bytes: int | None  # SGLang: estimated memory left for graphs/activations (None: not modelled)
    error: str | None  # the engine's error (or kvscope's one-line input error) at this value

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "starts": self.starts, "kv_cache_tokens": self.kv_cache_tokens,
                "max_running_requests": self.max_running_requests,
                "runtime_headroom_bytes": self.runtime_headroom_bytes, "error": self.error}


@dataclass(frozen=True)
class Curve:
    """KV tokens and max running requests against the memory knob, with the marked values."""

    engine: str
    knob: str  # the engine's flag, e.g. --mem-fraction-static
    points: tuple[CurvePoint, ...]  # sorted by value; includes the marked values
    engine_default: float | None  # the value the engine picks when the flag is not passed
    user_value: float | None  # the value passed (None: not passed)
    min_viable: float | None  # smallest value at which the engine starts (None: never / always in range)
    error_below: str | None  # the engine's error just below min_viable
    fails_above: float | None  # smallest value above the working range at which the start fails again
    error_above: str | None  # the error there (CUDA graph capture / runtime out of memory)
    context_tokens: int | None  # tokens of one full-context request (context_len / max_model_len)
    full_context_value: float | None  # smallest value whose KV pool holds one full-context request
    concurrency: int | None  # requested concurrent full-context requests (None: not asked)
    concurrency_value: float | None  # smallest value whose pool holds them
    headroom_negative_from: float | None  # smallest grid value with negative estimated runtime headroom
    tokens_per_0_01: int | None  # the slope the plan reports (each +0.01 buys N tokens)

    def point_at(self, value: float) -> CurvePoint | None:
        for p in self.points:
            if abs(p.value - value) < 1e-9:
                return p
        return None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("engine", "knob", "engine_default", "user_value", "min_viable",
                                             "error_below", "fails_above", "error_above", "context_tokens", "full_context_value", "concurrency",
                                             "concurrency_value", "headroom_negative_from", "tokens_per_0_01")}
        out["points"] = [p.to_dict() for p in self.points]
        return out


def _point(value: float, t: Timeline | None, err: str | None) -> CurvePoint:
    if t is None:
        return CurvePoint(value, False, None, None, None, err)
    d = t.ranks[0].decision.to_dict() if t.ranks else {}
    head = d.get("runtime_headroom_bytes_estimated")
    return CurvePoint(value, bool(t.starts), t.kv_cache_tokens, t.max_running_requests,
                      head if isinstance(head, int) else None, t.error)


def _bisect(ok: Callable[[float], bool], lo: float, hi: float) -> float:
    """Smallest value on the 1e-4 grid in (lo, hi] with ok(value), given not ok(lo) and ok(hi)."""
    lo_i, hi_i = round(lo / _TOL), round(hi / _TOL)
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        lo_i, hi_i = (lo_i, mid) if ok(round(mid * _TOL, 4)) else (mid, hi_i)
    return round(hi_i * _TOL, 4)


def _first(points: list[CurvePoint], ok: Callable[[CurvePoint], bool], at: Callable[[float], CurvePoint]) -> float | None:
    """Smallest value where ok flips to true (bisected between the grid points around the flip)."""
    prev = None
    for p in points:
        if ok(p):
            if prev is None:
                return None if p.value > points[0].value else p.value
            return _bisect(lambda v: ok(at(v)), prev.value, p.value)
        prev = p
    return None


def _fails_above(grid: list[CurvePoint], at: Callable[[float], CurvePoint]) -> float | None:
    """Smallest value above the last grid point that starts at which the start fails (bisected)."""
    last = max((i for i, p in enumerate(grid) if p.starts), default=None)
    if last is None or last == len(grid) - 1:
        return None
    return _bisect(lambda v: not at(v).starts, grid[last].value, grid[last + 1].value)


def curve(model: str, gpu: str | None = None, *, engine: str = "sglang", engine_version: str | None = None,
          gpu_memory_mib: int | None = None, step: float = 0.01, concurrency: int | None = None,
          **flags: Any) -> Curve:
    """Plan the start at every ``step`` of the engine's memory knob (``step`` .. 0.99) and mark the values.

    >>> c = curve("moonshotai/Kimi-K2.5", "rtx-pro-6000", tp_size=8, mem_fraction_static=0.55,
    ...           pre_load_free_gib=94, post_load_free_gib=21.7, step=0.05)
    >>> c.knob, c.user_value, c.point_at(0.55).starts, c.min_viable
    ('--mem-fraction-static', 0.55, False, 0.7702)
    """
    if engine not in KNOBS:
        raise FlagError(f"unknown engine {engine!r}", field="engine", fix="use 'sglang' or 'vllm'")
    if not 0.001 <= step <= 0.5:
        raise FlagError(f"curve step {step} is out of range", field="step", fix="use 0.001 .. 0.5")
    name, flag = KNOBS[engine]
    user_value = flags.pop(name, None)
    common = dict(engine=engine, engine_version=engine_version, gpu_memory_mib=gpu_memory_mib, **flags)
    common["check_fixes"] = False  # the curve reads no fixes (re-planning them would cost ~10 plans a point)
    base = plan(model, gpu, **common)  # engine default (input errors surface here, once)
    cache: dict[float, CurvePoint] = {}

    def at(value: float) -> CurvePoint:
        value = round(value, 6)
        if value not in cache:
            try:
                cache[value] = _point(value, plan(model, gpu, **common, **{name: value}), None)
            except KvscopeError as exc:
                cache[value] = _point(value, None, str(exc))
        return cache[value]

    n = int(round(0.99 / step))
    grid = [at(round(i * step, 6)) for i in range(1, n + 1)]
    base_dict = base.to_dict()
    default = base_dict.get(name)
    for v in (default, user_value):
        if isinstance(v, (int, float)) and 0 < v <= 1:
            at(v)
    min_viable = _first(grid, lambda p: p.starts, at)
    ctx = base_dict.get("context_len") if engine == "sglang" else base_dict.get("max_model_len")
    sized = lambda p: min_viable is not None and p.value >= min_viable  # noqa: E731 -- KV sizing passed
    full = _first(grid, lambda p: sized(p) and (p.kv_cache_tokens or 0) >= ctx, at) if ctx else None
    conc = (_first(grid, lambda p: sized(p) and (p.kv_cache_tokens or 0) >= ctx * concurrency, at)
            if ctx and concurrency else None)
    above = _fails_above(grid, at)
    neg = next((p.value for p in grid if p.starts and p.runtime_headroom_bytes is not None
                and p.runtime_headroom_bytes < 0), None)
    below = at(round(min_viable - step / 10, 6)).error if min_viable and min_viable > step / 10 else None
    if below is None and min_viable is None and not grid[-1].starts:
        below = grid[-1].error
    slope = base_dict.get("tokens_per_0_01_mem_fraction")
    return Curve(engine, flag, tuple(cache[k] for k in sorted(cache)), default, user_value, min_viable, below,
                 above, at(above).error if above is not None else None, ctx, full, concurrency, conc, neg, slope if isinstance(slope, int) else None)
