"""Use-case: the inverse of ``plan`` — which flags (and how many GPUs) serve a target context × concurrency.

For every candidate layout — TP × PP, data-parallel replicas (TP × DP), DP-attention for MLA models on
SGLang, KV dtype auto / fp8 — the search runs the engine simulation itself (``plan_sglang`` /
``plan_vllm``) on a grid of the memory knob and keeps the smallest value that meets the target. With
``dp`` engines (replicas or DP-attention workers) each one serves ``ceil(concurrency / dp)`` requests.

* SGLang: the smallest ``--mem-fraction-static`` (grid ``step``, default 0.01) whose plan starts with
  ``max_total_num_tokens >= context x ceil(concurrency / dp)`` and ``max_running_requests >=
  ceil(concurrency / dp)`` under ``--context-length context --max-running-requests …``. Upper end:
  the largest fraction whose estimated runtime headroom (slack − req_to_token − CUDA graphs −
  activations, all from the plan) is still >= 0; past it SGLang starts but may OOM later.
* vLLM: the smallest ``--gpu-memory-utilization`` whose plan starts with vLLM's own "Maximum
  concurrency" >= ``ceil(concurrency / dp)`` under ``--max-model-len context --max-num-seqs …``.
  Upper end: the largest value vLLM accepts (requested memory <= free memory at startup).

Each quantity searched is monotone in the knob (more fraction, more KV, less runtime slack), so a
guess from one plan (``min_viable_fraction`` / the linear vLLM budget) is checked and corrected by
galloping + bisection: typically 3-8 plan calls per candidate. No memory arithmetic is repeated here;
every figure reported comes from a Timeline. A candidate the engine refuses (a raised
``KvscopeError``: heads / KV heads not divisible, PP over layers …) is rejected with that message.

Ranking of working options: fewest GPUs, then unquantized KV before fp8 (same GPU count), then the
most headroom (KV capacity at the upper end of the knob / target).
"""

from __future__ import annotations

import abc
import math
import os
import shlex
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence

from .engines.sglang import kv_cache as sgl_kv_cache
from .engines.sglang import memory as sgl_mem
from .engines.sglang.args import SGLangArgs
from .engines.sglang.decision import SGLangDecision, SGLangPlanExtra
from .engines.sglang.release import parse_version as sglang_version
from .engines.sglang.release import release as sglang_release
from .engines.sglang.plan import Measured, plan_sglang
from .engines.vllm import memory as vllm_mem
from .engines.vllm.args import KV_CACHE_DTYPES, VllmFlags
from .engines.vllm.decision import VllmDecision, VllmPlanExtra
from .engines.vllm.release import version_traits
from .engines.vllm.plan import plan_vllm
from .errors import FlagError, KvscopeError
from ._callable import make_callable
from .catalog import load_model_source
from .hardware.gpus import GPU, get_gpu
from .model.load import exact_weights_per_rank_fn, load_spec
from .model.spec import ModelSpec
from .timeline import Timeline
from .units import GiB, gib_to_bytes

ENGINES = ("sglang", "vllm")
FP8 = {"sglang": "fp8_e4m3", "vllm": "fp8"}
KNOB = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}

# SGLangArgs / VllmFlags fields a user may fix (``--set name=value``) -> the engine's flag name. Limited to
# flags ``kvscope plan`` also takes, so that every option's ``plan_command`` reproduces it exactly.
SGLANG_SETTABLE = {
    "page_size": "--page-size", "chunked_prefill_size": "--chunked-prefill-size",
    "cuda_graph_max_bs": "--cuda-graph-max-bs", "disable_cuda_graph": "--disable-cuda-graph",
    "disable_radix_cache": "--disable-radix-cache", "moe_a2a_backend": "--moe-a2a-backend", "ep_size": "--ep-size",
    "speculative_algorithm": "--speculative-algorithm",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens", "mem_fraction_static": "--mem-fraction-static",
}
VLLM_SETTABLE = {
    "block_size": "--block-size", "enforce_eager": "--enforce-eager",
    "max_num_batched_tokens": "--max-num-batched-tokens", "enable_prefix_caching": "--enable-prefix-caching",
    "enable_expert_parallel": "--enable-expert-parallel", "gpu_memory_utilization": "--gpu-memory-utilization",
}


# ----------------------------------------------------------------------------------------------
# Result types: JSON keys are the field names (plus the read-only properties a class lists in
# ``_KEYS``), in ``_KEYS`` order; ``from_dict`` reads the fields back, ``_LOAD`` converting nested ones.


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
    ``dp_attention`` (SGLang), attention-DP workers inside one TP group (``dp`` = ``tp``)."""

    engine: str
    tp: int
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    kv_cache_dtype: str = "auto"

    _KEYS = ("engine", "tp", "pp", "dp", "dp_attention", "kv_cache_dtype", "num_gpus", "label")
    _LOAD = {"tp": int, "pp": int, "dp": int, "dp_attention": bool}

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
        return s + ("" if self.kv_cache_dtype == "auto" else f" {self.kv_cache_dtype} KV")


@dataclass(frozen=True)
class FitOption(_Json):
    """A configuration that meets the target, at the smallest value of the memory knob."""

    candidate: Candidate
    knob: str  # "--mem-fraction-static" | "--gpu-memory-utilization"
    fraction: float  # smallest grid value meeting the target (what the command uses)
    fraction_max: float  # largest usable value (SGLang: est. runtime headroom >= 0; vLLM: <= free at start)
    kv_cache_tokens: int  # per engine (replica / DP-attention worker) at ``fraction``
    kv_cache_tokens_max: int  # at ``fraction_max``
    max_running_requests: int | None
    concurrency: float  # requests of ``context`` tokens all engines hold at ``fraction`` (vLLM: its own figure x dp)
    headroom: float  # capacity at ``fraction_max`` / target (>= 1)
    tokens_per_step: int | None  # KV tokens one grid step buys (SGLang's per-0.01 figure)
    flags: Mapping[str, Any]  # engine flag -> value, as on the command line
    command: str  # the launch command line
    plan_command: str  # the ``kvscope plan`` line that reproduces this option
    engine_default: float | None = None  # the knob's value if the flag were left out (this layout)
    estimated: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    _KEYS = ("candidate", "knob", "fraction", "engine_default", "fraction_max", "kv_cache_tokens",
             "kv_cache_tokens_max", "max_running_requests", "concurrency", "headroom", "tokens_per_step",
             "flags", "command", "plan_command", "estimated", "warnings")
    _LOAD = {"candidate": Candidate.from_dict, "flags": dict, "estimated": tuple, "warnings": tuple}

    @property
    def above_default(self) -> bool:
        return self.engine_default is not None and self.fraction > self.engine_default + 1e-9


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

    _KEYS = ("engine", "engine_version", "model", "gpu", "gpus", "context_tokens", "concurrency",
             "target_tokens", "step", "fits", "options", "rejected", "shortfall", "plan_calls")
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


# ----------------------------------------------------------------------------------------------
# Monotone search on an integer grid


def _first_true(lo: int, hi: int, pred: Callable[[int], bool], guess: int | None = None) -> int | None:
    """Smallest k in [lo, hi] with ``pred(k)`` for a predicate False…False True…True; None if none.
    A guess is checked first (and its neighbour), then the bracket grows by doubling, then bisection."""
    if lo > hi:
        return None
    if guess is not None:
        g = min(max(guess, lo), hi)
        if pred(g):
            hi_t, d = g, 1  # hi_t: known True
            while True:
                k = max(lo, hi_t - d)
                if k == hi_t:
                    return hi_t
                if not pred(k):
                    lo = k + 1
                    hi = hi_t
                    break
                hi_t = k
                if k == lo:
                    return lo
                d *= 2
        else:
            lo_f, d = g, 1  # lo_f: known False
            while True:
                k = min(hi, lo_f + d)
                if k == lo_f:
                    return None
                if pred(k):
                    lo, hi = lo_f + 1, k
                    break
                lo_f = k
                if k == hi:
                    return None
                d *= 2
    elif not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _last_true(lo: int, hi: int, pred: Callable[[int], bool], guess: int | None = None) -> int | None:
    """Largest k in [lo, hi] with ``pred(k)`` for a predicate True…True False…False; None if none."""
    k = _first_true(-hi, -lo, lambda j: pred(-j), None if guess is None else -guess)
    return None if k is None else -k


# ----------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class FitRequest:
    """What to fit. ``fixed``: SGLangArgs / VllmFlags field values held constant (see *_SETTABLE)."""

    spec: ModelSpec
    gpu: GPU
    gpus: int
    context_tokens: int
    concurrency: int
    engine: str = "sglang"
    version: str | None = None
    kv_cache_dtype: str | None = None  # None: try auto and fp8
    tp: int | None = None  # None: search
    pp: int | None = None  # None: search
    dp: int | None = None  # data-parallel replicas; None: search (1 with PP > 1)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    measured: Measured | None = None  # SGLang measured free memory; needs tp and pp fixed
    # tp -> exact weights per rank (SGLang, pp 1). None: read from the safetensors headers when
    # ``model_ref`` is a checkpoint directory (as ``kvscope plan`` does), else the estimate.
    exact_weights: Callable[[int], int] | None = None
    step: float = 0.01
    model_ref: str | None = None  # what the user typed (for the command lines)
    gpu_ref: str | None = None  # None with gpu_memory_mib: a custom GPU
    gpu_memory_mib: int | None = None
    allow_dp_attention: bool = True  # SGLang, MLA models
    allow_dp_replicas: bool = True


def fit_request(model: str, gpu: str | None = None, *, context: int, concurrency: int, gpus: int = 8,
                engine: str = "sglang", engine_version: str | None = None, gpu_memory_mib: int | None = None,
                kv_cache_dtype: str | None = None, tp: int | None = None, pp: int | None = None,
                dp: int | None = None, fixed: Mapping[str, Any] | None = None,
                pre_load_free_gib: Sequence[float] | None = None,
                post_load_free_gib: Sequence[float] | None = None, step: float = 0.01,
                allow_dp_attention: bool = True) -> FitRequest:
    """A ``FitRequest`` from a model reference (bundled id, config.json or checkpoint directory) and a
    GPU name, as ``kvscope fit`` builds it. Measured free memory is in GiB as the log prints it (one
    value or one per rank); ``fixed`` holds SGLangArgs / VllmFlags fields (see *_SETTABLE)."""
    spec, _ = load_spec(model)
    g = get_gpu(gpu, gpu_memory_mib)
    measured = None
    if pre_load_free_gib or post_load_free_gib:
        measured = Measured(
            pre_load_free_bytes=tuple(gib_to_bytes(x) for x in pre_load_free_gib) if pre_load_free_gib else None,
            post_load_free_bytes=tuple(gib_to_bytes(x) for x in post_load_free_gib) if post_load_free_gib else None)
    return FitRequest(
        spec=spec, gpu=g, gpus=gpus, context_tokens=context, concurrency=concurrency, engine=engine,
        version=engine_version, kv_cache_dtype=kv_cache_dtype, tp=tp, pp=pp, dp=dp, fixed=dict(fixed or {}),
        measured=measured, step=step, model_ref=model, gpu_ref=gpu, gpu_memory_mib=gpu_memory_mib,
        allow_dp_attention=allow_dp_attention)


def validate_request(r: FitRequest) -> str:
    """Bad input as one-line FlagErrors (field + fix). Returns the resolved engine version."""
    if r.engine not in ENGINES:
        raise FlagError(f"unknown engine {r.engine!r}", field="--engine", fix="use sglang or vllm")
    for name, val in (("--gpus", r.gpus), ("--context", r.context_tokens), ("--concurrency", r.concurrency)):
        if not isinstance(val, int) or val < 1:
            raise FlagError(f"must be a positive integer, got {val!r}", field=name, fix="e.g. --gpus 8 --context 32768 --concurrency 16")
    for name, val in (("--tp", r.tp), ("--pp", r.pp), ("--dp", r.dp)):
        if val is not None and val < 1:
            raise FlagError(f"must be >= 1, got {val}", field=name, fix="pass a positive integer or leave it out")
    world = (r.tp or 1) * (r.pp or 1) * (r.dp or 1)
    if world > r.gpus:
        raise FlagError(f"--tp {r.tp or 1} x --pp {r.pp or 1} x --dp {r.dp or 1} needs more than --gpus {r.gpus}",
                        field="--gpus", fix=f"raise --gpus to {world} or lower --tp/--pp/--dp")
    if not 0 < r.step < 0.5:
        raise FlagError(f"step must be in (0, 0.5), got {r.step}", field="--step", fix="e.g. 0.01")
    limit = r.spec.max_position_embeddings
    if r.context_tokens > limit:
        raise FlagError(f"{r.context_tokens} tokens exceed the model's context ({limit}, max_position_embeddings)",
                        field="--context", fix=f"use --context <= {limit}")
    settable = SGLANG_SETTABLE if r.engine == "sglang" else VLLM_SETTABLE
    for k in r.fixed:
        if k not in settable:
            raise FlagError(f"{k!r} cannot be fixed for {r.engine}", field="--set",
                            fix=f"use one of {', '.join(sorted(settable))}")
    if r.measured is not None and (r.tp is None or r.pp is None or r.engine != "sglang"):
        raise FlagError("measured free memory belongs to one layout", field="--pre-load-free-gib",
                        fix="pass --tp and --pp with it (SGLang only)")
    if r.kv_cache_dtype is not None:
        known = sgl_kv_cache.KV_DTYPES if r.engine == "sglang" else KV_CACHE_DTYPES
        if r.kv_cache_dtype.lower() not in known:
            raise FlagError(f"unknown --kv-cache-dtype {r.kv_cache_dtype!r} for {r.engine}", field="--kv-cache-dtype",
                            fix=f"use one of {', '.join(known)}")
    if r.engine == "sglang":
        return str(sglang_version(r.version))
    return version_traits(r.version).version


def _powers(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    if n not in out:
        out.append(n)
    return out


def candidates(r: FitRequest, gpus: int | None = None) -> list[Candidate]:
    """Layouts with at most ``gpus`` GPUs: TP x PP and TP x DP-replicas over powers of two (and the count
    itself), DP-attention (dp = tp) for MLA models on SGLang; KV dtype auto and fp8 unless fixed or the
    checkpoint's KV is already 1 byte."""
    n = gpus or r.gpus
    tps = [r.tp] if r.tp else _powers(n)
    pps = [r.pp] if r.pp else _powers(n)
    if r.dp:
        dps = [r.dp]
    else:
        dps = _powers(n) if r.allow_dp_replicas else [1]
    if r.kv_cache_dtype is not None:
        dtypes = [r.kv_cache_dtype]
    else:
        auto_bytes = (sgl_kv_cache.kv_cache_dtype(r.spec, "auto")[1] if r.engine == "sglang"
                      else vllm_mem.kv_dtype_bytes(r.spec, "auto"))
        dtypes = ["auto"] if auto_bytes <= 1 else ["auto", FP8[r.engine]]
    dp_attn = (r.engine == "sglang" and r.allow_dp_attention and r.spec.is_mla and r.pp in (None, 1)
               and r.dp is None and r.measured is None)  # measured free memory belongs to the plain-TP layout
    out = []
    for kv in dtypes:
        for tp in tps:
            for pp in pps:
                for dp in dps:
                    if tp * pp * dp <= n and (dp == 1 or pp == 1 or r.dp):
                        out.append(Candidate(r.engine, tp, pp, dp, False, kv))
            if dp_attn and tp > 1:
                out.append(Candidate(r.engine, tp, 1, tp, True, kv))
    return out


# ----------------------------------------------------------------------------------------------
# Command lines


def _flag_value(v: Any) -> str:
    return shlex.quote(str(v))


def _render_flags(flags: Mapping[str, Any]) -> str:
    parts = []
    for k, v in flags.items():
        if v is True:
            parts.append(k)
        elif v is False or v is None:
            continue
        else:
            parts.append(f"{k} {_flag_value(v)}")
    return " ".join(parts)


def _fmt_fraction(x: float, step: float) -> float:
    """A grid value with the grid's decimals (0.93, not 0.9300000000000001); an off-grid fixed value as given."""
    digits = max(2, -int(math.floor(math.log10(step) + 1e-9)))
    y = round(x, digits)
    return y if abs(y - x) < 1e-9 else round(x, 6)


def _gib_arg(b: int) -> str:
    """Shortest GiB text that ``gib_to_bytes`` turns back into exactly ``b`` bytes."""
    for digits in range(1, 17):
        text = f"{b / GiB:.{digits}f}".rstrip("0").rstrip(".")
        if gib_to_bytes(float(text)) == b:
            return text
    return repr(b / GiB)


def _plan_cli(r: FitRequest, flags: Mapping[str, Any], engine: str) -> str:
    """The ``kvscope plan`` line for an option (its parser takes the engines' flag names)."""
    base = f"kvscope plan {shlex.quote(r.model_ref or r.spec.name)}"
    if r.gpu_ref or r.gpu_memory_mib is None:
        base += f" --gpu {shlex.quote(r.gpu_ref or r.gpu.key)}"
    if r.gpu_memory_mib is not None:
        base += f" --gpu-memory-mib {r.gpu_memory_mib}"
    if engine == "vllm":
        base += " --engine vllm"
    if r.version:
        base += f" --engine-version {shlex.quote(r.version)}"
    plan_flags: dict[str, Any] = {}
    for k, v in flags.items():
        if k == "--attn-dp-size":
            plan_flags["--dp"] = v
            plan_flags["--enable-dp-attention"] = True
        else:
            plan_flags[k] = v
    if r.measured is not None:
        for name, vals in (("--pre-load-free-gib", r.measured.pre_load_free_bytes),
                           ("--post-load-free-gib", r.measured.post_load_free_bytes)):
            if vals:
                plan_flags[name] = ",".join(_gib_arg(b) for b in vals)
    return f"{base} {_render_flags(plan_flags)}"


# ----------------------------------------------------------------------------------------------
# The memory knob, one per engine, and the one search over it


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
        self._plans: dict[int | None, Timeline] = {}

    def plan(self, k: int | None) -> Timeline:
        """The plan at grid point ``k`` (None: the engine's default value)."""
        t = self._plans.get(k)
        if t is None:
            self.counter.calls += 1
            t = self._plan(None if k is None else round(k * self.step, 6))
            self._plans[k] = t
        return t

    def value(self, k: int) -> float:
        return _fmt_fraction(k * self.step, self.step)

    def hopeless(self, k_min: int | None) -> bool:
        return False

    def usable_max(self, k_max: int | None) -> int | None:
        return k_max

    def option(self, first: Timeline, k_min: int, k_max: int) -> FitOption:
        t, tm = self.plan(k_min), self.plan(k_max)
        value = self.value(k_min)
        flags = self.flags(value)
        model = shlex.quote(self.r.model_ref or self.r.spec.name)
        return FitOption(
            candidate=self.c, knob=self.flag, fraction=value, fraction_max=self.value(k_max),
            max_running_requests=t.max_running_requests, flags=flags,
            command=f"{self.launcher} {model} {_render_flags(flags)}",
            plan_command=_plan_cli(self.r, flags, self.engine), warnings=tuple(t.warnings),
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
    lo, hi = knob.lo, knob.hi
    k_min = _first_true(lo, hi, knob.meets, knob.guess_min(first))
    if knob.hopeless(k_min):
        return knob.reject(first, None, None)
    k_max = knob.usable_max(_last_true(lo, hi, knob.upper_ok, knob.guess_max(first, k_min)))
    if k_min is None or k_max is None or k_min > k_max or not knob.plan(k_min).starts:
        return knob.reject(first, k_min, k_max)
    return knob.option(first, k_min, k_max)


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
                           None, self.exact)

    def first_key(self) -> int | None:
        return None if self.fixed is None else self.lo

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
        return not t.starts or _headroom(t) >= 0  # below the start the constraint does not bind (monotone)

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

    def hopeless(self, k_min: int | None) -> bool:
        return k_min is None and not self.plan(self.hi).starts  # tokens grow with the fraction

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
            if not t.starts:
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
        self.default = version_traits(r.version).default_gpu_memory_utilization
        self.k0 = max(self.lo, min(self.hi, round(self.default / self.step)))

    def _top(self, step: float) -> int:
        return int(math.floor(1 / step + 1e-9))

    def _plan(self, value: float | None) -> Timeline:
        return plan_vllm(self.r.spec, self.r.gpu, replace(self.base, gpu_memory_utilization=value), self.r.version)

    def first_key(self) -> int:
        return self.k0

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
        return _request_ok(self.plan(k))

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


_KNOBS: dict[str, type[_Knob]] = {"sglang": _SGLangKnob, "vllm": _VllmKnob}


# ----------------------------------------------------------------------------------------------
# The search


def _with_fp8_note(r: FitRequest, o: FitOption) -> FitOption:
    if not o.candidate.kv_quantized or r.gpu.fp8_tflops is not None:
        return o
    note = (f"{r.gpu.name} has no native fp8: the KV cache is stored in fp8 and upcast for attention; "
            "check that your attention backend supports an fp8 KV cache on this GPU")
    return replace(o, warnings=o.warnings + (note,))


def _evaluate(r: FitRequest, cands: Sequence[Candidate], counter: _Counter) -> tuple[list[FitOption], list[Rejection]]:
    ok: list[FitOption] = []
    bad: list[Rejection] = []
    knob = _KNOBS[r.engine]
    for c in cands:
        if c.pp > r.spec.num_hidden_layers:  # plan_vllm has no check (a stage without layers); SGLang raises
            res: FitOption | Rejection = Rejection(
                c, f"pp_size {c.pp} exceeds num_hidden_layers {r.spec.num_hidden_layers}")
        else:
            try:
                res = _eval(knob(r, c, counter))
            except KvscopeError as exc:  # raised inside the search (the first plan call is caught in _eval)
                res = Rejection(c, str(exc))
            except ArithmeticError as exc:  # a simulation bug must not hide the other candidates
                res = Rejection(c, f"kvscope plan failed on this layout ({type(exc).__name__}: {exc}); "
                                   f"please report it")
        if isinstance(res, FitOption):
            ok.append(_with_fp8_note(r, res))
        else:
            bad.append(res)
    ok.sort(key=lambda o: (o.candidate.num_gpus, o.candidate.kv_quantized, -o.headroom, o.candidate.pp,
                           o.candidate.dp, o.candidate.tp))
    return ok, bad


def _shortfall(r: FitRequest, bad: list[Rejection], counter: _Counter) -> Shortfall:
    scored = [b for b in bad if b.capacity_ratio is not None]
    closest = max(scored, key=lambda b: (b.capacity_ratio, -b.candidate.num_gpus)) if scored else None
    ratio = closest.capacity_ratio if closest else None
    tips: list[str] = []
    if r.kv_cache_dtype is not None and r.kv_cache_dtype == "auto":
        r8 = replace(r, kv_cache_dtype=FP8[r.engine])
        ok, _ = _evaluate(r8, candidates(r8), counter)
        if ok:
            o = ok[0]
            tips.append(f"fp8 KV fits on {o.candidate.num_gpus} GPU(s): {o.candidate.label} ({o.knob} {o.fraction})")
    if r.tp is None and r.pp is None and r.dp is None and r.measured is None:
        prev, n = r.gpus, r.gpus * 2
        while n <= max(64, r.gpus * 2):
            ok, _ = _evaluate(r, [c for c in candidates(r, n) if c.num_gpus > prev], counter)
            if ok:
                o = ok[0]
                tips.append(f"use {o.candidate.num_gpus} GPUs: {o.candidate.label} ({o.knob} {o.fraction})")
                break
            prev, n = n, n * 2
    if closest is not None and closest.kv_cache_tokens:
        c = closest.candidate
        if r.engine == "sglang":
            tokens = closest.kv_cache_tokens * c.dp
            conc, ctx = tokens // r.context_tokens, tokens // r.concurrency
        else:
            conc, ctx = int((closest.capacity_ratio or 0) * c.requests_per_engine(r.concurrency)) * c.dp, 0
        if conc >= 1 or ctx >= 1:
            tips.append(f"or lower the target on {c.label}: "
                        + (f"{conc} requests at {r.context_tokens:,} tokens" if conc >= 1 else "")
                        + (" or " if conc >= 1 and ctx >= 1 else "")
                        + (f"{r.concurrency} requests at {ctx:,} tokens" if ctx >= 1 else ""))
    return Shortfall(closest, round(1 / ratio, 4) if ratio else None, tuple(tips))


def _with_exact_weights(r: FitRequest) -> FitRequest:
    """``r`` with ``exact_weights`` from the checkpoint's safetensors headers, when ``model_ref`` is a
    checkpoint directory and the engine is SGLang (its plan takes exact weights); else ``r``."""
    if r.exact_weights is not None or r.engine != "sglang" or not r.model_ref:
        return r
    if not os.path.isdir(os.path.expanduser(r.model_ref)):
        return r
    exact = exact_weights_per_rank_fn(load_model_source(r.model_ref), r.spec)
    return r if exact is None else replace(r, exact_weights=exact)


def fit(r: FitRequest) -> FitResult:
    """Search the candidates for ``r``; options ranked best first, every other candidate rejected with a reason."""
    r = _with_exact_weights(r)
    version = validate_request(r)
    counter = _Counter()
    ok, bad = _evaluate(r, candidates(r), counter)
    shortfall = None if ok else _shortfall(r, bad, counter)
    return FitResult(engine=r.engine, engine_version=version, model=r.spec.name, gpu=r.gpu.key, gpus=r.gpus,
                     context_tokens=r.context_tokens, concurrency=r.concurrency, step=r.step, options=tuple(ok),
                     rejected=tuple(bad), shortfall=shortfall, plan_calls=counter.calls)


def fit_model(model: str, gpu: str | None = None, **options: Any) -> FitResult:
    """The library call ``kvscope.fit(model, gpu, context=..., concurrency=..., gpus=8, engine=...)``:
    ``fit(fit_request(model, gpu, **options))``, what ``kvscope fit`` runs and renders."""
    return fit(fit_request(model, gpu, **options))


def parse_set(items: Sequence[str] | None) -> dict[str, Any]:
    """``name=value`` pairs (SGLangArgs / VllmFlags field names; dashes allowed) to typed values."""
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise FlagError(f"expected NAME=VALUE, got {item!r}", field="--set", fix="e.g. --set page_size=64")
        k, v = item.split("=", 1)
        k = k.strip().lstrip("-").replace("-", "_")
        low = v.strip().lower()
        val: Any
        if low in ("true", "yes", "on"):
            val = True
        elif low in ("false", "no", "off"):
            val = False
        else:
            try:
                val = int(v)
            except ValueError:
                try:
                    val = float(v)
                except ValueError:
                    val = v.strip()
        out[k] = val
    return out


__all__ = ["Candidate", "FitOption", "FitRequest", "FitResult", "Rejection", "Shortfall", "candidates", "fit",
           "fit_request", "fit_result_from_dict", "parse_set", "validate_request"]


make_callable(__name__, fit_model)  # kvscope.fit(model, gpu, ...) is fit_model(...)
