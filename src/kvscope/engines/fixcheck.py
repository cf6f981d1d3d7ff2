"""Every fix a plan prints starts when it is applied (issue 18: advice an engineer would launch).

A fix's value comes from a formula (the engine's budget solved for the memory knob, the CUDA-graph
deficit …), and a formula can land where the start fails for another reason: a recommendation so
high that CUDA-graph capture no longer fits after the KV cache, a floor so low that a hybrid model's
state pool admits no request. ``checked_fixes`` plans the start again with each fix applied (the
engine's own simulation, the other flags unchanged) and

* keeps a fix that starts;
* moves a memory-knob value that does not start to the nearest value that does, on the knob's grid,
  found by bisection with real plans: below the working range to the least that starts (the floor),
  above it to the largest that starts — and, when that value no longer holds what the fix promised,
  says so plainly (what the largest value that starts holds, and the alternatives the engine gives);
* drops any other fix that does not start on its own.

Engine-neutral: the engines pass their simulation as ``replan`` and describe what a start holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ..timeline import Fix, Timeline

Replan = Callable[[Mapping[str, Any]], Optional[Timeline]]  # flag -> value changes; None: refused


@dataclass(frozen=True)
class Knob:
    """The engine's memory knob as its fixes print it."""

    flag: str  # --mem-fraction-static / --gpu-memory-utilization
    step: float  # the grid the fixes print (0.001 / 0.01)
    top: float  # the largest value the flag takes
    scan: int = 10  # grid steps per probe when searching upwards for the first value that starts


@dataclass(frozen=True)
class Advice:
    """What the engine knows about its own fixes."""

    claim: Callable[[Fix], Optional[Callable[[Timeline], bool]]]  # what a recommendation promises to hold
    held: Callable[[Timeline], str]  # what a start holds, in the engine's words
    # the other ways out: (the largest value that starts, its plan, replan, the value the fix wanted)
    alternatives: Callable[[float, Timeline, Replan, float], str]
    unchecked: tuple[str, ...] = ()  # flags kept as printed (a layout change against measured inputs)
    doubling: tuple[str, ...] = ()  # parallel sizes: a floor that does not start is doubled until one does


def short_error(error: str | None) -> str:
    """The first sentence-ish of an engine error (its own text, cut before the advice list)."""
    text = (error or "").split(" Possible solutions")[0].split(". Try")[0].rstrip(".")
    return text if len(text) <= 180 else text[:177] + "..."


def checked_fixes(fixes: tuple[Fix, ...], knob: Knob, replan: Replan, advice: Advice,
                  current: float | None = None) -> tuple[Fix, ...]:
    """``fixes`` with every value re-planned (see the module docstring). ``current``: the knob value of
    the plan itself when it starts (a known starting point for the bisection)."""
    cache: dict[int, Optional[Timeline]] = {}

    def at(i: int) -> Optional[Timeline]:
        if i not in cache:
            cache[i] = replan({knob.flag: _value(i, knob)})
        return cache[i]

    def ok(i: int) -> bool:
        t = at(i)
        return t is not None and bool(t.starts)

    top = int(round(knob.top / knob.step))
    values = [_index(f.value, knob) for f in fixes if f.flag == knob.flag]
    if not values or all(ok(i) for i in values):
        return _unique([g for f in fixes for g in ([f] if f.flag == knob.flag else _other(f, replan, advice))])
    lowest = min([i for i in values if ok(i)] + ([_index(current, knob)] if current is not None else []),
                 default=None)
    if lowest is None:
        lowest = _first_above(min(values), top, knob, ok)
    if lowest is None:  # every fix is above the working range (a pool or the graphs do not fit after the KV)
        lowest = _last_start_below(min(values), knob, ok)
    out: list[Fix] = []
    for f in fixes:
        if f.flag != knob.flag:
            out += _other(f, replan, advice)
            continue
        i = _index(f.value, knob)
        if ok(i):
            out.append(f)
        elif lowest is not None and i < lowest:
            least = _first_above(i, lowest, knob, ok) or lowest  # ok(lowest): found at or below it
            out.append(Fix(knob.flag, _value(least, knob), f"floor: the least that starts ({knob.flag} "
                           f"{_value(least - 1, knob)} fails: {short_error(_error(at(least - 1)))})"))
        elif lowest is not None:
            out.append(_edge_fix(f, _last_below(lowest, i, ok), knob, at, replan, advice))
    return _unique(out)


def _edge_fix(f: Fix, e: int, knob: Knob, at: Callable[[int], Optional[Timeline]], replan: Replan,
              advice: Advice) -> Fix:
    """The largest value that starts, in place of ``f`` (which fails above it)."""
    t, above = at(e), at(e + 1)
    value = _value(e, knob)
    fails = f"{knob.flag} {_value(e + 1, knob)} fails: {short_error(_error(above))}"
    claim = advice.claim(f)
    if claim is not None and t is not None and claim(t):
        return Fix(knob.flag, value, f"{f.why.split(' (')[0]} (the largest that starts; {fails})")
    what = f.why.split(": ", 1)[1].split(" (")[0] if claim is not None and ": " in f.why else ""
    text = f"largest that starts: {advice.held(t) if t is not None else 'nothing held'}"
    text += (f"; with the other flags as given, no {knob.flag} both starts and {what} ({fails})" if what
             else f" ({fails})")
    alt = advice.alternatives(value, t, replan, float(f.value)) if t is not None else ""
    return Fix(knob.flag, value, text + (f"; {alt}" if alt else ""))


def _other(f: Fix, replan: Replan, advice: Advice) -> list[Fix]:
    """A fix of another flag: kept when it starts; a parallel-size floor that does not start becomes the
    least doubling that does (with the other flags as given); anything else that does not start is dropped."""
    if f.flag in advice.unchecked:
        return [f]
    t = replan({f.flag: f.value})
    if _starts(t):
        return [f]
    if f.flag not in advice.doubling or not f.why.startswith("floor") or not isinstance(f.value, int):
        return []
    n = f.value * 2
    while n <= 64:
        r = replan({f.flag: n})
        if _starts(r):
            return [Fix(f.flag, n, f"floor: the least {f.flag} that starts with the other flags as given "
                                   f"({f.flag} {f.value} fails: {short_error(_error(t))})")]
        n *= 2
    return []


def _first_above(i: int, top: int, knob: Knob, ok: Callable[[int], bool]) -> int | None:
    """The least grid value above ``i`` that starts (probes every ``knob.scan`` steps, then bisects)."""
    prev = i
    j = i + 1
    while j <= top:
        if ok(j):
            return _last_below(prev, j, lambda k: not ok(k)) + 1 if j - prev > 1 else j
        prev, j = j, min(j + knob.scan, top) if j < top else top + 1
    return None


def _last_start_below(i: int, knob: Knob, ok: Callable[[int], bool]) -> int | None:
    """The largest grid value below ``i`` that starts (probes every ``knob.scan`` steps, then bisects)."""
    prev, j = i, i - knob.scan
    while prev > 1:
        j = max(j, 1)
        if ok(j):
            return _last_below(j, prev, ok)
        prev, j = j, j - knob.scan
    return None


def _last_below(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest grid value in [lo, hi) with ok, given ok(lo) and not ok(hi)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _index(value: float, knob: Knob) -> int:
    return int(round(float(value) / knob.step))


def _value(i: int, knob: Knob) -> float:
    digits = max(0, len(f"{knob.step:g}".split(".")[-1])) if "." in f"{knob.step:g}" else 0
    return round(i * knob.step, digits)


def _starts(t: Optional[Timeline]) -> bool:
    return t is not None and bool(t.starts)


def _error(t: Optional[Timeline]) -> str | None:
    return None if t is None else t.error


def _unique(fixes: list[Fix]) -> tuple[Fix, ...]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in fixes:
        key = (f.flag, repr(f.value)) if f.why.startswith(("floor", "largest")) else (f.flag, f.why)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return tuple(out)
