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

Modules: ``results`` (the result types), ``request`` (FitRequest, validation, ``--set``), ``layouts``
(candidates), ``search`` (grid search), ``knob`` / ``sglang_knob`` / ``vllm_knob`` (the memory knob per
engine and the one search over it), ``cmdline`` (launch and plan command lines); this module: the
use-case (evaluate, rank, shortfall) and the library call.
"""

from __future__ import annotations

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
from .results import (Candidate, FitOption, FitResult, Rejection, Shortfall, _Json, _many,  # noqa: F401
                      _plain, fit_result_from_dict)
from .search import _first_true, _last_true  # noqa: F401
from .sglang_knob import _headroom, _SGLangKnob  # noqa: F401
from .vllm_knob import _request_ok, _VllmKnob  # noqa: F401

_KNOBS: dict[str, type[_Knob]] = {"sglang": _SGLangKnob, "vllm": _VllmKnob}

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


__all__ = ["Candidate", "FitOption", "FitRequest", "FitResult", "Rejection", "Shortfall", "candidates", "fit",
           "fit_request", "fit_result_from_dict", "parse_set", "validate_request"]


make_callable(__name__, fit_model)  # kvscope.fit(model, gpu, ...) is fit_model(...)
