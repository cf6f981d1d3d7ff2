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

Each option's command sets the engine's default for the layout when the target fits there (else the
smallest value that meets it: the floor, always reported as ``fraction``). Layouts follow engine
practice (``layouts``): TP within a node before PP, PP only when nothing else holds the target, fp8 KV
only where unquantized KV falls short, DP-attention (SGLang, MLA) and DP + expert parallel (vLLM, MoE).
Ranking (``optimize``): estimated decode throughput at the target concurrency (default), time to
first token at the target context, or fewest GPUs — speeds from ``kvscope perf`` (``speed``).

Modules: ``results`` (the result types), ``request`` (FitRequest, validation, ``--set``), ``layouts``
(candidates), ``search`` (grid search), ``knob`` / ``sglang_knob`` / ``vllm_knob`` (the memory knob per
engine and the one search over it), ``cmdline`` (launch and plan command lines), ``speed`` (perf's
estimate per layout); this module: the use-case (evaluate, rank, shortfall) and the library call.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any, Sequence

from .._callable import make_callable
from ..catalog import load_model_source
from ..errors import KvscopeError
from ..model.load import exact_weights_per_rank_fn
# re-exported: every name of the former fit.py stays importable from kvscope.fit
from .cmdline import _flag_value, _fmt_fraction, _gib_arg, _plan_cli, _render_flags  # noqa: F401
from .knob import KNOB, _Counter, _eval, _Knob  # noqa: F401
from .layouts import _powers, candidates  # noqa: F401
from .request import (ENGINES, FP8, SGLANG_SETTABLE, VLLM_SETTABLE, FitRequest,  # noqa: F401
                      fit_request, parse_set, validate_request)
from .results import (Candidate, FitOption, FitResult, Rejection, Shortfall, Speed, _Json, _many,  # noqa: F401
                      _plain, fit_result_from_dict)
from .search import _first_true, _last_true  # noqa: F401
from .speed import option_speed

_KNOB_MODULES = {"sglang": ("sglang_knob", "_SGLangKnob"), "vllm": ("vllm_knob", "_VllmKnob")}
_LAZY = {"_headroom": "sglang_knob", "_SGLangKnob": "sglang_knob", "_request_ok": "vllm_knob",
         "_VllmKnob": "vllm_knob"}


def _knob_class(engine: str) -> type[_Knob]:
    """The engine's knob; its engine modules are imported on first use (an SGLang fit never loads vLLM's)."""
    import importlib
    mod, name = _KNOB_MODULES[engine]
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


def __getattr__(name: str) -> Any:  # the former fit.py names, importable without loading both engines
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

def _with_fp8_note(r: FitRequest, o: FitOption) -> FitOption:
    if not o.candidate.kv_quantized or r.gpu.fp8_tflops is not None:
        return o
    note = (f"{r.gpu.name} has no native fp8: the KV cache is stored in fp8 and upcast for attention; "
            "check that your attention backend supports an fp8 KV cache on this GPU")
    return replace(o, warnings=o.warnings + (note,))


def _try(r: FitRequest, c: Candidate, counter: _Counter) -> FitOption | Rejection:
    if c.pp > r.spec.num_hidden_layers:  # plan_vllm has no check (a stage without layers); SGLang raises
        return Rejection(c, f"pp_size {c.pp} exceeds num_hidden_layers {r.spec.num_hidden_layers}")
    try:
        return _eval(_knob_class(r.engine)(r, c, counter))
    except KvscopeError as exc:  # raised inside the search (the first plan call is caught in _eval)
        return Rejection(c, str(exc))
    except ArithmeticError as exc:  # a simulation bug must not hide the other candidates
        return Rejection(c, f"kvscope plan failed on this layout ({type(exc).__name__}: {exc}); please report it")


def _search(r: FitRequest, cands: Sequence[Candidate], counter: _Counter) -> tuple[list[FitOption], list[Rejection]]:
    """Each candidate through the engine's knob search. A replica layout whose one-engine layout has no
    KV budget at all (weights) is rejected with that reason without planning it again (same ranks)."""
    ok: list[FitOption] = []
    bad: list[Rejection] = []
    no_budget: dict[tuple, str] = {}
    for c in cands:
        key = (c.tp, c.pp, c.kv_cache_dtype)
        if not (c.dp_attention or c.expert_parallel) and c.dp > 1 and key in no_budget:  # same ranks as dp 1
            bad.append(Rejection(c, no_budget[key]))
            continue
        res = _try(r, c, counter)
        if isinstance(res, FitOption):
            ok.append(_with_fp8_note(r, res))
        else:
            if not c.dp_attention and c.dp == 1 and res.capacity_ratio is None:
                no_budget[key] = res.reason
            bad.append(res)
    return ok, bad


def _layout(c: Candidate) -> tuple:
    return (c.tp, c.pp, c.dp, c.dp_attention, c.expert_parallel)


def _evaluate(r: FitRequest, cands: Sequence[Candidate], counter: _Counter) -> tuple[list[FitOption], list[Rejection]]:
    """The engines' order of trying: TP / DP-replica / DP-attention layouts with the first KV dtype
    (unquantized); PP layouts only when none of those holds the target; fp8 KV only for layouts whose
    unquantized KV falls short (a layout without any KV budget is not retried: weights do not change)."""
    first = cands[0].kv_cache_dtype if cands else "auto"
    base = [c for c in cands if c.kv_cache_dtype == first]
    ok, bad = _search(r, [c for c in base if c.pp == 1], counter)
    if not ok or r.pp is not None:
        ok2, bad2 = _search(r, [c for c in base if c.pp > 1], counter)
        ok, bad = ok + ok2, bad + bad2
    short = {_layout(b.candidate) for b in bad if b.capacity_ratio is not None}
    rest = [c for c in cands if c.kv_cache_dtype != first and _layout(c) in short]
    ok3, bad3 = _search(r, rest, counter)
    ok = [replace(o, speed=option_speed(r, o.candidate)) for o in ok + ok3]
    return _rank(r.optimize, ok), bad + bad3


def _rank(optimize: str, ok: list[FitOption]) -> list[FitOption]:
    """throughput: decode tok/s at the target concurrency (then TTFT, fewer GPUs); latency: TTFT, then
    per-request decode rate; gpus: fewest GPUs, then throughput. Ties: unquantized KV, more headroom."""
    def key(o: FitOption) -> tuple:
        s, c = o.speed, o.candidate
        tput = -s.decode_tokens_per_s if s else math.inf
        ttft = s.ttft_s if s else math.inf
        per = -s.per_request_tokens_per_s if s else math.inf
        tail = (c.kv_quantized, -o.headroom, c.pp, c.dp, c.tp)
        if optimize == "latency":
            return (ttft, per, c.num_gpus) + tail
        if optimize == "gpus":
            return (c.num_gpus, tput, ttft) + tail
        return (tput, ttft, c.num_gpus) + tail
    return sorted(ok, key=key)


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
            tips.append(f"fp8 KV fits on {o.candidate.num_gpus} GPU(s): {o.candidate.label} ({o.knob} {o.recommended})")
    if r.tp is None and r.pp is None and r.dp is None and r.measured is None:
        prev, n = r.gpus, r.gpus * 2
        while n <= max(64, r.gpus * 2):
            ok, _ = _evaluate(r, [c for c in candidates(r, n) if c.num_gpus > prev], counter)
            if ok:
                o = ok[0]
                tips.append(f"use {o.candidate.num_gpus} GPUs: {o.candidate.label} ({o.knob} {o.recommended})")
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
                     rejected=tuple(bad), shortfall=shortfall, plan_calls=counter.calls, optimize=r.optimize)


def fit_model(model: str, gpu: str | None = None, **options: Any) -> FitResult:
    """The library call ``kvscope.fit(model, gpu, context=..., concurrency=..., gpus=8, engine=...)``:
    ``fit(fit_request(model, gpu, **options))``, what ``kvscope fit`` runs and renders."""
    return fit(fit_request(model, gpu, **options))


__all__ = ["Candidate", "FitOption", "FitRequest", "FitResult", "Rejection", "Shortfall", "Speed", "candidates",
           "fit", "fit_request", "fit_result_from_dict", "parse_set", "validate_request"]


make_callable(__name__, fit_model)  # kvscope.fit(model, gpu, ...) is fit_model(...)
