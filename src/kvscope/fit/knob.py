"""The memory knob of one engine for one candidate (``_Knob``), and the one search over it (``_eval``)."""

from __future__ import annotations

import abc
import shlex
from typing import Any, ClassVar

from ..errors import KvscopeError
from ..timeline import Timeline
from .cmdline import _fmt_fraction, _plan_cli, _render_flags
from .request import FitRequest
from .results import Candidate, FitOption, Rejection
from .search import _first_true, _last_true

KNOB = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}


class _Counter:
    def __init__(self) -> None:
        self.calls = 0


class _Knob(abc.ABC):
    """One engine's memory knob for one candidate: the grid, the plan at a grid point (memoised),
    the target check, the upper-end check, the first guesses, and the option / rejection it gives.

    ``_eval`` runs the same search for every engine: plan at ``first_key()`` (None: the engine's
    default); the smallest grid point that ``meets`` the target (False...True in k; gallop from
    ``guess_min``); unless ``hopeless``, the largest that is ``upper_ok`` (True...False in k; gallop
    from ``guess_max``), kept if ``usable_max``; an option when the first is at or below the second
    (its flags from ``flags``, its engine figures from ``figures``), else ``reject``'s reason."""

    engine: ClassVar[str]
    fixed_key: ClassVar[str]  # the ``--set`` field that fixes the knob
    launcher: ClassVar[str]  # the launch command before the model

    def __init__(self, r: FitRequest, c: Candidate, counter: _Counter) -> None:
        self.r, self.c, self.counter = r, c, counter
        self.flag = KNOB[self.engine]
        self.per_engine = c.requests_per_engine(r.concurrency)
        self.fixed = r.fixed.get(self.fixed_key)
        self.step = r.step
        if self.fixed is not None:
            self.lo = self.hi = max(1, round(self.fixed / self.step))
            self.step = self.fixed / self.lo  # a fixed value off the grid is used exactly
        else:
            self.lo, self.hi = 1, self._top(r.step)
        self._plans: dict[Any, Timeline] = {}  # grid point (None: the default) or ("value", off-grid value)

    def plan(self, k: int | None) -> Timeline:
        """The plan at grid point ``k`` (None: the engine's default value)."""
        t = self._plans.get(k)
        if t is None:
            self.counter.calls += 1
            t = self._plan(None if k is None else round(k * self.step, 6))
            self._plans[k] = t
        return t

    def plan_at(self, value: float) -> Timeline:
        """The plan at an off-grid value (the engine's default, rounded up to the flag's 3 decimals)."""
        t = self._plans.get(("value", value))
        if t is None:
            self.counter.calls += 1
            t = self._plan(value)
            self._plans[("value", value)] = t
        return t

    def value(self, k: int) -> float:
        return _fmt_fraction(k * self.step, self.step)

    def hopeless(self, k_min: int | None) -> bool:
        return False

    def impossible(self, first: Timeline) -> Rejection | None:
        """A rejection decided in closed form from the first plan (no search), else None."""
        return None

    def usable_max(self, k_max: int | None) -> int | None:
        return k_max

    def default_value(self, first: Timeline) -> float | None:
        """The engine's default value of the knob for this layout (None when the knob is fixed)."""
        return None

    def default_plan(self, first: Timeline) -> Timeline:
        """The plan at the engine's default value."""
        return first

    def recommended(self, first: Timeline, k_min: int, k_max: int) -> tuple[float, Timeline]:
        """The engine's default when the target fits there, else the floor ``k_min``: the value the
        command sets and its plan (``above``: the default does not start; then the floor)."""
        d = self.default_value(first)
        if d is not None and k_min * self.step <= d + 1e-9:
            t = self.default_plan(first)
            if t.starts:
                return d, t
        return self.value(k_min), self.plan(k_min)

    def option(self, first: Timeline, k_min: int, k_max: int) -> FitOption:
        value, t = self.recommended(first, k_min, k_max)
        tm, tf = self.plan(k_max), self.plan(k_min)
        flags = self.flags(value)
        model = shlex.quote(self.r.model_ref or self.r.spec.name)
        warnings = tuple(t.warnings)
        if value > self.value(k_max) + 1e-9:
            warnings += (f"{self.flag} {value} (the engine's default) is above {self.value(k_max)}, where "
                         f"kvscope's estimated runtime headroom ends; lower it toward the floor "
                         f"{self.value(k_min)} if the engine runs out of memory under load",)
        return FitOption(
            candidate=self.c, knob=self.flag, fraction=self.value(k_min), fraction_max=self.value(k_max),
            recommended=value, kv_cache_tokens_floor=tf.kv_cache_tokens or 0,
            max_running_requests=t.max_running_requests, flags=flags,
            command=f"{self.launcher} {model} {_render_flags(flags)}",
            plan_command=_plan_cli(self.r, flags, self.engine), warnings=warnings,
            **self.figures(first, t, tm))

    @abc.abstractmethod
    def _top(self, step: float) -> int: ...  # the highest grid point when the knob is not fixed
    @abc.abstractmethod
    def _plan(self, value: float | None) -> Timeline: ...  # the engine simulation at that value
    @abc.abstractmethod
    def first_key(self) -> int | None: ...
    @abc.abstractmethod
    def flags(self, value: float) -> dict[str, Any]: ...
    @abc.abstractmethod
    def meets(self, k: int) -> bool: ...
    @abc.abstractmethod
    def upper_ok(self, k: int) -> bool: ...
    @abc.abstractmethod
    def guess_min(self, first: Timeline) -> int | None: ...
    @abc.abstractmethod
    def guess_max(self, first: Timeline, k_min: int | None) -> int | None: ...
    @abc.abstractmethod
    def figures(self, first: Timeline, t: Timeline, tm: Timeline) -> dict[str, Any]: ...
    @abc.abstractmethod
    def reject(self, first: Timeline, k_min: int | None, k_max: int | None) -> Rejection: ...


def _eval(knob: _Knob) -> FitOption | Rejection:
    """The search, the same for every engine (see ``_Knob``)."""
    try:
        first = knob.plan(knob.first_key())  # also gives the engine's default
    except KvscopeError as exc:
        return Rejection(knob.c, str(exc))
    early = knob.impossible(first)
    if early is not None:
        return early
    lo, hi = knob.lo, knob.hi
    k_min = _first_true(lo, hi, knob.meets, knob.guess_min(first))
    if knob.hopeless(k_min):
        return knob.reject(first, None, None)
    k_max = knob.usable_max(_last_true(lo, hi, knob.upper_ok, knob.guess_max(first, k_min)))
    if k_min is None or k_max is None or k_min > k_max or not knob.plan(k_min).starts:
        return knob.reject(first, k_min, k_max)
    return knob.option(first, k_min, k_max)
