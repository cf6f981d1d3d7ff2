"""The ``kvscope fit`` result types: Candidate, FitOption, Rejection, Shortfall, FitResult.

JSON keys are the field names (plus the read-only properties a class lists in ``_KEYS``), in
``_KEYS`` order; ``from_dict`` reads the fields back, ``_LOAD`` converting nested ones. The schema
generator (schema.py) reads the field annotations in this module, so every type they name lives here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Mapping


def _plain(v: Any) -> Any:
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return dict(v)
    return v


class _Json:
    _KEYS: ClassVar[tuple[str, ...]] = ()
    _LOAD: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    def to_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in self._KEYS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        load = cls._LOAD
        return cls(**{k: (load[k](v) if k in load and v is not None else v)
                      for k, v in d.items() if k in names})


def _many(cls: Any) -> Callable[[Any], tuple]:
    return lambda items: tuple(cls.from_dict(x) for x in items)


@dataclass(frozen=True)
class Candidate(_Json):
    """One layout to try. ``dp`` engines: data-parallel replicas (each ``tp x pp`` GPUs) or, with
    ``dp_attention`` (SGLang), attention-DP workers inside one TP group (``dp`` = ``tp``).
    ``expert_parallel`` (vLLM, MoE, dp > 1): ``--enable-expert-parallel``; the DP engines' expert
    layers span all ``dp x tp`` GPUs (attention-DP in vLLM's terms)."""

    engine: str
    tp: int
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    kv_cache_dtype: str = "auto"
    expert_parallel: bool = False

    _KEYS = ("engine", "tp", "pp", "dp", "dp_attention", "expert_parallel", "kv_cache_dtype", "num_gpus", "label")
    _LOAD = {"tp": int, "pp": int, "dp": int, "dp_attention": bool, "expert_parallel": bool}

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * (1 if self.dp_attention else self.dp)

    @property
    def kv_quantized(self) -> bool:
        return self.kv_cache_dtype != "auto"

    def requests_per_engine(self, concurrency: int) -> int:
        return math.ceil(concurrency / self.dp)

    @property
    def label(self) -> str:
        s = f"TP{self.tp}" + (f" PP{self.pp}" if self.pp > 1 else "")
        if self.dp > 1:
            s += f" DP-attn{self.dp}" if self.dp_attention else f" DP{self.dp}"
        if self.expert_parallel:
            s += " EP"
        return s + ("" if self.kv_cache_dtype == "auto" else f" {self.kv_cache_dtype} KV")


@dataclass(frozen=True)
class Speed(_Json):
    """Estimated speed of an option (``kvscope perf``'s model, composed over the layout: fit/speed.py)."""

    decode_tokens_per_s: float  # aggregate over all engines of the option, at the target concurrency
    per_request_tokens_per_s: float  # one request's decode rate at that load
    ttft_s: float  # prefill of one prompt of the target context on an idle engine
    bound: str  # "memory" | "compute" (decode)
    estimated: bool = True
    decode_tokens_per_s_range: tuple[float, float] | None = None  # (slow, fast), perf's parameter uncertainty
    ttft_range_s: tuple[float, float] | None = None  # (fast, slow)

    _KEYS = ("decode_tokens_per_s", "per_request_tokens_per_s", "ttft_s", "bound", "estimated",
             "decode_tokens_per_s_range", "ttft_range_s")
    _LOAD = {"decode_tokens_per_s_range": tuple, "ttft_range_s": tuple}


@dataclass(frozen=True)
class FitOption(_Json):
    """A configuration that meets the target. ``recommended`` is what the command sets: the engine's
    default for this layout, or more when the target needs more (vLLM: at most the largest value it
    accepts); ``fraction`` is the floor, the smallest grid value that starts and holds the target."""

    candidate: Candidate
    knob: str  # "--mem-fraction-static" | "--gpu-memory-utilization"
    fraction: float  # the floor: smallest grid value meeting the target (less runtime slack than the default)
    fraction_max: float  # largest usable value (SGLang: est. runtime headroom >= 0; vLLM: <= free at start)
    recommended: float  # what the command uses: max(floor, engine default) (vLLM: capped at fraction_max)
    kv_cache_tokens: int  # per engine (replica / DP-attention worker) at ``recommended``
    kv_cache_tokens_floor: int  # at ``fraction`` (the floor)
    kv_cache_tokens_max: int  # at ``fraction_max``
    max_running_requests: int | None
    concurrency: float  # requests of ``context`` tokens all engines hold at ``recommended`` (vLLM: its figure x dp)
    headroom: float  # capacity at ``fraction_max`` / target (>= 1)
    tokens_per_step: int | None  # KV tokens one grid step buys (SGLang's per-0.01 figure)
    flags: Mapping[str, Any]  # engine flag -> value, as on the command line
    command: str  # the launch command line
    plan_command: str  # the ``kvscope plan`` line that reproduces this option
    engine_default: float | None = None  # the knob's value if the flag were left out (this layout)
    estimated: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    speed: Speed | None = None  # estimated decode throughput / TTFT (None: perf cannot model the layout)

    _KEYS = ("candidate", "knob", "fraction", "engine_default", "recommended", "fraction_max", "kv_cache_tokens",
             "kv_cache_tokens_floor", "kv_cache_tokens_max", "max_running_requests", "concurrency", "headroom",
             "tokens_per_step", "speed", "flags", "command", "plan_command", "estimated", "warnings")
    _LOAD = {"candidate": Candidate.from_dict, "flags": dict, "estimated": tuple, "warnings": tuple,
             "speed": Speed.from_dict}

    @property
    def floor(self) -> float:
        return self.fraction

    @property
    def above_default(self) -> bool:
        """The command sets more than the engine's default (beyond rounding it up to the flag's 3 decimals)."""
        if self.engine_default is None:
            return False
        return self.recommended > math.ceil(self.engine_default * 1000 - 1e-6) / 1000 + 1e-9


@dataclass(frozen=True)
class Rejection(_Json):
    """A candidate that cannot meet the target, with the one-line reason."""

    candidate: Candidate
    reason: str
    capacity_ratio: float | None = None  # best capacity it reaches / target (None: it never starts)
    fraction: float | None = None  # the knob value that best capacity was measured at
    kv_cache_tokens: int | None = None

    _KEYS = ("candidate", "reason", "capacity_ratio", "fraction", "kv_cache_tokens")
    _LOAD = {"candidate": Candidate.from_dict}

    def line(self) -> str:
        return f"{self.candidate.label}: {self.reason}"


@dataclass(frozen=True)
class Shortfall(_Json):
    """Why nothing fits, the closest option, and what would make it fit."""

    closest: Rejection | None = None
    needs_more_kv: float | None = None  # target / best capacity
    suggestions: tuple[str, ...] = ()

    _KEYS = ("closest", "needs_more_kv", "suggestions")
    _LOAD = {"closest": Rejection.from_dict, "suggestions": tuple}


@dataclass(frozen=True)
class FitResult(_Json):
    engine: str
    engine_version: str
    model: str
    gpu: str
    gpus: int
    context_tokens: int
    concurrency: int
    step: float
    options: tuple[FitOption, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    shortfall: Shortfall | None = None
    plan_calls: int = 0
    optimize: str = "throughput"  # the ranking: throughput | latency | gpus

    _KEYS = ("engine", "engine_version", "model", "gpu", "gpus", "context_tokens", "concurrency",
             "target_tokens", "step", "optimize", "fits", "options", "rejected", "shortfall", "plan_calls")
    _LOAD = {"gpus": int, "context_tokens": int, "concurrency": int, "step": float, "plan_calls": int,
             "options": _many(FitOption), "rejected": _many(Rejection), "shortfall": Shortfall.from_dict}

    @property
    def target_tokens(self) -> int:
        return self.context_tokens * self.concurrency

    @property
    def fits(self) -> bool:
        return bool(self.options)

    @property
    def best(self) -> FitOption | None:
        return self.options[0] if self.options else None


def fit_result_from_dict(d: Mapping[str, Any]) -> FitResult:
    """Inverse of ``FitResult.to_dict`` (``kvscope fit --json`` output back into objects)."""
    return FitResult.from_dict(d)
