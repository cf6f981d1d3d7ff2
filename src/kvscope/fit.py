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

import math
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from .engines.sglang import memory as sgl_mem
from .engines.sglang.args import SGLangArgs, at_least
from .engines.sglang.args import parse_version as sglang_version
from .engines.sglang.plan import Measured, plan_sglang
from .engines.vllm import memory as vllm_mem
from .engines.vllm.args import KV_CACHE_DTYPES, VllmFlags, version_traits
from .engines.vllm.plan import plan_vllm
from .errors import FlagError, KvscopeError
from .hardware.gpus import GPU
from .model.spec import ModelSpec
from .timeline import Timeline
from .units import GiB, gib_to_bytes

ENGINES = ("sglang", "vllm")
FP8 = {"sglang": "fp8_e4m3", "vllm": "fp8"}
KNOB = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}

# SGLangArgs / VllmFlags fields a user may fix (``--set name=value``), with the engine's flag name.
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
# Result types


@dataclass(frozen=True)
class Candidate:
    """One layout to try. ``dp`` engines: data-parallel replicas (each ``tp x pp`` GPUs) or, with
    ``dp_attention`` (SGLang), attention-DP workers inside one TP group (``dp`` = ``tp``)."""

    engine: str
    tp: int
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    kv_cache_dtype: str = "auto"

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

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "tp": self.tp, "pp": self.pp, "dp": self.dp, "dp_attention": self.dp_attention,
                "kv_cache_dtype": self.kv_cache_dtype, "num_gpus": self.num_gpus, "label": self.label}


@dataclass(frozen=True)
class FitOption:
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

    @property
    def above_default(self) -> bool:
        return self.engine_default is not None and self.fraction > self.engine_default + 1e-9

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_dict(), "knob": self.knob, "fraction": self.fraction,
                "engine_default": self.engine_default,
                "fraction_max": self.fraction_max, "kv_cache_tokens": self.kv_cache_tokens,
                "kv_cache_tokens_max": self.kv_cache_tokens_max, "max_running_requests": self.max_running_requests,
                "concurrency": self.concurrency, "headroom": self.headroom, "tokens_per_step": self.tokens_per_step,
                "flags": dict(self.flags), "command": self.command, "plan_command": self.plan_command,
                "estimated": list(self.estimated), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class Rejection:
    """A candidate that cannot meet the target, with the one-line reason."""

    candidate: Candidate
    reason: str
    capacity_ratio: float | None = None  # best capacity it reaches / target (None: it never starts)
    fraction: float | None = None  # the knob value that best capacity was measured at
    kv_cache_tokens: int | None = None

    def line(self) -> str:
        return f"{self.candidate.label}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_dict(), "reason": self.reason, "capacity_ratio": self.capacity_ratio,
                "fraction": self.fraction, "kv_cache_tokens": self.kv_cache_tokens}


@dataclass(frozen=True)
class Shortfall:
    """Why nothing fits, the closest option, and what would make it fit."""

    closest: Rejection | None
    needs_more_kv: float | None  # target / best capacity
    suggestions: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"closest": self.closest.to_dict() if self.closest else None, "needs_more_kv": self.needs_more_kv,
                "suggestions": list(self.suggestions)}


@dataclass(frozen=True)
class FitResult:
    engine: str
    engine_version: str
    model: str
    gpu: str
    gpus: int
    context_tokens: int
    concurrency: int
    step: float
    options: tuple[FitOption, ...]
    rejected: tuple[Rejection, ...]
    shortfall: Shortfall | None = None
    plan_calls: int = 0

    @property
    def target_tokens(self) -> int:
        return self.context_tokens * self.concurrency

    @property
    def fits(self) -> bool:
        return bool(self.options)

    @property
    def best(self) -> FitOption | None:
        return self.options[0] if self.options else None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "engine_version": self.engine_version, "model": self.model, "gpu": self.gpu,
                "gpus": self.gpus, "context_tokens": self.context_tokens, "concurrency": self.concurrency,
                "target_tokens": self.target_tokens, "step": self.step, "fits": self.fits,
                "options": [o.to_dict() for o in self.options], "rejected": [r.to_dict() for r in self.rejected],
                "shortfall": self.shortfall.to_dict() if self.shortfall else None, "plan_calls": self.plan_calls}


def _candidate_from_dict(d: Mapping[str, Any]) -> Candidate:
    return Candidate(d["engine"], int(d["tp"]), int(d.get("pp", 1)), int(d.get("dp", 1)), bool(d.get("dp_attention")),
                     d.get("kv_cache_dtype", "auto"))


def _rejection_from_dict(d: Mapping[str, Any]) -> Rejection:
    return Rejection(_candidate_from_dict(d["candidate"]), d["reason"], d.get("capacity_ratio"), d.get("fraction"),
                     d.get("kv_cache_tokens"))


def fit_result_from_dict(d: Mapping[str, Any]) -> FitResult:
    """Inverse of ``FitResult.to_dict`` (``kvscope fit --json`` output back into objects)."""
    opts = tuple(FitOption(
        candidate=_candidate_from_dict(o["candidate"]), knob=o["knob"], fraction=o["fraction"],
        fraction_max=o["fraction_max"], kv_cache_tokens=o["kv_cache_tokens"], kv_cache_tokens_max=o["kv_cache_tokens_max"],
        max_running_requests=o.get("max_running_requests"), concurrency=o["concurrency"], headroom=o["headroom"],
        tokens_per_step=o.get("tokens_per_step"), flags=dict(o["flags"]), command=o["command"],
        plan_command=o["plan_command"], engine_default=o.get("engine_default"),
        estimated=tuple(o.get("estimated", ())), warnings=tuple(o.get("warnings", ())),
    ) for o in d.get("options", ()))
    sf = d.get("shortfall")
    shortfall = None if sf is None else Shortfall(
        _rejection_from_dict(sf["closest"]) if sf.get("closest") else None, sf.get("needs_more_kv"),
        tuple(sf.get("suggestions", ())))
    return FitResult(d["engine"], d["engine_version"], d["model"], d["gpu"], int(d["gpus"]), int(d["context_tokens"]),
                     int(d["concurrency"]), float(d["step"]), opts,
                     tuple(_rejection_from_dict(r) for r in d.get("rejected", ())), shortfall,
                     int(d.get("plan_calls", 0)))


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
    exact_weights: Callable[[int], int] | None = None  # tp -> exact weights per rank (SGLang, pp 1)
    step: float = 0.01
    model_ref: str | None = None  # what the user typed (for the command lines)
    gpu_ref: str | None = None  # None with gpu_memory_mib: a custom GPU
    gpu_memory_mib: int | None = None
    allow_dp_attention: bool = True  # SGLang, MLA models
    allow_dp_replicas: bool = True


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
        known = sgl_mem.KV_DTYPES if r.engine == "sglang" else KV_CACHE_DTYPES
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
        auto_bytes = (sgl_mem.kv_cache_dtype(r.spec, "auto")[1] if r.engine == "sglang"
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


# ----------------------------------------------------------------------------------------------
# SGLang


class _Counter:
    def __init__(self) -> None:
        self.calls = 0


def _sglang_running_flag(c: Candidate, r: FitRequest) -> int:
    """``--max-running-requests``: SGLang divides it by the DP-attention size (``max_num_reqs``,
    kv_cache_configurator.py @ v0.5.23), so round up to a multiple; each plain-DP replica reads it whole."""
    per = c.requests_per_engine(r.concurrency)
    return per * c.dp if c.dp_attention else per


def _sglang_flags(c: Candidate, r: FitRequest, frac: float) -> dict[str, Any]:
    """``sglang.launch_server`` flags. Full names (``--tp-size``): 0.5.14+ builds the parser from field
    names, so the abbreviation ``--tp`` is not guaranteed. DP-attention: ``--attn-dp-size N`` from 0.5.23
    (``--enable-dp-attention`` is deprecated there, server_args.py @ v0.5.23), ``--dp-size N
    --enable-dp-attention`` before."""
    f: dict[str, Any] = {"--tp-size": c.tp}
    if c.pp > 1:
        f["--pp-size"] = c.pp
    if c.dp > 1:
        if c.dp_attention and at_least(sglang_version(r.version), "0.5.23"):
            f["--attn-dp-size"] = c.dp
        else:
            f["--dp-size"] = c.dp
            if c.dp_attention:
                f["--enable-dp-attention"] = True
    f["--mem-fraction-static"] = frac
    f["--context-length"] = r.context_tokens
    f["--max-running-requests"] = _sglang_running_flag(c, r)
    if c.kv_cache_dtype != "auto":
        f["--kv-cache-dtype"] = c.kv_cache_dtype
    for k, v in r.fixed.items():
        if k != "mem_fraction_static":
            f[SGLANG_SETTABLE[k]] = v
    return f


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


def _headroom(t: Timeline) -> int:
    return min(rk.decision.get("runtime_headroom_bytes_estimated") or 0 for rk in t.ranks)


def _eval_sglang(r: FitRequest, c: Candidate, counter: _Counter) -> FitOption | Rejection:
    step = r.step
    per_engine = c.requests_per_engine(r.concurrency)
    need = r.context_tokens * per_engine
    base = SGLangArgs(**{k: v for k, v in r.fixed.items() if k != "mem_fraction_static"})
    base = replace(base, tp_size=c.tp, pp_size=c.pp, dp_size=c.dp, enable_dp_attention=c.dp_attention,
                   kv_cache_dtype=c.kv_cache_dtype, context_length=r.context_tokens,
                   max_running_requests=_sglang_running_flag(c, r))
    exact = r.exact_weights(c.tp) if (r.exact_weights is not None and c.pp == 1 and not c.dp_attention) else None
    cache: dict[int | None, Timeline] = {}

    def plan_at(k: int | None) -> Timeline:
        t = cache.get(k)
        if t is None:
            counter.calls += 1
            frac = None if k is None else round(k * step, 6)
            t = plan_sglang(r.spec, r.gpu, replace(base, mem_fraction_static=frac), r.version, r.measured, None, exact)
            cache[k] = t
        return t

    fixed = r.fixed.get("mem_fraction_static")
    if fixed is not None:
        lo = hi = max(1, round(fixed / step))
        step = fixed / lo  # a fixed fraction off the grid is used exactly
    else:
        lo, hi = 1, int(round(1 / step)) - 1
    try:
        first = plan_at(None if fixed is None else lo)  # the engine's default fraction: also reported
    except KvscopeError as exc:
        return Rejection(c, str(exc))

    def meets(k: int) -> bool:
        t = plan_at(k)
        return bool(t.starts) and t.kv_cache_tokens >= need and (t.max_running_requests or 0) >= per_engine

    def headroom_ok(k: int) -> bool:
        t = plan_at(k)
        return not t.starts or _headroom(t) >= 0  # below the start the constraint does not bind (monotone)

    x = first.extra
    pre_bytes = x.get("pre_model_load_bytes") or 0
    guess = None
    if pre_bytes and first.kv_cell_bytes:
        d = first.ranks[0].decision
        reserve = (d.get("mm_reservation_gib") or 0.0) + (d.get("mamba_state_gib") or 0.0)
        f = sgl_mem.min_viable_fraction(pre_model_load_gib=pre_bytes / GiB,
                                        available_gpu_gib=(x.get("available_gpu_bytes") or 0) / GiB,
                                        reserve_gib=reserve, need_bytes=need * first.kv_cell_bytes)
        guess = math.ceil(f / step - 1e-9) if math.isfinite(f) else None
    k_min = _first_true(lo, hi, meets, guess)
    if k_min is None and not plan_at(hi).starts:  # tokens grow with the fraction: nothing starts below
        return _sglang_reject(r, c, need, per_engine, plan_at, None, None, step, hi)
    k_ref = k_min if k_min is not None else hi
    hr = _headroom(plan_at(k_ref))  # slack shrinks by pre x step per grid step
    k_max_guess = k_ref + math.floor(hr / (pre_bytes * step)) if pre_bytes else None
    k_max = _last_true(lo, hi, headroom_ok, k_max_guess)
    if k_max is not None and not plan_at(k_max).starts:
        k_max = None  # never starts with headroom >= 0
    if k_min is None or k_max is None or k_min > k_max:
        return _sglang_reject(r, c, need, per_engine, plan_at, k_min, k_max, step, hi)
    t, tm = plan_at(k_min), plan_at(k_max)
    frac = _fmt_fraction(k_min * step, step)
    flags = _sglang_flags(c, r, frac)
    default = None if fixed is not None else first.extra.get("mem_fraction_static")
    return FitOption(
        candidate=c, knob=KNOB["sglang"], fraction=frac, fraction_max=_fmt_fraction(k_max * step, step),
        kv_cache_tokens=t.kv_cache_tokens, kv_cache_tokens_max=tm.kv_cache_tokens,
        max_running_requests=t.max_running_requests,
        concurrency=round(t.kv_cache_tokens * c.dp / r.context_tokens, 4),
        headroom=round(tm.kv_cache_tokens / need, 4), tokens_per_step=t.extra.get("tokens_per_0_01_mem_fraction"),
        flags=flags,
        command=f"python -m sglang.launch_server --model-path {shlex.quote(r.model_ref or r.spec.name)} "
                f"{_render_flags(flags)}",
        plan_command=_plan_cli(r, flags, "sglang"),
        engine_default=None if default is None else round(default, 4),
        estimated=tuple(t.estimated) + ("runtime_headroom (fraction_max)",), warnings=tuple(t.warnings))


def _sglang_reject(r: FitRequest, c: Candidate, need: int, per_engine: int, plan_at, k_min: int | None,
                   k_max: int | None, step: float, top: int) -> Rejection:
    est = " (est.)" if "weights" in plan_at(top).estimated else ""
    per = " per DP worker" if c.dp_attention else " per replica" if c.dp > 1 else ""
    if k_max is None:  # never starts with runtime headroom >= 0
        t = plan_at(top)
        w, pre = t.weights_bytes or 0, t.extra.get("pre_model_load_bytes") or 0
        if not t.starts:
            return Rejection(c, f"weights {w / GiB:.1f} GiB per rank leave no KV budget in the {pre / GiB:.1f} GiB "
                                f"free after init{est} even at --mem-fraction-static {_fmt_fraction(top * step, step)}")
        return Rejection(c, f"no --mem-fraction-static both starts and keeps runtime headroom >= 0 (est.): weights "
                            f"{w / GiB:.1f} GiB per rank of {pre / GiB:.1f} GiB free{est}")
    tm = plan_at(k_max)
    ratio = round(tm.kv_cache_tokens / need, 4)
    fmax = _fmt_fraction(k_max * step, step)
    if k_min is None:
        if tm.kv_cache_tokens >= need:  # the tokens suffice; the request limit does not
            why = f"max_running_requests {tm.max_running_requests} < {per_engine}{per}"
        else:
            why = f"{tm.kv_cache_tokens:,} KV tokens < {need:,} needed{per} ({need / max(tm.kv_cache_tokens, 1):.2f}x short)"
        return Rejection(c, f"at --mem-fraction-static {fmax} (highest with est. runtime headroom >= 0): {why}",
                         ratio, fmax, tm.kv_cache_tokens)
    fmin = _fmt_fraction(k_min * step, step)
    return Rejection(c, f"needs --mem-fraction-static >= {fmin} for {need:,} tokens{per}, but above {fmax} the est. "
                        f"runtime headroom (CUDA graphs, activations) is negative", ratio, fmax, tm.kv_cache_tokens)


# ----------------------------------------------------------------------------------------------
# vLLM


def _vllm_flags(c: Candidate, r: FitRequest, util: float) -> dict[str, Any]:
    f: dict[str, Any] = {"--tensor-parallel-size": c.tp}
    if c.pp > 1:
        f["--pipeline-parallel-size"] = c.pp
    if c.dp > 1:
        f["--data-parallel-size"] = c.dp
    f["--gpu-memory-utilization"] = util
    f["--max-model-len"] = r.context_tokens
    f["--max-num-seqs"] = c.requests_per_engine(r.concurrency)
    if c.kv_cache_dtype != "auto":
        f["--kv-cache-dtype"] = c.kv_cache_dtype
    for k, v in r.fixed.items():
        if k == "gpu_memory_utilization":
            continue
        if k == "enable_prefix_caching" and v is False:
            f["--no-enable-prefix-caching"] = True
        else:
            f[VLLM_SETTABLE[k]] = v
    return f


def _request_ok(t: Timeline) -> bool:
    """vLLM's ``request_memory`` check: free memory at startup >= total x utilization."""
    d = t.ranks[0].decision
    return d["initial_free_bytes"] >= d["requested_memory_bytes"]


def _eval_vllm(r: FitRequest, c: Candidate, counter: _Counter) -> FitOption | Rejection:
    step = r.step
    per_engine = c.requests_per_engine(r.concurrency)
    base = VllmFlags(**{k: v for k, v in r.fixed.items() if k != "gpu_memory_utilization"})
    base = replace(base, tensor_parallel_size=c.tp, pipeline_parallel_size=c.pp, data_parallel_size=c.dp,
                   kv_cache_dtype=c.kv_cache_dtype, max_model_len=r.context_tokens, max_num_seqs=per_engine)
    cache: dict[int, Timeline] = {}

    def plan_at(k: int) -> Timeline:
        t = cache.get(k)
        if t is None:
            counter.calls += 1
            t = plan_vllm(r.spec, r.gpu, replace(base, gpu_memory_utilization=round(k * step, 6)), r.version)
            cache[k] = t
        return t

    fixed = r.fixed.get("gpu_memory_utilization")
    default_util = version_traits(r.version).default_gpu_memory_utilization
    if fixed is not None:
        lo = hi = max(1, round(fixed / step))
        step = fixed / lo
    else:
        lo, hi = 1, int(math.floor(1 / step + 1e-9))
    k0 = max(lo, min(hi, round(default_util / step)))
    try:
        t0 = plan_at(k0)
    except KvscopeError as exc:
        return Rejection(c, str(exc))
    d0 = t0.ranks[0].decision
    total = d0["requested_memory_bytes"] / (k0 * step)  # CUDA total, as the plan used it
    k_max = _last_true(lo, hi, lambda k: _request_ok(plan_at(k)),
                       int(d0["initial_free_bytes"] / total / step) if total else None)

    def meets(k: int) -> bool:
        t = plan_at(k)
        return (t.extra.get("max_concurrency") or 0) >= per_engine and (bool(t.starts) or not _request_ok(t))

    guess = None
    per_req = d0.get("needed_memory_bytes") or 0
    if total and per_req:  # available KV bytes grow by ``total`` per unit of utilization
        need_bytes = per_req * per_engine + (t0.extra.get("bytes_per_block") or 0)
        guess = k0 + math.ceil((need_bytes - (t0.extra.get("available_kv_cache_bytes") or 0)) / total / step)
    k_min = _first_true(lo, hi, meets, guess)
    if k_max is None:
        return Rejection(c, f"even --gpu-memory-utilization {_fmt_fraction(lo * step, step)} requests more than the "
                            f"{d0['initial_free_bytes'] / GiB:.1f} GiB free at startup (est.)")
    if k_min is not None and k_min <= k_max and plan_at(k_min).starts:
        t, tm = plan_at(k_min), plan_at(k_max)
        util = _fmt_fraction(k_min * step, step)
        flags = _vllm_flags(c, r, util)
        return FitOption(
            candidate=c, knob=KNOB["vllm"], fraction=util, fraction_max=_fmt_fraction(k_max * step, step),
            kv_cache_tokens=t.kv_cache_tokens or 0, kv_cache_tokens_max=tm.kv_cache_tokens or 0,
            max_running_requests=t.max_running_requests,
            concurrency=round((t.extra.get("max_concurrency") or 0.0) * c.dp, 4),
            headroom=round((tm.extra.get("max_concurrency") or 0) / per_engine, 4), tokens_per_step=None,
            flags=flags, command=f"vllm serve {shlex.quote(r.model_ref or r.spec.name)} {_render_flags(flags)}",
            plan_command=_plan_cli(r, flags, "vllm"), engine_default=None if fixed is not None else default_util,
            estimated=tuple(t.estimated), warnings=tuple(t.warnings))
    return _vllm_reject(r, c, per_engine, plan_at, k_min, k_max, step)


def _vllm_reject(r: FitRequest, c: Candidate, per_engine: int, plan_at, k_min: int | None, k_max: int,
                 step: float) -> Rejection:
    tm = plan_at(k_max)
    umax = _fmt_fraction(k_max * step, step)
    conc = tm.extra.get("max_concurrency") or 0.0
    ratio = round(conc / per_engine, 4)
    est = " (est.)" if tm.estimated else ""
    per = " per replica" if c.dp > 1 else ""
    if (tm.extra.get("available_kv_cache_bytes") or 0) <= 0:
        req = tm.ranks[0].decision["requested_memory_bytes"]
        return Rejection(c, f"weights {(tm.weights_bytes or 0) / GiB:.1f} GiB per rank + profile peaks exceed "
                            f"{umax} x {req / (k_max * step) / GiB:.1f} GiB = {req / GiB:.1f} GiB, the most vLLM "
                            f"accepts (free at startup{est})", ratio, umax, tm.kv_cache_tokens)
    if k_min is None or k_min > k_max:
        return Rejection(c, f"at --gpu-memory-utilization {umax} (all free memory{est}): concurrency {conc:.2f} < "
                            f"{per_engine}{per} at --max-model-len {r.context_tokens} "
                            f"({per_engine / max(conc, 1e-9):.2f}x short)", ratio, umax, tm.kv_cache_tokens)
    t = plan_at(k_min)
    return Rejection(c, f"does not start at --gpu-memory-utilization {_fmt_fraction(k_min * step, step)}: "
                        f"{(t.error or '').splitlines()[0][:160]}", ratio, umax, tm.kv_cache_tokens)


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
    ev = _eval_sglang if r.engine == "sglang" else _eval_vllm
    for c in cands:
        if c.pp > r.spec.num_hidden_layers:  # plan_vllm has no check (a stage without layers); SGLang raises
            res: FitOption | Rejection = Rejection(
                c, f"pp_size {c.pp} exceeds num_hidden_layers {r.spec.num_hidden_layers}")
        else:
            try:
                res = ev(r, c, counter)
            except KvscopeError as exc:  # raised inside the search (the first plan call is caught in ev)
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


def fit(r: FitRequest) -> FitResult:
    """Search the candidates for ``r``; options ranked best first, every other candidate rejected with a reason."""
    version = validate_request(r)
    counter = _Counter()
    ok, bad = _evaluate(r, candidates(r), counter)
    shortfall = None if ok else _shortfall(r, bad, counter)
    return FitResult(engine=r.engine, engine_version=version, model=r.spec.name, gpu=r.gpu.key, gpus=r.gpus,
                     context_tokens=r.context_tokens, concurrency=r.concurrency, step=r.step, options=tuple(ok),
                     rejected=tuple(bad), shortfall=shortfall, plan_calls=counter.calls)


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
           "fit_result_from_dict", "parse_set", "validate_request"]
