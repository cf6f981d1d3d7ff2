"""What the doctor tells a user: findings (problem + evidence + fix) and recomputation checks.

Value types only; the rules that produce them live in ``kvscope.doctor``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}

# Finding codes (stable: tests and --json consumers match on them).
KV_SIZING_FAILED = "kv-sizing-failed"
EFFECTIVE_FRACTION_MISMATCH = "effective-fraction-mismatch"
EFFECTIVE_FRACTION = "effective-fraction"
FLAGS_DISAGREE = "flags-disagree"
UNBALANCED_RANKS = "unbalanced-ranks"
KV_POOL_BELOW_CONTEXT = "kv-pool-below-context"
CUDA_GRAPH_SLACK = "cuda-graph-slack"
DRAFT_MODEL_MEMORY = "draft-model-memory"
CUSTOM_ALLREDUCE = "custom-allreduce"
RUNTIME_OOM = "runtime-oom"
LOAD_OOM = "load-oom"
KV_POOL_FULL = "kv-pool-full-at-runtime"
MAX_TOTAL_TOKENS_CAPPED = "max-total-tokens-capped"
MAX_RUNNING_REDUCED = "max-running-requests-reduced"
ARITHMETIC_MISMATCH = "engine-arithmetic-mismatch"
HYBRID_TOKEN_COUNT = "kv-tokens-from-concurrency"
CUDA_GRAPH_NOT_RESERVED = "cuda-graph-not-reserved"
PROFILING_ERROR = "profiling-error"
FREE_BELOW_UTILIZATION = "free-memory-below-utilization"
TRUNCATED = "log-truncated"
NO_MEMORY_LINES = "no-memory-lines"
RESTARTS = "multiple-starts"
UNPARSED_LINES = "unparsed-lines"
LOCAL_BASELINE = "baseline-is-local"
STARTUP_FAILED = "startup-failed"


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # error | warning | info
    message: str
    evidence: tuple[str, ...] = ()
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Check:
    """The doctor recomputed one of the engine's printed numbers from other printed numbers."""

    name: str
    printed: Any
    recomputed: Any
    agrees: bool
    how: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "printed": self.printed,
            "recomputed": self.recomputed,
            "agrees": self.agrees,
            "how": self.how,
            "evidence": list(self.evidence),
        }


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 3))


# =============================================================================================
# Rules. Each reads what a log printed and says what it means. Pure functions.
# =============================================================================================

import math  # noqa: E402
from dataclasses import field  # noqa: E402

from .units import GiB, gib_to_bytes  # noqa: E402

PRINT_HALF_STEP_GIB = 0.005  # SGLang and vLLM print GiB to 2 decimals
# SGLang measures pre_model_load_memory at the end of ModelRunner.init_torch_distributed; "Load weight begin"
# is printed after the forward stream, offloader, expert metadata and sampler are set up (model_runner.py
# @ v0.5.10), so the printed baseline can sit this much below the engine's (0.09-0.14 GiB seen on B200).
SETUP_BEFORE_LOAD_GIB = 0.15


@dataclass
class Analysis:
    """What the rules concluded: top-level figures for the Timeline plus findings and checks."""

    findings: list[Finding] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    starts: bool | None = None
    error: str | None = None
    kv_cache_tokens: int | None = None
    max_running_requests: int | None = None
    kv_cache_bytes: int | None = None
    weights_bytes: int | None = None
    kv_cell_bytes: int | None = None
    fix: list[tuple[str, Any, str]] = field(default_factory=list)

    def add(self, code: str, severity: str, message: str, evidence: Any = (), fix: str | None = None) -> None:
        ev = tuple(dict.fromkeys(e for e in (evidence if isinstance(evidence, (list, tuple)) else (evidence,)) if e))
        self.findings.append(Finding(code, severity, message, ev, fix))

    def check(self, name: str, printed: Any, recomputed: Any, agrees: bool, how: str, evidence: Any = ()) -> None:
        ev = tuple(e for e in (evidence if isinstance(evidence, (list, tuple)) else (evidence,)) if e)
        self.checks.append(Check(name, printed, recomputed, agrees, how, ev))


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ceil_to(x: float, step: float) -> float:
    return round(math.ceil(round(x / step, 9)) * step, 10)


def effective_mem_fraction_static(pre_gib: float, post_gib: float, kv_gib: float, mm_gib: float = 0.0) -> float:
    """Solve SGLang's profile for the fraction that produced a printed KV size.

    ``rest = post − pre·(1 − mfs) − mm`` and ``rest ≈ kv`` (the pool is ``rest // cell`` tokens, plus one
    page of padding), so ``mfs = 1 − (post − mm − kv)/pre``.
    Mirrors ``profile_max_num_token`` (python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py
    @ v0.5.9) and ``KVCacheConfigurator._profile_available_bytes`` (mem_cache/kv_cache_configurator.py @ v0.5.23).
    """
    return 1.0 - (post_gib - mm_gib - kv_gib) / pre_gib


def min_mem_fraction_static(pre_gib: float, post_gib: float, mm_gib: float = 0.0) -> float:
    """``1 − available/pre``: below it the KV budget is ≤ 0 (the v0.5.23 error text prints this value)."""
    return 1.0 - (post_gib - mm_gib) / pre_gib


def effective_fraction_bounds(pre: float, post: float, kv: float, kv_terms: int, mm: float = 0.0) -> tuple[float, float]:
    """The range of fractions consistent with figures each rounded to ±0.005 GiB."""
    h = PRINT_HALF_STEP_GIB
    values = [
        effective_mem_fraction_static(p, a, k, mm)
        for p in (pre - h, pre + h)
        for a in (post - h, post + h)
        for k in (kv - h * kv_terms, kv + h * kv_terms)
        if p > 0
    ]
    return min(values), max(values)


def pcie_only_gpu(flags: dict, device_name: str | None) -> Any:
    """The GPU (hardware catalog) when the log or ``--set gpu=…`` names one without full NVLink, else None."""
    from .hardware.gpus import get_gpu

    for name in (flags.get("gpu"), device_name):
        if not name:
            continue
        try:
            g = get_gpu(str(name))
        except Exception:  # noqa: BLE001 - an unknown name just means no topology
            continue
        return None if g.interconnect.is_full_nvlink else g
    return None


def custom_allreduce_forced(an: "Analysis", log: Any, flags: dict, world: int | None, reached_init: bool,
                            engine: str) -> None:
    """Custom all-reduce on >2 PCIe-only GPUs: both engines turn it off there ("Custom allreduce is
    disabled because it's not supported on more than two PCIe-only GPUs"), so a start that got past
    that point on such GPUs without the warning and without --disable-custom-all-reduce ran with it
    forced on (a patched gate or an env override; vllm-project/vllm#56128)."""
    if not world or world <= 2 or not reached_init or log.events.get("custom_ar_disabled"):
        return
    if flags.get("disable_custom_all_reduce") in (True, "True", "true", 1):
        return
    g = pcie_only_gpu(flags, getattr(log, "device_name", None))
    if g is None:
        return
    src = "--set gpu" if flags.get("gpu") else "the MoE kernel-config name in the log"
    an.add(CUSTOM_ALLREDUCE, WARNING,
           f"custom all-reduce looks forced on over {world} PCIe-only {g.name} GPUs (GPU from {src}): "
           f"{'SGLang' if engine == 'sglang' else 'vLLM'} turns it off on more than two PCIe-only GPUs and prints "
           "'Custom allreduce is disabled …', which this start did not; on PCIe it contends for the bus (slower than NCCL "
           "beyond small messages) and its IPC buffers take memory outside the KV budget",
           [], "drop the patch / env override, or pass --disable-custom-all-reduce (NCCL is faster here)")


# ---------------------------------------------------------------------------------------------
# SGLang
# ---------------------------------------------------------------------------------------------

def aiter_fraction_factors(flags: dict, flag_source: dict, context_len: int | None,
                           version: str | None) -> tuple[float, ...]:
    """The factors SGLang may have applied to the mem_fraction_static the log shows (1.0 = none).

    ``attention_backend == "aiter"`` and ``context_len > 8192``: x0.85, applied to the user's value
    too (kvscope/engines/sglang/backend.py: model_runner.py @ v0.4.7-v0.5.3, after the
    ServerArgs dump; server_args.py @ v0.5.6+, before it, so a dumped value already includes it).
    Absent @ v0.4.6.post5. When the version or context is not known both readings are allowed."""
    from packaging.version import InvalidVersion, Version

    if str(flags.get("attention_backend")) != "aiter" or (context_len is not None and context_len <= 8192):
        return (1.0,)
    try:
        v = Version(version) if version else None
    except InvalidVersion:
        v = None
    if v is not None and v < Version("0.4.7"):
        return (1.0,)
    if context_len is None:
        return (1.0, 0.85)
    dumped_after = flag_source.get("mem_fraction_static") == "server_args" and (v is None or v >= Version("0.5.4"))
    if dumped_after:
        return (1.0,) if v is not None else (1.0, 0.85)
    return (0.85,)


DSA_CLASSES = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")
# Before 0.5.18 SGLang budgets a DSA token at the 576-wide MLA row but, with fp8_e4m3 KV, allocates
# the 656-byte packed fp8 row (get_cell_size_per_token @ v0.5.9; _compute_cell_size @ v0.5.13;
# NSATokenToKVPool buffers): DeepSeek-V3.2 / GLM-5 (kv_lora 512 + rope 64, indexer 128 + 4 scale B).
DSA_BUDGET_ROW, DSA_BUFFER_ROW, DSA_INDEXER_ROW = 576, 656, 132


def dsa_fp8_overallocation(log: Any, flags: dict, version: str | None) -> float | None:
    """budget / allocated bytes per token for a DSA model with fp8 KV before 0.5.18, else None."""
    from packaging.version import InvalidVersion, Version

    classes = {ld.model_class for r in log.ranks.values() for ld in r.loads if ld.model_class}
    if not classes & set(DSA_CLASSES):
        return None
    kv = str(flags.get("kv_cache_dtype") or "")
    dtypes = {a.dtype for r in log.ranks.values() for a in r.kv_allocs if a.dtype}
    if "fp8_e4m3" not in kv and not any("float8_e4m3fn" in str(d) for d in dtypes):
        return None
    try:
        if version and Version(version) >= Version("0.5.18"):
            return None
    except InvalidVersion:
        pass
    return (DSA_BUDGET_ROW + DSA_INDEXER_ROW) / (DSA_BUFFER_ROW + DSA_INDEXER_ROW)


def analyze_sglang(log: Any, cell_bytes: int | None = None, version: str | None = None) -> Analysis:  # noqa: C901
    """Findings and checks for one SGLang start. ``cell_bytes``: exact KV bytes per token when the
    model is known (from the model catalog), else the doctor estimates it from the printed sizes.
    ``version``: the release whose formulas apply (printed, or a representative of the format range)."""
    from .engines.sglang.logs import baseline_gib, effective_flags, post_load_gib, target_and_draft

    an = Analysis()
    flags, flag_source = effective_flags(log)
    ranks = sorted(log.ranks.values(), key=lambda r: (r.tags.get("PP", 0), r.tags.get("DP", 0), r.tags.get("TP", 0), r.label))
    pre_by_rank: dict[str, tuple[float, bool, str | None]] = {}
    post_by_rank: dict[str, tuple[float, str | None]] = {}
    for r in ranks:
        target, _ = target_and_draft(r)
        base, derived = baseline_gib(target)
        if base is not None:
            ev = target.begin_avail_gib.evidence if target.begin_avail_gib else target.end_avail_gib.evidence
            pre_by_rank[r.label] = (base, derived, ev)
        post = post_load_gib(r)
        if post is not None:
            last = next(ld for ld in reversed(r.loads) if ld.end_avail_gib is not None)
            post_by_rank[r.label] = (post, last.end_avail_gib.evidence)

    pre = min((v[0] for v in pre_by_rank.values()), default=None)
    post = min((v[0] for v in post_by_rank.values()), default=None)
    pre_ev = next((v[2] for v in pre_by_rank.values() if v[0] == pre), None)
    post_ev = next((v[1] for v in post_by_rank.values() if v[0] == post), None)
    kv_rank = next((r for r in ranks if r.kv_allocs), None)
    kv_obs = kv_rank.kv_allocs[0] if kv_rank else None
    page = as_int(flags.get("page_size")) or 1
    mfs = as_float(flags.get("mem_fraction_static"))
    mm = kv_rank.mm_reserve_gib.value if kv_rank is not None and kv_rank.mm_reserve_gib else 0.0
    tp = as_int(flags.get("tp_size"))
    summary = log.summary
    tokens = int(kv_obs.tokens.value) if kv_obs else (int(summary["max_total_num_tokens"]) if summary else None)

    # --- top-level figures ----------------------------------------------------------------
    an.kv_cache_tokens = tokens
    if summary.get("max_running_requests") is not None:
        an.max_running_requests = int(summary["max_running_requests"])
    first_load = next((target_and_draft(r)[0] for r in ranks if r.loads), None)
    if first_load is not None and first_load.usage_gib is not None:
        an.weights_bytes = gib_to_bytes(first_load.usage_gib.value)
    kv_gib = None
    kv_terms = 0
    if kv_rank is not None:
        _, draft = target_and_draft(kv_rank)
        allocs = kv_rank.kv_allocs if (draft is None or "kv_alloc_dtype" in log.version_markers) else kv_rank.kv_allocs[:1]
        kv_gib = round(sum(a.size_gib for a in allocs), 2)
        kv_terms = sum(2 if a.kv_size_gib is None else 1 for a in allocs)
        an.kv_cache_bytes = gib_to_bytes(kv_obs.size_gib)
    if cell_bytes:
        an.kv_cell_bytes = cell_bytes
    elif kv_obs is not None and kv_obs.tokens.value > 0:
        an.extra["kv_cell_bytes_estimated"] = int(round(kv_obs.size_gib * GiB / (kv_obs.tokens.value + page)))
    cell_est = cell_bytes or an.extra.get("kv_cell_bytes_estimated")
    if pre is not None:
        an.extra["pre_model_load_memory_bytes"] = gib_to_bytes(pre)
    if post is not None:
        an.extra["post_load_free_bytes"] = gib_to_bytes(post)
    if mfs is not None:
        an.extra["mem_fraction_static"] = mfs
        an.extra["mem_fraction_static_source"] = flag_source.get("mem_fraction_static")
    if summary:
        for k in ("context_len", "chunked_prefill_size", "max_prefill_tokens", "available_gpu_mem"):
            if k in summary:
                an.extra[k if k != "available_gpu_mem" else "available_gpu_mem_bytes"] = (
                    gib_to_bytes(summary[k]) if k == "available_gpu_mem" else int(summary[k]))

    ctx_len = as_int(summary.get("context_len")) if summary else None
    ctx_len = ctx_len or as_int(flags.get("context_length"))
    factors = aiter_fraction_factors(flags, flag_source, ctx_len, version)
    if factors != (1.0,):
        an.extra["aiter_fraction_factor"] = 0.85
        if mfs is not None and factors == (0.85,):
            an.extra["mem_fraction_static_effective_expected"] = round(mfs * 0.85, 4)

    # --- failure at KV sizing ---------------------------------------------------------------
    fail_events = [e for k in ("no_kv_memory", "not_enough_memory") for e in log.events.get(k, [])]
    capped = log.events.get("max_total_tokens_capped", [])
    negative = [e for e in capped if e.values["profiled"] <= 0]
    failed = bool(fail_events or negative or (tokens is not None and tokens <= 0))
    min_mfs = None
    if pre is not None and post is not None:
        min_mfs = min_mem_fraction_static(pre, post, mm)
        an.extra["min_mem_fraction_static"] = round(min_mfs, 4)
        if cell_est:
            an.extra["tokens_per_0.01_mem_fraction_static"] = int(0.01 * pre * GiB // cell_est)
    if failed:
        an.starts = False
        ev_all = [e.evidence for e in fail_events + negative][:4]
        an.error = (fail_events[0].evidence if fail_events else negative[0].evidence if negative else None)
        msg_min = next((e.values.get("min_mem_fraction_static") for e in fail_events if e.values.get("min_mem_fraction_static")), None)
        parts = ["SGLang failed at KV sizing: the KV budget post_load_free − pre_model_load_memory × (1 − mem_fraction_static) is ≤ 0"]
        if negative:
            parts.append(f"(profiled max_total_num_tokens = {negative[0].values['profiled']:,})")
        used_mfs = mfs if mfs is not None else next((e.values.get("mem_fraction_static") for e in fail_events if e.values.get("mem_fraction_static")), None)
        if mfs is None and used_mfs is not None:
            an.extra["mem_fraction_static"] = used_mfs
            an.extra["mem_fraction_static_source"] = "error message"
        if pre is not None and post is not None and used_mfs is not None:
            if factors == (0.85,) and mfs is not None:
                parts.append(f"; attention_backend=aiter with context_len {ctx_len} > 8192: SGLang ran with "
                             f"{mfs:g} × 0.85 = {mfs * 0.85:.4g}")
                used_mfs = round(mfs * 0.85, 6)
            slack = pre * (1 - used_mfs)
            if post - mm <= slack:
                parts.append(f"; post-load free {post:.2f} GiB ≤ slack {pre:.2f} × (1 − {used_mfs:g}) = {slack:.2f} GiB")
            else:
                parts.append(f"; yet at {used_mfs:g} the slack would be {pre:.2f} × (1 − {used_mfs:g}) = {slack:.2f} GiB, "
                             f"below the {post:.2f} GiB free after weights")
        if negative and cell_bytes and pre is not None and post is not None:
            rest = negative[0].values["profiled"] * cell_bytes / GiB
            implied = effective_mem_fraction_static(pre, post, rest, mm)
            an.extra["effective_mem_fraction_static"] = round(implied, 4)
            parts.append(f"; {negative[0].values['profiled']:,} tokens × {cell_bytes:,} B = {rest:.2f} GiB of budget, "
                         f"which implies an effective mem_fraction_static ≈ {implied:.3f}")
            if mfs is not None and abs(implied - mfs) > 0.01:
                parts.append(f"(not the {mfs:g} passed: SGLang changed it, e.g. ×0.85 for attention_backend=aiter "
                             "with context > 8192, or ×0.9 for multimodal models in 0.4.x)")
        minimum = msg_min if msg_min is not None else min_mfs
        fix = None
        if minimum is not None:
            if minimum >= 1.0:
                fix = "the weights leave no memory at any fraction: use more GPUs (larger --tp) or a smaller / quantized checkpoint"
            else:
                target_mfs = ceil_to((minimum + 0.02) / (0.85 if factors == (0.85,) else 1.0), 0.01)
                fix = (f"minimum viable mem_fraction_static is {minimum:.4f} (1 − post_load_free/pre_model_load_memory"
                       f"{'' if msg_min is not None else f' = 1 − {post:.2f}/{pre:.2f}'}); pass --mem-fraction-static "
                       f"{min(target_mfs, 0.99):.2f} or higher")
                if cell_est and pre is not None:
                    fix += (f"; each +0.01 buys ≈ {0.01 * pre:.2f} GiB ≈ {int(0.01 * pre * GiB // cell_est):,} tokens")
                if factors == (0.85,):
                    fix += ("; the flag value is divided by 0.85 because SGLang multiplies it by 0.85 for "
                            "attention_backend=aiter at this context length (or pass --attention-backend triton)")
                    if target_mfs > 0.99:
                        fix += f" — {target_mfs:.2f} is above 0.99, so switch the backend or add GPUs"
                elif str(flags.get("attention_backend")) == "aiter":
                    fix += "; note: with attention_backend=aiter and context > 8192 SGLang multiplies the fraction by 0.85"
                an.fix.append(("mem_fraction_static", min(target_mfs, 0.99), "smallest fraction that leaves a positive KV budget (+0.02 margin)"))
        evidence = ev_all + [e for e in (pre_ev, post_ev) if e]
        an.add(KV_SIZING_FAILED, ERROR, " ".join(parts).replace(" ;", ";"), evidence, fix)
    elif tokens is not None and tokens > 0 and (kv_obs is not None or summary):
        an.starts = True  # the KV pool was allocated (or its summary printed): sizing succeeded

    # --- effective fraction ------------------------------------------------------------------
    dsa_ratio = dsa_fp8_overallocation(log, flags, version)
    if not failed and pre is not None and post is not None and kv_gib is not None and pre > 0 and dsa_ratio:
        budget_gib = round(kv_gib * dsa_ratio, 2)
        an.extra["dsa_fp8_budgeted_kv_gib"] = budget_gib
        an.add(EFFECTIVE_FRACTION, INFO,
               f"DSA model with fp8_e4m3 KV before SGLang 0.5.18: the budget prices a token at the "
               f"{DSA_BUDGET_ROW}-wide latent row + {DSA_INDEXER_ROW} B indexer, but the pool allocates the "
               f"{DSA_BUFFER_ROW}-byte fp8 row, so the printed {kv_gib:.2f} GiB is {1 / dsa_ratio:.3f}× the "
               f"{budget_gib:.2f} GiB the formula budgeted; the extra {kv_gib - budget_gib:.2f} GiB comes out of the "
               "slack meant for activations and graphs (0.5.18 prices the 656-byte row)",
               [kv_obs.tokens.evidence] if kv_obs else [], None)
        kv_gib = budget_gib
    if not failed and pre is not None and post is not None and kv_gib is not None and pre > 0:
        eff = effective_mem_fraction_static(pre, post, kv_gib, mm)
        lo, hi = effective_fraction_bounds(pre, post, kv_gib, kv_terms, mm)
        an.extra["effective_mem_fraction_static"] = round(eff, 4)
        an.extra["effective_mem_fraction_static_range"] = [round(lo, 4), round(hi, 4)]
        evidence = [e for e in (pre_ev, post_ev, kv_obs.tokens.evidence) if e]
        only_local = len(pre_by_rank) < (tp or 1) or (tp is None and len(pre_by_rank) == 1)
        if mfs is not None:
            slack_tol = 0.002
            expected = [round(mfs * f, 6) for f in factors]
            agrees = any(lo - slack_tol <= x <= hi + slack_tol for x in expected)
            if agrees and 0.85 in factors and not lo - slack_tol <= mfs <= hi + slack_tol:
                an.add(EFFECTIVE_FRACTION, INFO,
                       f"the printed KV size implies mem_fraction_static ≈ {eff:.3f}: {mfs:g} × 0.85, the factor SGLang "
                       f"applies for attention_backend=aiter with context_len {ctx_len or '> 8192'}",
                       [e for e in (pre_ev, post_ev, kv_obs.tokens.evidence) if e], None)
            src = flag_source.get("mem_fraction_static")
            src_ev = log.server_args_evidence if src == "server_args" else log.launch_evidence
            an.check("effective mem_fraction_static", mfs, round(eff, 4), agrees,
                     "1 − (post_load_free − kv_size)/pre_model_load_memory", evidence + [src_ev])
            if not agrees:
                msg = (f"{kv_gib:.2f} GiB of KV at post-load {post:.2f} GiB and baseline {pre:.2f} GiB implies "
                       f"mem_fraction_static ≈ {eff:.3f} (range {lo:.3f}–{hi:.3f}), not {mfs:g}")
                msg += f" (from {'the server_args dump' if src == 'server_args' else 'the launch command' if src == 'launch command' else src})"
                if eff > mfs:
                    msg += ("; under that flag the KV budget would be "
                            f"{post - mm - pre * (1 - mfs):.2f} GiB")
                    msg += " — every released SGLang would refuse to start" if post - mm - pre * (1 - mfs) <= 0 else ""
                if src == "server_args":
                    fix = ("the ServerArgs dump shows the flag but the numbers follow another rule: a different sizing path "
                           "(DSA/NSA or hybrid pools, post-capture sizing), a patched SGLang, or figures from another start; "
                           "compare with `kvscope plan` for this model and version")
                else:
                    fix = ("check the server_args=ServerArgs(… mem_fraction_static=…) line at the top of the log: the server "
                           f"that printed these numbers ran with ≈{eff:.3f} (0.88 is SGLang's old default for large GPUs and "
                           "its fallback when GPU memory is unknown)")
                    if not log.server_args:
                        fix = "the log has no ServerArgs dump; " + fix
                severity = ERROR if abs(eff - mfs) > 0.05 else WARNING
                device = str(flags.get("device") or "cuda").lower()
                if device not in ("cuda", "auto", "none", "rocm", "hip"):
                    severity = INFO
                    msg += (f"; device={device}: the rule above is the CUDA/ROCm path, and this backend's memory "
                            "accounting was not traced (see docs/doctor.md, open mismatches)")
                    fix = None
                an.add(EFFECTIVE_FRACTION_MISMATCH, severity, msg, evidence + [src_ev], fix)
        else:
            an.add(EFFECTIVE_FRACTION, INFO,
                   f"the printed KV size implies mem_fraction_static ≈ {eff:.3f} (range {lo:.3f}–{hi:.3f}); the flag "
                   "is not in this log (SGLang's default is computed from GPU memory, TP and chunked prefill)",
                   evidence, None)
        if only_local and len(log.ranks) >= 1:
            an.extra["pre_model_load_memory_note"] = (
                "baseline is the local 'Load weight begin' figure of the ranks that printed it; SGLang uses the MIN across all ranks")

    # --- recomputation checks ----------------------------------------------------------------
    for r in ranks:
        for ld in r.loads:
            if ld.begin_avail_gib and ld.end_avail_gib and ld.usage_gib:
                rec = round(ld.begin_avail_gib.value - ld.end_avail_gib.value, 2)
                an.check(f"{r.label} weights mem usage", ld.usage_gib.value, rec,
                         abs(rec - ld.usage_gib.value) <= 0.011, "Load weight begin avail − end avail",
                         [ld.begin_avail_gib.evidence, ld.end_avail_gib.evidence])
        for g in r.graphs:
            if g.begin_avail_gib and g.end_avail_gib and g.usage_gib:
                rec = round(g.begin_avail_gib.value - g.end_avail_gib.value, 2)
                an.check(f"{r.label} {g.role} CUDA graph mem usage", g.usage_gib.value, rec,
                         abs(rec - g.usage_gib.value) <= 0.011, "capture begin avail − end avail",
                         [g.begin_avail_gib.evidence, g.end_avail_gib.evidence])
    if kv_obs is not None and summary.get("max_total_num_tokens") is not None:
        an.check("max_total_num_tokens", int(summary["max_total_num_tokens"]), int(kv_obs.tokens.value),
                 int(summary["max_total_num_tokens"]) == int(kv_obs.tokens.value), "#tokens of the KV pool",
                 [log.summary_evidence, kv_obs.tokens.evidence])
    _sglang_max_running_check(an, log, flags, tokens, version)
    if kv_obs is not None and cell_bytes and kv_obs.tokens.value > 0:
        size = (kv_obs.tokens.value + page) * cell_bytes / GiB
        printed = kv_obs.size_gib
        if kv_obs.kv_size_gib is None:
            rec = round(round(size / 2, 2) * 2, 2)
        else:
            rec = round(size, 2)
        an.check("KV size", printed, rec, abs(rec - printed) <= 0.011,
                 f"(#tokens + page_size) × {cell_bytes} B/token", [kv_obs.tokens.evidence])
    if kv_obs is not None and cell_bytes and mfs is not None and pre is not None and post is not None and not failed:
        lo_t, hi_t = _token_bounds(pre, post, mfs, mm, cell_bytes, page)
        t = int(kv_obs.tokens.value)
        an.check("max_total_num_tokens from the profile", t, [lo_t, hi_t], lo_t <= t <= hi_t,
                 "int((post − pre·(1 − mfs))·2^30) // cell // page · page, figures ±0.005 GiB; the engine's "
                 f"baseline is taken at the end of init, up to {SETUP_BEFORE_LOAD_GIB} GiB above 'Load weight begin'",
                 [pre_ev, post_ev, kv_obs.tokens.evidence])
    for c in an.checks:
        if not c.agrees and c.name not in ("effective mem_fraction_static", "max_running_requests"):
            an.add(ARITHMETIC_MISMATCH, WARNING,
                   f"{c.name}: printed {c.printed}, recomputed {c.recomputed} ({c.how})", c.evidence,
                   "the log may be edited or mixed from several runs, or this version computes it differently")

    _sglang_capacity_findings(an, log, flags, pre, post, tokens, cell_est, kv_obs, failed)
    _sglang_rank_findings(an, log, pre_by_rank)
    # the auto-disable warning is printed inside "Init torch distributed": only a log that holds the end of
    # that step (not an excerpt that starts at the weights) can show its absence
    reached_init = any(r.init_mem_usage_gib for r in ranks)
    custom_allreduce_forced(an, log, flags, tp, reached_init, "sglang")
    _sglang_runtime_findings(an, log, ranks, pre, kv_obs, failed, mfs)
    return an


def _sglang_max_running_check(an: Analysis, log: Any, flags: dict, tokens: int | None, version: str | None) -> None:
    """The summary's max_running_requests from its own max_total_num_tokens and context_len through the
    engine module (``engines/sglang/memory.py::max_num_reqs``: the req_to_token pool estimate and the
    T // 2 cap). A smaller printed value is a further cap the log may not show (mamba cache slots,
    --max-running-requests, DP attention), not an arithmetic error."""
    summary = log.summary
    if not version or not summary or not tokens or tokens <= 0:
        return
    printed, ctx = as_int(summary.get("max_running_requests")), as_int(summary.get("context_len"))
    if printed is None or not ctx:
        return
    try:
        from packaging.version import Version

        from .engines.sglang.memory import max_num_reqs

        user = as_int(flags.get("max_running_requests"))
        dp = as_int(flags.get("dp_size")) or 1
        attn_dp = dp if flags.get("enable_dp_attention") else 1

        def running_at(ver: str) -> int:
            return max_num_reqs(Version(ver), token_capacity=tokens, profiled_tokens=tokens, context_len=ctx,
                                max_running_requests=user, attn_dp_size=attn_dp)[1]

        running = running_at(version)
        if running != printed and not log.version_printed:
            # no printed version: the log's formats admit a range of releases; if one of them
            # computes the printed value (e.g. the +1 pool row of <= 0.4.6), that release ran
            for other in _releases_in_range(log):
                if running_at(other) == printed:
                    version, running = other, printed
                    break
    except Exception:  # noqa: BLE001 - a version the engine module does not know: no check
        return
    mamba = any(r.mamba for r in log.ranks.values())
    agrees = running == printed
    how = (f"engines/sglang/memory.py max_num_reqs at {version}: req_to_token pool from "
           f"max_total_num_tokens / context_len × 512 (clamped 2048–4096), then min(T // 2 or the flag, pool)")
    if not agrees and printed < running:
        how += "; a smaller printed value is a further cap (mamba cache slots" + (
            ", printed" if mamba else ", not in this log") + ", --max-running-requests or DP attention)"
    an.check("max_running_requests", printed, running, agrees, how, [log.summary_evidence])
    if printed < running and user is None and not log.events.get("max_running_reduced"):
        an.add(MAX_RUNNING_REDUCED, INFO,
               f"max_running_requests is {printed}, below the {running} that the req_to_token pool and "
               f"max_total_num_tokens // 2 allow: another limit capped it — with a hybrid (mamba / linear-attention) "
               "model the mamba cache slots (--max-mamba-cache-size), else DP attention or a patched default",
               [log.summary_evidence], None)


def _releases_in_range(log: Any) -> list[str]:
    """Known SGLang releases inside the version range the log's line formats imply, newest first."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from .engines.sglang.args import KNOWN_VERSIONS
    from .engines.sglang.logs import version_specifier

    try:
        spec = SpecifierSet(version_specifier(log.version_markers))
    except Exception:  # noqa: BLE001
        return []
    return sorted((v for v in KNOWN_VERSIONS if Version(v) in spec), key=Version, reverse=True)


def _token_bounds(pre: float, post: float, mfs: float, mm: float, cell: int, page: int) -> tuple[int, int]:
    """The engine's own profile (``engines/sglang/memory.py::profile``, measured-input mode) run at
    the corners of the printed figures' rounding (±0.005 GiB each)."""
    from packaging.version import Version

    from .engines.sglang.memory import profile, round_to_page

    h = PRINT_HALF_STEP_GIB
    out = []
    for p in (pre - h, pre + h + SETUP_BEFORE_LOAD_GIB):
        for a in (post - h, post + h):
            prof, _ = profile(Version("0.5.9"), pre_model_load_gib=p, available_gpu_gib=a, mem_fraction_static=mfs,
                              cell_bytes=cell, mm_reservation=mm)
            out.append(round_to_page(prof.profiled_tokens, page))
    return min(out), max(out)


def _sglang_capacity_findings(an: Analysis, log: Any, flags: dict, pre: float | None, post: float | None,
                              tokens: int | None, cell: int | None, kv_obs: Any, failed: bool) -> None:
    summary = log.summary
    ctx = as_int(summary.get("context_len")) if summary else None
    if ctx is None:
        ctx = as_int(flags.get("context_length"))
    if not failed and tokens and ctx and tokens < ctx:
        msg = (f"the KV pool holds {tokens:,} tokens but context_len is {ctx:,}: a request longer than "
               f"{tokens - 1:,} tokens (prompt + output) cannot be served (max_req_len = min(context_len − 1, "
               "max_total_num_tokens − 1)), and concurrent long requests will queue or be retracted")
        fix = f"pass --context-length {tokens} to make the limit explicit, or add KV memory"
        if cell and pre:
            extra_gib = (ctx - tokens) * cell / GiB
            fix += (f": holding {ctx:,} tokens needs ≈{extra_gib:.2f} GiB more, i.e. mem_fraction_static "
                    f"+{extra_gib / pre:.3f}")
            if extra_gib / pre > 0.99 - (an.extra.get("effective_mem_fraction_static") or 0):
                fix += " (more than this GPU has: use more GPUs or an fp8 KV cache)"
        an.add(KV_POOL_BELOW_CONTEXT, WARNING, msg, [log.summary_evidence, kv_obs.tokens.evidence if kv_obs else None], fix)
    for e in log.events.get("max_total_tokens_capped", []):
        if e.values["profiled"] > 0:
            an.add(MAX_TOTAL_TOKENS_CAPPED, INFO,
                   f"--max-total-tokens {e.values['user']:,} is larger than the profiled {e.values['profiled']:,}; "
                   "SGLang used the profiled value", e.evidence, None)
    for e in log.events.get("max_running_reduced", []):
        an.add(MAX_RUNNING_REDUCED, INFO,
               f"max_running_requests was reduced from {e.values['requested']} to {e.values['now']} by the KV capacity",
               e.evidence, None)


def _sglang_rank_findings(an: Analysis, log: Any, pre_by_rank: dict) -> None:
    events = log.events.get("unbalanced", [])
    if events:
        an.add(UNBALANCED_RANKS, WARNING,
               "SGLang reports unbalanced GPU memory across ranks: some GPU is partly occupied (another process, or "
               "a leftover server); the KV budget follows the emptiest-rank MIN",
               [e.evidence for e in events[:3]],
               "find the other process with nvidia-smi and stop it, or move to free GPUs (CUDA_VISIBLE_DEVICES)")
    elif len(pre_by_rank) > 1:
        values = {k: v[0] for k, v in pre_by_rank.items()}
        lo_k = min(values, key=values.get)
        hi_k = max(values, key=values.get)
        lo, hi = values[lo_k], values[hi_k]
        if lo < 0.9 * hi:
            an.add(UNBALANCED_RANKS, WARNING,
                   f"free memory before weights differs across ranks: {lo_k} {lo:.2f} GiB vs {hi_k} {hi:.2f} GiB "
                   "(below SGLang's 0.9 balance threshold); every rank is sized by the MIN",
                   [pre_by_rank[lo_k][2], pre_by_rank[hi_k][2]],
                   "find the other process on that GPU (nvidia-smi) and stop it")
        elif hi - lo > 1.0:
            an.add(UNBALANCED_RANKS, INFO,
                   f"free memory before weights differs by {hi - lo:.2f} GiB across ranks ({lo_k} {lo:.2f}, {hi_k} {hi:.2f}); "
                   "the KV budget uses the MIN", [pre_by_rank[lo_k][2], pre_by_rank[hi_k][2]], None)


def _sglang_runtime_findings(an: Analysis, log: Any, ranks: list, pre: float | None, kv_obs: Any, failed: bool,
                             mfs: float | None) -> None:
    # CUDA graphs / draft eating the slack
    for r in ranks[:1]:
        graphs = [g for g in r.graphs if g.end_avail_gib is not None]
        _, draft = (r.loads[0] if r.loads else None), (r.loads[1] if len(r.loads) > 1 else None)
        if graphs and pre:
            end = graphs[-1].end_avail_gib.value
            used = sum(g.usage_gib.value for g in graphs if g.usage_gib)
            if end < 0.05 * pre:
                an.add(CUDA_GRAPH_SLACK, WARNING,
                       f"after CUDA graph capture only {end:.2f} GiB is free on {r.label} (graphs used {used:.2f} GiB): "
                       "prefill activations and sampling buffers must fit there at runtime",
                       [graphs[-1].end_avail_gib.evidence],
                       "if requests hit CUDA OOM, lower --mem-fraction-static by 0.02–0.05 or --cuda-graph-max-bs")
        if draft is not None and draft.usage_gib is not None:
            classic = "kv_alloc_no_dtype" in log.version_markers or "capture_legacy" in log.version_markers
            an.add(DRAFT_MODEL_MEMORY, WARNING if classic else INFO,
                   f"a second model (speculative draft) loaded {draft.usage_gib.value:.2f} GiB on {r.label}"
                   + ("; before SGLang 0.5.14 its weights, KV and graphs come out of the (1 − mem_fraction_static) slack"
                      if classic else "; SGLang ≥0.5.14 counts it in the KV budget"),
                   [draft.end_avail_gib.evidence if draft.end_avail_gib else None],
                   "leave room for it: lower --mem-fraction-static by ≈ draft size / baseline" if classic else None)
    # custom all-reduce
    for e in log.events.get("custom_ar_disabled", [])[:1]:
        reason = e.values.get("reason")
        an.add(CUSTOM_ALLREDUCE, INFO,
               "custom all-reduce is disabled" + (" on more than two PCIe-only GPUs (NCCL is used; forcing custom AR on "
                                                   "PCIe contends for the bus)" if reason == "pcie" else f" ({reason})"),
               e.evidence, None)
    # runtime OOM: the fix goes the other way
    ooms = log.events.get("oom", [])
    if ooms:
        if kv_obs is not None and not failed:
            eff = an.extra.get("effective_mem_fraction_static") or mfs
            target = f" (e.g. {max(0.05, (eff or 0.9) - 0.05):.2f})" if eff else ""
            an.add(RUNTIME_OOM, ERROR,
                   f"CUDA out of memory after the KV pool was allocated ({log.event_counts.get('oom', 1)} line(s)): "
                   "the slack left for activations / CUDA graphs is too small",
                   [e.evidence for e in ooms[:3]],
                   f"lower --mem-fraction-static{target} — the opposite of the startup-failure fix — or lower "
                   "--chunked-prefill-size / --cuda-graph-max-bs")
        else:
            an.add(LOAD_OOM, ERROR, "CUDA out of memory before the KV pool was allocated (while loading weights or "
                   "initialising)", [e.evidence for e in ooms[:3]],
                   "the weights do not fit: use more GPUs (--tp), a quantized checkpoint, or free the GPUs")
    retracts = log.event_counts.get("kv_pool_full", 0)
    if retracts:
        an.add(KV_POOL_FULL, WARNING, f"the KV pool filled up at runtime and requests were retracted ({retracts} time(s))",
               [e.evidence for e in log.events["kv_pool_full"][:3]],
               "raise --mem-fraction-static (if the slack allows), add GPUs, or lower --max-running-requests")
    if kv_obs is None and not failed and not ooms and log.ranks and not log.summary:
        an.add(TRUNCATED, INFO, "the log ends before the KV cache was allocated (truncated, or still starting)", (), None)


# ---------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------

def _version_at_least(version: str | None, spec_range: str, floor: str) -> bool | None:
    """True/False when the printed version or the format range settles ``version >= floor``."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        if version:
            return Version(version) >= Version(floor)
        if spec_range:
            s = SpecifierSet(spec_range)
            probes = ["0.6.0", "0.10.0", "0.11.0", "0.13.0", "0.14.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0",
                      "0.20.2", "0.24.0", "0.27.0", "0.28.0", "0.30.0", "0.33.0"]
            fits = [Version(p) >= Version(floor) for p in probes if Version(p) in s]
            if fits and all(fits):
                return True
            if fits and not any(fits):
                return False
    except (InvalidVersion, InvalidSpecifier):
        return None
    return None


def analyze_vllm(log: Any, version: str | None, spec_range: str) -> Analysis:  # noqa: C901 - one rule per block
    from .engines.vllm.logs import effective_flags, worker_profile

    an = Analysis()
    flags, flag_source = effective_flags(log)
    workers = sorted(log.workers.values(), key=lambda w: (w.tags.get("PP", 0), w.tags.get("DP", 0), w.tags.get("TP", 0), w.label))
    profiles = {w.label: worker_profile(w) for w in workers}
    w0 = next((w for w in workers if "available_kv_gib" in profiles[w.label]), workers[0] if workers else None)
    p0 = profiles.get(w0.label, {}) if w0 else {}
    rec = log.record
    block = as_int(flags.get("block_size")) or log.block_size or 16
    mml = as_int(flags.get("max_model_len")) or log.max_model_len_printed
    util = as_float(flags.get("gpu_memory_utilization"))
    if util is None:
        util = p0.get("util")

    tokens = log.kv_cache_tokens.value if log.kv_cache_tokens else None
    if tokens is None and log.num_gpu_blocks is not None:
        tokens = log.num_gpu_blocks.value * block
    if tokens is None and rec.get("kv_cache_tokens") is not None:
        tokens = as_int(rec["kv_cache_tokens"])
    an.kv_cache_tokens = int(tokens) if tokens is not None else None
    an.max_running_requests = as_int(flags.get("max_num_seqs"))
    avail = p0.get("available_kv_gib", as_float(rec.get("kv_cache_memory_gib")))
    weights = p0.get("weights_gib", as_float(rec.get("weight_memory_gib")))
    if avail is not None:
        if avail > 0:
            an.kv_cache_bytes = gib_to_bytes(avail)
        an.extra["available_kv_cache_bytes"] = gib_to_bytes(avail)
    if weights is not None:
        an.weights_bytes = gib_to_bytes(weights)
    blocks = log.num_gpu_blocks.value if log.num_gpu_blocks else as_int(rec.get("kv_cache_blocks"))
    if blocks is None and log.final_num_gpu_blocks is not None:
        blocks = log.final_num_gpu_blocks.value
    if blocks is not None:
        an.extra["num_gpu_blocks"] = int(blocks)
    if util is not None:
        an.extra["gpu_memory_utilization"] = util
        an.extra["gpu_memory_utilization_source"] = flag_source.get("gpu_memory_utilization", "log")
    if mml is not None:
        an.extra["max_model_len"] = mml
    if log.max_concurrency is not None:
        an.extra["max_concurrency"] = log.max_concurrency.value
    elif rec.get("max_concurrency") is not None:
        an.extra["max_concurrency"] = as_float(rec.get("max_concurrency"))
    if avail is not None and tokens:
        an.extra["kv_cell_bytes_estimated"] = int(round(avail * GiB / tokens))
    total = p0.get("total_gpu_gib")
    if total is None and p0.get("requested_gib") and util:
        total = round(p0["requested_gib"] / util, 2)
        an.extra["total_memory_bytes_inferred"] = gib_to_bytes(total)
    ev_avail = w0.available_kv_gib.evidence if w0 is not None and w0.available_kv_gib else None

    # --- recomputation checks --------------------------------------------------------------
    cg_applied = _version_at_least(version, spec_range, "0.20.0")
    for w in workers:
        p = profiles[w.label]
        if {"non_kv_gib", "weights_gib", "torch_peak_increase_gib", "non_torch_increase_gib"} <= p.keys():
            r = round(p["weights_gib"] + p["torch_peak_increase_gib"] + p["non_torch_increase_gib"], 2)
            an.check(f"{w.label} non-KV memory", p["non_kv_gib"], r, abs(r - p["non_kv_gib"]) <= 0.021,
                     "weights + torch peak increase + non-torch increase (vLLM ≤0.26)",
                     [w.non_kv_gib.evidence if w.non_kv_gib else None])
        if {"requested_gib", "non_kv_gib", "available_kv_gib"} <= p.keys():
            cg = p.get("cuda_graph_estimate_gib", 0.0)
            plain = round(p["requested_gib"] - p["non_kv_gib"], 2)
            minus_cg = round(plain - cg, 2)
            if cg_applied is True:
                r, how = minus_cg, "requested − non-KV − CUDA graph estimate (vLLM ≥0.20)"
            elif cg_applied is False or not cg:
                r, how = plain, "requested − non-KV" + (" (the CUDA graph estimate is not subtracted before 0.20)" if cg else "")
            elif abs(minus_cg - p["available_kv_gib"]) < abs(plain - p["available_kv_gib"]):
                r, how = minus_cg, "requested − non-KV − CUDA graph estimate (the estimate was subtracted: vLLM ≥0.20)"
                cg_applied = True
            else:
                r, how = plain, "requested − non-KV (the CUDA graph estimate was not subtracted: vLLM <0.20)"
                cg_applied = False
            an.check(f"{w.label} available KV cache memory", p["available_kv_gib"], r,
                     abs(r - p["available_kv_gib"]) <= 0.021, how,
                     [w.requested_gib.evidence if w.requested_gib else None, w.available_kv_gib.evidence if w.available_kv_gib else None])
        if (not w.v0_profile and "non_kv_gib" not in p and w.profile_weights_gib is not None
                and {"requested_gib", "torch_peak_increase_gib", "non_torch_increase_gib", "available_kv_gib"} <= p.keys()):
            r = round(p["requested_gib"] - w.profile_weights_gib.value - p["torch_peak_increase_gib"]
                      - p["non_torch_increase_gib"], 2)
            an.check(f"{w.label} KV cache memory (profiling summary)", p["available_kv_gib"], r,
                     abs(r - p["available_kv_gib"]) <= 0.021,
                     "total × utilization − weights − non-torch − activation peak (vLLM 0.8–0.10 summary)",
                     [w.requested_gib.evidence, w.available_kv_gib.evidence if w.available_kv_gib else None])
        if w.v0_profile and {"total_gpu_gib", "util", "peak_torch_gib", "non_torch_increase_gib", "available_kv_gib"} <= p.keys():
            r = round(p["total_gpu_gib"] * p["util"] - p["peak_torch_gib"] - p["non_torch_increase_gib"], 2)
            an.check(f"{w.label} KV cache size (V0)", p["available_kv_gib"], r, abs(r - p["available_kv_gib"]) <= 0.021,
                     "total × utilization − peak torch − non-torch (vLLM V0)", [w.v0_profile_evidence])
        if w.requested_gib is not None and w.total_gpu_gib is not None and w.requested_util is not None:
            r = round(w.total_gpu_gib.value * w.requested_util, 2)
            an.check(f"{w.label} requested memory", w.requested_gib.value, r, abs(r - w.requested_gib.value) <= 0.011,
                     "total × gpu_memory_utilization", [w.requested_gib.evidence])
    if rec:
        if {"kv_cache_tokens", "kv_cache_blocks"} <= rec.keys():
            r = as_int(rec["kv_cache_blocks"]) * 16
            an.check("kv cache tokens (record)", as_int(rec["kv_cache_tokens"]), r, r == as_int(rec["kv_cache_tokens"]),
                     "blocks × 16", [log.record_evidence])
        keys = ("weight_memory_gib", "activation_memory_gib", "non_torch_forward_memory_gib", "total_non_kv_memory_gib")
        if all(as_float(rec.get(k)) is not None for k in keys):
            r = round(sum(as_float(rec[k]) for k in keys[:3]), 2)
            an.check("non-KV memory (record)", as_float(rec[keys[3]]), r, abs(r - as_float(rec[keys[3]])) <= 0.021,
                     "weights + activation peak + non-torch", [log.record_evidence])
    if log.num_gpu_blocks is not None:
        v0_err = log.first("max_seq_len_too_large")
        if v0_err:
            r = log.num_gpu_blocks.value * block
            an.check("KV tokens in the error", v0_err.values["kv_tokens"], r, r == v0_err.values["kv_tokens"],
                     f"# GPU blocks × block_size {block}", [log.num_gpu_blocks.evidence, v0_err.evidence])
    fb = log.final_num_gpu_blocks
    if fb is not None and log.kv_cache_tokens is not None and "merged_capacity" not in log.version_markers:
        t = int(log.kv_cache_tokens.value)
        raw = int(fb.value) * block
        groups = next((k for k in range(1, 9) if t * k == raw or (raw // k) // block * block == t), None)
        an.check("GPU KV cache size from num_gpu_blocks", t, raw if groups in (None, 1) else raw // groups,
                 groups is not None,
                 f"num_gpu_blocks × block_size {block}" + (f" / {groups} KV cache groups" if groups and groups > 1 else ""),
                 [fb.evidence, log.kv_cache_tokens.evidence])
    conc = log.max_concurrency.value if log.max_concurrency else None
    if conc is not None and tokens and (log.max_model_len_printed or mml):
        m = log.max_model_len_printed or mml
        r = round(tokens / m, 2)
        uniform = abs(r - conc) <= 0.011
        an.check("maximum concurrency", conc, r, uniform, "KV tokens / max_model_len (uniform full-attention layout)",
                 [log.max_concurrency.evidence])
        merged = "merged_capacity" in log.version_markers or _version_at_least(version, spec_range, "0.20.2")
        if merged:
            an.add(HYBRID_TOKEN_COUNT, INFO,
                   f"this vLLM derives 'GPU KV cache size: {int(tokens):,} tokens' as int(max_concurrency × max_model_len); "
                   "for hybrid models (sliding window, mamba, compressed MLA) the physical pool can hold more "
                   "(vllm-project/vllm#51041)", [log.kv_cache_tokens.evidence if log.kv_cache_tokens else None], None)
        elif int(tokens) % block and not log.block_size and not flags.get("block_size"):
            an.add(HYBRID_TOKEN_COUNT, INFO,
                   f"'GPU KV cache size: {int(tokens):,} tokens' is not a multiple of the block size {block}: this vLLM "
                   "derived it as int(max_concurrency × max_model_len) (a hybrid layout: sliding window, mamba/linear "
                   "attention); the physical pool can hold more (vllm-project/vllm#51041)",
                   [log.kv_cache_tokens.evidence if log.kv_cache_tokens else None], None)
        elif not uniform:
            an.add(HYBRID_TOKEN_COUNT, INFO,
                   f"tokens / max_model_len = {r} but vLLM printed concurrency {conc}x: a non-uniform (hybrid) KV layout, "
                   "where tokens = num_blocks // num_groups × block_size and a request needs blocks in every group",
                   [log.max_concurrency.evidence], None)
    if cg_applied is not None:
        an.extra["cuda_graph_estimate_subtracted"] = cg_applied
    for c in list(an.checks):
        if not c.agrees and c.name != "maximum concurrency":
            an.add(ARITHMETIC_MISMATCH, WARNING, f"{c.name}: printed {c.printed}, recomputed {c.recomputed} ({c.how})",
                   c.evidence, "the log may be edited or mixed from several runs, or this version computes it differently")

    _vllm_failure_findings(an, log, flags, util, total, avail, tokens, block, mml, ev_avail)
    _vllm_other_findings(an, log, workers, profiles, util, cg_applied, version, spec_range)
    # vLLM warns while creating the communicators, after the config lines and before the weights: a log with
    # both ends of that window
    reached_init = bool(log.non_default_args or log.engine_config or log.launch_flags) and any(
        w.weights_gib is not None or w.profile_weights_gib is not None for w in workers)
    custom_allreduce_forced(an, log, flags, as_int(flags.get("tensor_parallel_size")), reached_init, "vllm")
    return an


def _vllm_failure_findings(an: Analysis, log: Any, flags: dict, util: float | None, total: float | None,
                           avail: float | None, tokens: Any, block: int, mml: int | None, ev_avail: str | None) -> None:
    failed = False
    e = log.first("max_seq_len_too_large")
    if e:
        failed = True
        fits = e.values["kv_tokens"] // block * block
        fix = f"--max-model-len {fits} (what the KV cache holds)"
        if util and total and avail is not None and tokens:
            per_token = avail / tokens
            non_kv = total * util - avail
            need = math.ceil(e.values["max_model_len"] / block) * block * per_token
            u = ceil_to((non_kv + need) / total, 0.01)
            fix += (f", or --gpu-memory-utilization {u:.2f} (estimated: the profiled activation peak also changes "
                    "with max_model_len)")
            an.fix.append(("gpu_memory_utilization", round(u, 2), "estimated utilization that holds one max-length request"))
        an.fix.append(("max_model_len", fits, "the longest request the KV cache holds"))
        an.add(KV_SIZING_FAILED, ERROR,
               f"vLLM failed at KV sizing: max_model_len {e.values['max_model_len']:,} needs more than the "
               f"{e.values['kv_tokens']:,} tokens the KV cache holds", [e.evidence, ev_avail], fix)
    e = log.first("serve_one_request")
    if e:
        failed = True
        v = e.values
        fix_parts = []
        if v.get("estimated_max_model_len"):
            fix_parts.append(f"--max-model-len {v['estimated_max_model_len']}")
            an.fix.append(("max_model_len", v["estimated_max_model_len"], "vLLM's estimate of what fits"))
        if util and total:
            u = ceil_to(util + (v["needed_gib"] - v["available_gib"]) / total + 0.005, 0.01)
            if u <= 0.99:
                fix_parts.append(f"--gpu-memory-utilization {u:.2f}")
                an.fix.append(("gpu_memory_utilization", round(u, 2), "adds the missing KV memory"))
        an.add(KV_SIZING_FAILED, ERROR,
               f"vLLM failed at KV sizing: one request of max_model_len {v['max_model_len']:,} needs {v['needed_gib']} GiB "
               f"of KV but only {v['available_gib']} GiB is available", [e.evidence, ev_avail],
               " or ".join(fix_parts) or "raise --gpu-memory-utilization or lower --max-model-len")
    e = log.first("no_available_memory")
    if e:
        failed = True
        an.add(KV_SIZING_FAILED, ERROR, "vLLM failed at KV sizing: no memory is left for KV blocks after weights and "
               "the profiled activations", [e.evidence, ev_avail],
               "raise --gpu-memory-utilization, use more GPUs (--tensor-parallel-size) or lower --max-num-batched-tokens")
    e = log.first("free_less_than_util")
    if e:
        failed = True
        v = e.values
        u = math.floor((v["free_gib"] / v["total_gib"] - 0.01) * 100) / 100
        an.fix.append(("gpu_memory_utilization", u, "fits into the memory free at startup"))
        an.add(FREE_BELOW_UTILIZATION, ERROR,
               f"only {v['free_gib']} of {v['total_gib']} GiB were free at startup, less than the requested "
               f"{v['util']} × total = {v['requested_gib']} GiB (another process holds the GPU)", e.evidence,
               (f"stop the other process holding ≈{v['total_gib'] - v['free_gib']:.2f} GiB on this GPU (nvidia-smi), "
                f"or lower --gpu-memory-utilization to {u:.2f}"
                + (" (probably too little for the weights: free the GPU instead)" if u < 0.3 else "")))
    if not failed and avail is not None and avail <= 0:
        failed = True
        w = an.weights_bytes / GiB if an.weights_bytes else None
        an.add(KV_SIZING_FAILED, ERROR,
               f"vLLM failed at KV sizing: Available KV cache memory is {avail} GiB — the weights"
               + (f" ({w:.2f} GiB)" if w is not None else "") + " and the profiled activation peak already exceed "
               "gpu_memory_utilization × total memory, so no KV block fits",
               [ev_avail], "raise --gpu-memory-utilization, lower --max-num-batched-tokens / --max-model-len, "
               "or use more GPUs (--tensor-parallel-size) or a smaller checkpoint")
    if (not failed and log.num_gpu_blocks is not None and mml and tokens and tokens < mml
            and "v0_blocks" in log.version_markers and not log.kv_cache_tokens):
        failed = True
        fits = int(tokens) // block * block
        an.fix.append(("max_model_len", fits, "the longest request the KV cache holds"))
        an.add(KV_SIZING_FAILED, ERROR,
               f"max_model_len {mml:,} exceeds the {int(tokens):,} tokens the KV cache holds (# GPU blocks "
               f"{int(log.num_gpu_blocks.value):,} × block_size {block}): vLLM (V0) raises ValueError right after this line",
               [log.num_gpu_blocks.evidence], f"--max-model-len {fits}, or raise --gpu-memory-utilization")
    if log.first("auto_fit_failed"):
        failed = True
        an.add(KV_SIZING_FAILED, ERROR, "vLLM could not auto-fit max_model_len: not even one token fits",
               log.first("auto_fit_failed").evidence, "raise --gpu-memory-utilization")
    crashed = log.first("engine_failed")
    if crashed and not failed:
        failed = True
        an.add(STARTUP_FAILED, ERROR, "the engine failed to start after the memory figures above (EngineCore failed "
               "to start); the cause is in the traceback that follows that line", [crashed.evidence, ev_avail],
               "read the exception at the end of the traceback; for a memory error raise --gpu-memory-utilization "
               "or lower --max-model-len / --max-num-seqs")
    if failed:
        an.starts = False
        an.error = next((f.evidence[0] for f in an.findings
                         if f.code in (KV_SIZING_FAILED, FREE_BELOW_UTILIZATION, STARTUP_FAILED) and f.evidence), None)
        failed_codes = {f.code for f in an.findings if f.severity == ERROR}
        an.extra["failed_at"] = ("kv_sizing" if KV_SIZING_FAILED in failed_codes else
                                 "init" if FREE_BELOW_UTILIZATION in failed_codes else "engine")
    elif avail is not None or tokens:
        an.starts = True
        conc = an.extra.get("max_concurrency")
        if conc is not None and conc < 1.0:
            an.add(KV_POOL_BELOW_CONTEXT, WARNING,
                   f"the KV cache holds {conc}x of one max_model_len request: a full-length request cannot be served",
                   [log.max_concurrency.evidence if log.max_concurrency else None],
                   "lower --max-model-len or raise --gpu-memory-utilization")


def _vllm_other_findings(an: Analysis, log: Any, workers: list, profiles: dict, util: float | None,
                         cg_applied: bool | None, version: str | None, spec_range: str) -> None:
    avails = {w.label: profiles[w.label]["available_kv_gib"] for w in workers if "available_kv_gib" in profiles[w.label]}
    if len(avails) > 1:
        lo_k, hi_k = min(avails, key=avails.get), max(avails, key=avails.get)
        if avails[lo_k] < 0.95 * avails[hi_k]:
            an.add(UNBALANCED_RANKS, WARNING,
                   f"available KV memory differs across workers: {lo_k} {avails[lo_k]} GiB vs {hi_k} {avails[hi_k]} GiB; "
                   "vLLM sizes every worker by the minimum number of blocks",
                   [w.available_kv_gib.evidence for w in workers if w.label in (lo_k, hi_k) and w.available_kv_gib],
                   "look for another process on the GPU with less memory (nvidia-smi)")
    for w in workers[:1]:
        p = profiles[w.label]
        est = p.get("cuda_graph_estimate_gib")
        free_beyond = None
        if "initial_free_gib" in p and "requested_gib" in p:
            free_beyond = round(p["initial_free_gib"] - p["requested_gib"], 2)
        if est and cg_applied is False:
            msg = (f"this vLLM measures CUDA graphs ({est} GiB) but does not reserve them before sizing the KV cache: "
                   "they are captured afterwards, outside the utilization budget")
            sev = INFO
            if free_beyond is not None:
                msg += f" (free beyond the budget at init: {free_beyond} GiB)"
                sev = WARNING if free_beyond < est else INFO
            an.add(CUDA_GRAPH_NOT_RESERVED, sev, msg, [w.cuda_graph_estimate_gib.evidence],
                   "lower --gpu-memory-utilization by the estimate / total if capture fails" if sev == WARNING else None)
        took = p.get("cuda_graph_gib")
        if took and free_beyond is not None and cg_applied is not True and took > free_beyond:
            an.add(CUDA_GRAPH_SLACK, WARNING,
                   f"CUDA graph capture took {took} GiB but only {free_beyond} GiB was free beyond the utilization budget",
                   [w.cuda_graph_gib.evidence], "lower --gpu-memory-utilization or --max-num-seqs (fewer graph sizes)")
    for e in log.events.get("custom_ar_disabled", [])[:1]:
        an.add(CUSTOM_ALLREDUCE, INFO, "custom all-reduce is disabled" + (
            " on more than two PCIe-only GPUs (NCCL is used)" if e.values.get("reason") == "pcie" else f" ({e.values.get('reason')})"),
            e.evidence, None)
    ooms = log.events.get("oom", [])
    if ooms:
        if an.starts:
            an.add(RUNTIME_OOM, ERROR, "CUDA out of memory after the KV cache was allocated: the memory outside the KV "
                   "budget (activations, CUDA graphs, other processes) ran out", [e.evidence for e in ooms[:3]],
                   f"lower --gpu-memory-utilization{f' (e.g. {util - 0.05:.2f})' if util else ''} — the opposite of the "
                   "startup fix — or lower --max-num-seqs / --max-num-batched-tokens")
        else:
            an.add(LOAD_OOM, ERROR, "CUDA out of memory before the KV cache was sized", [e.evidence for e in ooms[:3]],
                   "the weights do not fit: use more GPUs (--tensor-parallel-size) or a quantized checkpoint")
    if log.events.get("preempted"):
        an.add(KV_POOL_FULL, WARNING, f"requests were preempted for lack of KV blocks ({log.event_counts['preempted']} time(s))",
               [e.evidence for e in log.events["preempted"][:3]],
               "raise --gpu-memory-utilization or lower --max-num-seqs")
    e = log.first("profiling_error")
    if e:
        an.add(PROFILING_ERROR, ERROR, "free memory grew during profiling: another process on the GPU released memory",
               e.evidence, "isolate vLLM on its GPUs")
    for e in log.events.get("kv_cache_memory_bytes", [])[:1]:
        an.add(EFFECTIVE_FRACTION, INFO, "--kv-cache-memory-bytes set the KV size; gpu_memory_utilization did not",
               e.evidence, None)
    for e in log.events.get("num_gpu_blocks_override", [])[:1]:
        an.add(EFFECTIVE_FRACTION, INFO, f"num_gpu_blocks_override replaced the computed {e.values['computed']} blocks "
               f"with {e.values['override']}", e.evidence, None)
    if not an.starts and not an.findings and not log.workers and not log.record:
        an.add(TRUNCATED, INFO, "no KV sizing lines found (truncated log, or still starting)", (), None)
    elif an.starts is None and (log.workers or log.record) and not ooms:
        an.add(TRUNCATED, INFO, "the log ends before the KV cache was sized (truncated, or still starting)", (), None)


# ---------------------------------------------------------------------------------------------
# vLLM with a catalog model: the engine module's own capacity step
# ---------------------------------------------------------------------------------------------

_VLLM_PROBES = ("0.6.4", "0.8.5", "0.10.1", "0.11.0", "0.13.0", "0.14.1", "0.17.0", "0.19.0", "0.20.2", "0.24.0",
                "0.28.0", "0.30.0", "0.33.0")


def _vllm_version_for(version: str | None, spec_range: str) -> str | None:
    """The printed version, else the newest probe inside the range the line formats imply."""
    if version:
        return version
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        s = SpecifierSet(spec_range or "")
    except InvalidSpecifier:
        return None
    fits = [p for p in _VLLM_PROBES if Version(p) in s]
    return fits[-1] if fits else None


def vllm_model_checks(an: Analysis, log: Any, model: str | None, version: str | None, spec_range: str) -> None:
    """With a catalog model, run ``engines/vllm/memory.py::capacity_from_available`` on the printed
    available KV memory (±0.005 GiB, the print rounding) and compare its tokens / blocks / concurrency —
    or, for a failed start, the KV one request needs — with the log. Nothing when the model is unknown."""
    from .engines.vllm.logs import effective_flags

    if not model:
        return
    flags, _ = effective_flags(log)
    e_one = log.first("serve_one_request")
    avail = an.extra.get("available_kv_cache_bytes")
    if avail is None and e_one is not None:
        avail = gib_to_bytes(e_one.values["available_gib"])
    if avail is None or avail <= 0:
        return
    mml = as_int(flags.get("max_model_len")) or log.max_model_len_printed or (
        e_one.values["max_model_len"] if e_one is not None else None)
    try:
        from .engines.vllm import memory as mem
        from .engines.vllm.args import VllmFlags, resolve_args, version_traits
        from .model.load import load_spec

        spec, _ = load_spec(model)
        cg = an.extra.get("cuda_graph_estimate_subtracted")  # the arithmetic dates the release too
        narrowed = ",".join(x for x in (spec_range, "" if cg is None else ("<0.20.0" if cg is False else ">=0.20.0")) if x)
        v = _vllm_version_for(version, narrowed)
        traits = version_traits(v)
        f = VllmFlags(
            tensor_parallel_size=as_int(flags.get("tensor_parallel_size")) or 1,
            pipeline_parallel_size=as_int(flags.get("pipeline_parallel_size")) or 1,
            max_model_len=mml, max_num_seqs=as_int(flags.get("max_num_seqs")),
            max_num_batched_tokens=as_int(flags.get("max_num_batched_tokens")),
            kv_cache_dtype=str(flags.get("kv_cache_dtype") or "auto"),
            block_size=as_int(flags.get("block_size")) or log.block_size,
            enforce_eager=bool(flags.get("enforce_eager")),
            gpu_memory_utilization=as_float(flags.get("gpu_memory_utilization")),
        )
        a = resolve_args(f, traits=traits, model_max_len=spec.max_position_embeddings, gpu_memory_bytes=80 * GiB,
                         gpu_name="unknown", is_mla=spec.is_mla,
                         is_hybrid_mamba=spec.mamba is not None and spec.num_kv_layers > 0,
                         num_attention_heads=spec.num_attention_heads)
        kv = mem.model_kv(spec, a, a.max_model_len)
        caps = [mem.capacity_from_available([avail + d] * a.pp, kv, spec, a, a.max_model_len)
                for d in (-gib_to_bytes(PRINT_HALF_STEP_GIB), 0, gib_to_bytes(PRINT_HALF_STEP_GIB))]
    except Exception:  # noqa: BLE001 - unknown model, version or flags: no model-based checks
        return
    lo, mid, hi = caps
    how = f"engines/vllm/memory.py capacity_from_available, {model}, vLLM {v or 'latest'}, available ±0.005 GiB"
    missing = [k for k in ("max_num_batched_tokens", "max_model_len") if k not in flags and not (k == "max_model_len" and mml)]
    if missing:
        how += f"; {', '.join(missing)} not in the log: vLLM's default assumed"
    an.extra["vllm_capacity_version"] = v
    ev = [e for e in (log.kv_cache_tokens.evidence if log.kv_cache_tokens else None,
                      log.num_gpu_blocks.evidence if log.num_gpu_blocks else None) if e]
    if log.num_gpu_blocks is not None:
        b = int(log.num_gpu_blocks.value)
        an.check("num_gpu_blocks from the model", b, [lo.num_gpu_blocks, hi.num_gpu_blocks],
                 lo.num_gpu_blocks <= b <= hi.num_gpu_blocks, how, ev)
    elif log.kv_cache_tokens is not None:
        t = int(log.kv_cache_tokens.value)
        an.check("GPU KV cache size from the model", t, [lo.kv_cache_tokens, hi.kv_cache_tokens],
                 lo.kv_cache_tokens <= t <= hi.kv_cache_tokens, how, ev)
    if e_one is not None:
        need = round(mid.needed_memory_bytes / GiB, 2)
        an.check("KV needed for one max_model_len request", e_one.values["needed_gib"], need,
                 abs(need - e_one.values["needed_gib"]) <= 0.011, how, [e_one.evidence])
