"""Use-case: the same model, GPUs and parallel layout through SGLang and vLLM (or several releases of
one engine), side by side, term by term, and the largest difference named with its cause.

Each column is one ``kvscope.plan`` call; every figure comes from its Timeline (no arithmetic is
repeated here). The terms:

* **fraction of**: SGLang's ``--mem-fraction-static`` is a fraction of the memory free *before the
  weights* (``pre_model_load_memory``, after the CUDA context and NCCL): the static pools get
  ``pre x mfs`` minus the weights; graphs and activations live in ``pre x (1 - mfs)`` outside it
  (``model_runner.py`` / ``model_runner_kv_cache_mixin.py``, ``profile_max_num_token``).
  vLLM's ``--gpu-memory-utilization`` is a fraction of the *CUDA total*; the weights, the profiled
  torch activation peak and non-torch memory (and CUDA graphs from 0.20) are subtracted inside it
  (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``).
* **reserve**: what each engine keeps for activations / graphs (SGLang: the slack outside the
  fraction; vLLM: the profiled peak + non-torch (+ graphs) inside it).
* weights, cell (bytes per token per rank), page / block, request pools, KV bytes, tokens, and the
  concurrency at a context (SGLang: tokens / context; vLLM: its own "Maximum concurrency").

The KV budget difference between two columns is split into: the base (what the fraction buys:
``pre x mfs`` vs ``total x util``), the weights, and the reserve taken out of the base; the
largest of these is named, with its cause in each engine's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import FlagError
from .timeline import Timeline

SOURCES = {
    "sglang": ("python/sglang/srt/model_executor/model_runner.py (profile_max_num_token: rest_memory = "
               "available_gpu_memory - pre_model_load_memory x (1 - mem_fraction_static))"),
    "vllm": ("vllm/v1/worker/gpu_worker.py (determine_available_memory: requested_memory = total x "
             "gpu_memory_utilization; available KV = requested - weights - torch peak - non-torch)"),
}
FRACTION_OF = {
    "sglang": "free memory before the weights (pre_model_load_memory)",
    "vllm": "CUDA total memory (torch.cuda.mem_get_info()[1])",
}
DEFAULT_SOURCE = {
    "sglang": "python/sglang/srt/server_args.py (the default mem_fraction_static from the GPU size and TP: "
              "reserved memory for graphs and activations)",
    "vllm": "vllm/config/cache.py (CacheConfig.gpu_memory_utilization default)",
}
RESERVE_OF = {
    "sglang": "pre x (1 - mfs), outside the fraction: req_to_token, CUDA graphs, activations",
    "vllm": "inside the fraction: torch activation peak + non-torch (+ CUDA graphs where subtracted)",
}


@dataclass(frozen=True)
class Column:
    """One engine release's figures, per rank (per DP engine / worker)."""

    engine: str
    engine_version: str
    knob: str  # the flag
    fraction: float  # its value after the engine's default
    fraction_source: str  # "user" | "default"
    fraction_of: str  # what it is a fraction of
    fraction_base_bytes: int  # what the fraction is applied to (SGLang: pre-load free; vLLM: CUDA total)
    budget_bytes: int  # base x fraction
    weights_bytes: int
    reserve_bytes: int  # activations / graphs reserve (SGLang: the slack outside; vLLM: subtracted inside)
    reserve_in_budget: bool  # vLLM: True (subtracted from base x fraction); SGLang: False
    reserve_of: str
    kv_budget_bytes: int  # SGLang rest_memory; vLLM "Available KV cache memory"
    kv_cache_bytes: int  # allocated
    cell_bytes: int  # KV bytes per token per rank
    page_tokens: int  # SGLang page size; vLLM block size
    block_bytes: int  # bytes per page / block per rank
    request_pool: str  # SGLang req_to_token / max_running_requests; vLLM max_num_seqs
    max_running_requests: int | None
    kv_tokens: int
    context_tokens: int
    concurrency: float  # requests of ``context_tokens`` the KV cache holds
    starts: bool
    estimated: tuple[str, ...]
    source: str  # the engine file the budget formula comes from
    error: str | None = None  # the engine's error when it does not start

    _KEYS = ("engine", "engine_version", "knob", "fraction", "fraction_source", "fraction_of", "fraction_base_bytes",
             "budget_bytes", "weights_bytes", "reserve_bytes", "reserve_in_budget", "reserve_of", "kv_budget_bytes", "kv_cache_bytes",
             "cell_bytes", "page_tokens", "block_bytes", "request_pool", "max_running_requests", "kv_tokens",
             "context_tokens", "concurrency", "starts", "error", "estimated", "source")

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k in self._KEYS for v in [getattr(self, k)]}

    @property
    def label(self) -> str:
        return f"{'SGLang' if self.engine == 'sglang' else 'vLLM'} {self.engine_version}"


@dataclass(frozen=True)
class Comparison:
    model: str
    gpu: str
    tp: int
    pp: int
    context_tokens: int
    columns: tuple[Column, ...]
    largest: str  # the term with the largest share of the KV budget difference (first vs each other column)
    explanation: str  # the paragraph

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "gpu": self.gpu, "tp": self.tp, "pp": self.pp,
                "context_tokens": self.context_tokens, "columns": [c.to_dict() for c in self.columns],
                "largest_difference": self.largest, "explanation": self.explanation, "estimated": True}


def _sglang_column(t: Timeline, context: int) -> Column:
    x = t.extra
    pre = x.pre_model_load_bytes
    budget = int(pre * x.mem_fraction_static)
    slack = pre - budget
    ctx = x.context_len if context <= 0 else context
    return Column(
        engine="sglang", engine_version=t.engine_version, knob="--mem-fraction-static",
        fraction=round(x.mem_fraction_static_flag, 4), fraction_source=x.mem_fraction_static_source,
        fraction_of=FRACTION_OF["sglang"], fraction_base_bytes=pre,
        budget_bytes=budget, weights_bytes=t.weights_bytes or 0, reserve_bytes=slack, reserve_in_budget=False,
        reserve_of=RESERVE_OF["sglang"], kv_budget_bytes=x.rest_memory_bytes, kv_cache_bytes=t.kv_cache_bytes or 0,
        cell_bytes=t.kv_cell_bytes or 0, page_tokens=x.page_size, block_bytes=(t.kv_cell_bytes or 0) * x.page_size,
        request_pool=f"req_to_token {x.req_to_token_bytes:,} B (max_running_requests "
                     f"{t.max_running_requests})", max_running_requests=t.max_running_requests,
        kv_tokens=t.kv_cache_tokens or 0, context_tokens=ctx,
        concurrency=round((t.kv_cache_tokens or 0) / ctx, 4), starts=bool(t.starts), estimated=tuple(t.estimated),
        source=f"{SOURCES['sglang']} @ v{t.engine_version}", error=t.error)


def _vllm_column(t: Timeline, user_fraction: bool) -> Column:
    x, d = t.extra, t.ranks[0].decision
    total = round(d.requested_memory_bytes / d.gpu_memory_utilization)
    reserve = d.activation_peak_bytes + d.non_torch_bytes + d.cudagraph_applied_bytes
    return Column(
        engine="vllm", engine_version=t.engine_version, knob="--gpu-memory-utilization",
        fraction=d.gpu_memory_utilization, fraction_source="user" if user_fraction else "default",
        fraction_of=FRACTION_OF["vllm"], fraction_base_bytes=total,
        budget_bytes=d.requested_memory_bytes, weights_bytes=d.weights_bytes, reserve_bytes=reserve,
        reserve_in_budget=True, reserve_of=RESERVE_OF["vllm"], kv_budget_bytes=x.available_kv_cache_bytes,
        kv_cache_bytes=t.kv_cache_bytes or 0, cell_bytes=t.kv_cell_bytes or 0, page_tokens=x.block_size,
        block_bytes=x.bytes_per_block, request_pool=f"max_num_seqs {t.max_running_requests}",
        max_running_requests=t.max_running_requests, kv_tokens=t.kv_cache_tokens or 0,
        context_tokens=x.max_model_len, concurrency=round(x.max_concurrency, 4), starts=bool(t.starts),
        estimated=tuple(t.estimated), source=f"{SOURCES['vllm']} @ v{t.engine_version}", error=t.error)


def _parts(c: Column) -> dict[str, int]:
    """The KV budget as base - weights - reserve (SGLang's reserve is outside its base: 0 here)."""
    return {"base": c.budget_bytes, "weights": c.weights_bytes,
            "reserve": c.reserve_bytes if c.reserve_in_budget else 0}


def explain(cols: Sequence[Column]) -> tuple[str, str]:
    """The largest term of the KV budget difference between the first column and the others, and a
    paragraph naming it and its cause in each engine's code."""
    a = cols[0]
    gib = 2 ** 30
    best, text = "none", []
    for b in cols[1:]:
        pa, pb = _parts(a), _parts(b)
        diffs = {"base": pa["base"] - pb["base"], "weights": -(pa["weights"] - pb["weights"]),
                 "reserve": -(pa["reserve"] - pb["reserve"])}
        cell = a.cell_bytes - b.cell_bytes
        term = max(diffs, key=lambda k: abs(diffs[k]))
        best = term if best == "none" else best
        ratio = f" ({a.kv_tokens / b.kv_tokens:.2f}x)" if a.kv_tokens and b.kv_tokens else ""
        s = (f"{a.label} holds {a.kv_tokens:,} KV tokens per rank, {b.label} {b.kv_tokens:,}{ratio}: "
             f"KV budget {a.kv_budget_bytes / gib:.2f} vs {b.kv_budget_bytes / gib:.2f} GiB. ")
        s += "".join(f"{c.label} does not start ({(c.error or '').splitlines()[0][:200]}). "
                     for c in (a, b) if not c.starts and c.error)
        if term == "reserve":
            s += (f"The largest term is the reserve: {b.label} subtracts {b.reserve_bytes / gib:.2f} GiB (torch "
                  f"activation peak + non-torch) inside its "
                  f"{b.fraction:g} x {b.fraction_base_bytes / gib:.2f} GiB, "
                  if b.reserve_in_budget else f"The largest term is the reserve of {a.label}, ")
            s += (f"while {a.label} keeps its activations and graphs outside the fraction "
                  f"({a.reserve_bytes / gib:.2f} GiB = {a.fraction_of} x (1 - {a.fraction:g})). "
                  if not a.reserve_in_budget else "")
        elif term == "base":
            s += (f"The largest term is what the fraction is applied to: {a.label} {a.knob} {a.fraction:g} "
                  f"({a.fraction_source}) x {a.fraction_base_bytes / gib:.2f} GiB ({a.fraction_of}) = "
                  f"{a.budget_bytes / gib:.2f} GiB, {b.label} {b.knob} {b.fraction:g} ({b.fraction_source}) x "
                  f"{b.fraction_base_bytes / gib:.2f} GiB ({b.fraction_of}) = {b.budget_bytes / gib:.2f} GiB. ")
            defaults = [c for c in (a, b) if c.fraction_source == "default" and c.fraction != (b if c is a else a)
                        .fraction]
            if defaults:
                s += "The default fractions come from " + "; ".join(
                    f"{DEFAULT_SOURCE[c.engine]} @ v{c.engine_version}" for c in defaults) + ". "
        else:
            s += (f"The largest term is the weights: {a.weights_bytes / gib:.2f} vs {b.weights_bytes / gib:.2f} GiB "
                  "per rank. ")
        if cell:
            s += f"Cells differ too: {a.cell_bytes:,} vs {b.cell_bytes:,} B per token. "
        s += "Causes: " + "; ".join(dict.fromkeys((a.source, b.source))) + "."
        text.append(s)
    return best, " ".join(text)


def _run(model: str, gpu: str | None, engine: str, version: str | None, tp: int, pp: int, context: int | None,
         gpu_memory_mib: int | None, sglang: Mapping[str, Any], vllm: Mapping[str, Any]) -> Timeline:
    from .plan import plan
    if engine == "sglang":
        flags = dict(tp_size=tp, pp_size=pp, **sglang)
        if context:
            flags["context_length"] = context
    else:
        flags = dict(tensor_parallel_size=tp, pipeline_parallel_size=pp, **vllm)
        if context:
            flags["max_model_len"] = context
    return plan(model, gpu, engine=engine, engine_version=version, gpu_memory_mib=gpu_memory_mib,
                **flags)  # type: ignore[arg-type]


def _engine_of(versions: Sequence[str]) -> str | None:
    """The one engine whose known releases include every version (None: ambiguous or unknown)."""
    from .engines.sglang.release import KNOWN_VERSIONS as SGL
    from .engines.vllm.release import KNOWN_VERSIONS as VLLM
    hits = [e for e, known in (("sglang", SGL), ("vllm", VLLM)) if all(v in known for v in versions)]
    return hits[0] if len(hits) == 1 else None


def parse_runs(engines: Sequence[str] | None, versions: Sequence[str]) -> list[tuple[str, str | None]]:
    """(engine, version) per column: ``--engine sglang,vllm`` (default) with ``--engine-version``
    ``sglang=0.5.9,vllm=0.9.2``; or several releases of one engine ``--engine-version 0.5.9,0.5.23``
    (the engine named, or the one whose known releases hold them all)."""
    plain = [v for v in versions if "=" not in v]
    if engines is None:
        one = _engine_of(plain) if plain and len(plain) == len(versions) else None
        engines = [one] if one else ["sglang", "vllm"]
    for e in engines:
        if e not in ("sglang", "vllm"):
            raise FlagError(f"unknown engine {e!r}", field="--engine", fix="sglang, vllm or sglang,vllm")
    pinned = dict(v.split("=", 1) for v in versions if "=" in v)
    if plain and len(engines) > 1:
        raise FlagError(f"versions {','.join(plain)} without an engine for two engines", field="--engine-version",
                        fix="sglang=0.5.9,vllm=0.9.2, or --engine sglang --engine-version 0.5.9,0.5.23")
    if plain:
        return [(engines[0], v) for v in plain]
    return [(e, pinned.get(e)) for e in engines]


def compare(model: str, gpu: str | None = None, *, engines: Sequence[str] | None = None,
            versions: Sequence[str] = (), tp: int = 1, pp: int = 1, context: int | None = None,
            gpu_memory_mib: int | None = None, sglang: Mapping[str, Any] | None = None,
            vllm: Mapping[str, Any] | None = None) -> Comparison:
    """Plan ``model`` on each (engine, release) with the same GPUs and layout; ``sglang`` / ``vllm``:
    extra flags for that engine (e.g. ``{"mem_fraction_static": 0.93}``)."""
    runs = parse_runs(engines, versions)
    if len(runs) < 2:
        raise FlagError("compare needs two columns", field="--engine-version",
                        fix="--engine sglang,vllm, or one engine with --engine-version A,B")
    cols = []
    for engine, version in runs:
        t = _run(model, gpu, engine, version, tp, pp, context, gpu_memory_mib, sglang or {}, vllm or {})
        cols.append(_sglang_column(t, context or 0) if engine == "sglang"
                    else _vllm_column(t, "gpu_memory_utilization" in (vllm or {})))
    first = cols[0]
    ctx = context or first.context_tokens
    largest, text = explain(cols)
    return Comparison(model=model, gpu=gpu or "", tp=tp, pp=pp, context_tokens=ctx, columns=tuple(cols),
                      largest=largest, explanation=text)
