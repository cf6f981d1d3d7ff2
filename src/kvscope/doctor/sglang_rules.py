"""The doctor's rules for an SGLang log: each reads what the log printed and says what it means.

``analyze_sglang`` observes the start once (``SglangObserved``: the MIN baseline and post-load
figures over the ranks, the KV pool, the failure events) and runs ``RULES`` in order; each rule
adds figures, checks and findings to the ``Analysis``. The profile algebra is the engine's
(``engines/sglang/memory.py``): the doctor inverts it with ``memory.fraction_for`` and runs
``memory.profile`` / ``pools.max_num_reqs`` / ``kv_cache.cell_size``, it does not restate them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..engines.sglang import deepseek_v4 as sgl_dsv4
from ..engines.sglang import kv_cache as sgl_kv_cache
from ..engines.sglang import memory as sgl_memory
from ..engines.sglang import pools as sgl_pools
from ..engines.sglang.logs import (
    KvAllocObs,
    SglangLog,
    SglangRank,
    baseline_gib,
    phase_of,
    post_load_gib,
    target_and_draft,
    version_specifier,
)
from ..engines.sglang.release import KNOWN_VERSIONS, TRAITS, release
from ..logs.grammar import Event
from ..model.load import load_spec
from ..units import GiB, gib_to_bytes
from .findings import (
    CUDA_GRAPH_SLACK,
    DRAFT_MODEL_MEMORY,
    EFFECTIVE_FRACTION,
    EFFECTIVE_FRACTION_MISMATCH,
    ERROR,
    INFO,
    KV_POOL_BELOW_CONTEXT,
    KV_POOL_FULL,
    KV_SIZING_FAILED,
    MAX_RUNNING_REDUCED,
    MAX_TOTAL_TOKENS_CAPPED,
    PRINT_HALF_STEP_GIB,
    RUNTIME_OOM,
    TRUNCATED,
    UNBALANCED_RANKS,
    WARNING,
    Analysis,
    as_int,
    ceil_to,
)
from .outcome import failed_start
from .rules_common import (
    ObservedFlags,
    custom_allreduce_disabled,
    custom_allreduce_forced,
    float_flag,
    int_flag,
    text_flag,
)

# SGLang measures pre_model_load_memory at the end of ModelRunner.init_torch_distributed; "Load weight begin"
# is printed after the forward stream, offloader, expert metadata and sampler are set up (model_runner.py
# @ v0.5.10), so the printed baseline can sit this much below the engine's (0.09-0.14 GiB seen on B200).
SETUP_BEFORE_LOAD_GIB = 0.15
AITER_FACTOR = 0.85

DSA_CLASSES = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")
# Before 0.5.18 SGLang budgets a DSA token at the 576-wide MLA row but, with fp8_e4m3 KV, allocates
# the 656-byte packed fp8 row (get_cell_size_per_token @ v0.5.9; _compute_cell_size @ v0.5.13;
# NSATokenToKVPool buffers): DeepSeek-V3.2 / GLM-5 (kv_lora 512 + rope 64, indexer 128 + 4 scale B).
DSA_BUDGET_ROW, DSA_BUFFER_ROW, DSA_INDEXER_ROW = 576, 656, 132

# Representatives of the log-format ranges (for version-dependent formulas when no version is printed).
# A list of releases, not a behaviour: the points the log's range (release.TRAITS "log_*" traits) is
# sampled at; each era of the release table has one. Its boundaries live in the table, not here.
REPRESENTATIVE_RELEASES = ("0.4.6.post5", "0.4.10.post2", "0.5.3", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10",
                           "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.18", "0.5.20", "0.5.23")
FALLBACK_RELEASE = "0.5.9"


@dataclass(frozen=True)
class SglangFlags(ObservedFlags):
    """SGLang's flags as the log shows them (ServerArgs dump > launch command > --set)."""

    page_size: int | None
    mem_fraction_static: float | None
    tp_size: int | None
    dp_size: int | None
    context_length: int | None
    max_running_requests: int | None
    enable_dp_attention: bool
    attention_backend: str  # as text; "None" when the log does not show it
    kv_cache_dtype: str | None
    device: str  # lower case; "cuda" when the log does not show it
    unparsed: frozenset[str]  # tp_size / dp_size printed as something that is not a number

    @classmethod
    def build(cls, flags: Mapping[str, Any], source: Mapping[str, str]) -> SglangFlags:
        return cls(
            **ObservedFlags.common(flags, source),
            page_size=int_flag(flags, "page_size"), mem_fraction_static=float_flag(flags, "mem_fraction_static"),
            tp_size=int_flag(flags, "tp_size"), dp_size=int_flag(flags, "dp_size"),
            context_length=int_flag(flags, "context_length"),
            max_running_requests=int_flag(flags, "max_running_requests"),
            enable_dp_attention=bool(flags.get("enable_dp_attention")),
            attention_backend=str(flags.get("attention_backend")), kv_cache_dtype=text_flag(flags, "kv_cache_dtype"),
            device=str(flags.get("device") or "cuda").lower(),
            unparsed=frozenset(k for k in ("tp_size", "dp_size") if flags.get(k) and as_int(flags.get(k)) is None),
        )

    @property
    def mfs_source(self) -> str | None:
        return self.source.get("mem_fraction_static")


# ---------------------------------------------------------------------------------------------
# Version and model, for the engine functions the rules run
# ---------------------------------------------------------------------------------------------

def representative_release(log: SglangLog) -> str:
    """A released version inside the range the log's formats imply (for version-dependent formulas)."""
    try:
        s = SpecifierSet(version_specifier(log.version_markers))
    except Exception:  # noqa: BLE001
        return FALLBACK_RELEASE
    fits = [v for v in REPRESENTATIVE_RELEASES if Version(v) in s]
    return fits[-1] if fits else FALLBACK_RELEASE


def releases_in_range(log: SglangLog) -> list[str]:
    """Known SGLang releases inside the version range the log's line formats imply, newest first."""
    try:
        spec = SpecifierSet(version_specifier(log.version_markers))
    except Exception:  # noqa: BLE001
        return []
    return sorted((v for v in KNOWN_VERSIONS if Version(v) in spec), key=Version, reverse=True)


def cell_bytes_for(model: str | None, flags: SglangFlags, log: SglangLog) -> int | None:
    """Exact KV bytes per token per rank for a model the catalog knows, through the SGLang engine
    module (``engines/sglang/kv_cache.py::cell_size``); ``None`` when the model is unknown (the doctor
    then estimates the cell from the printed sizes and says so)."""
    if not model or flags.unparsed:
        return None
    try:
        spec, _ = load_spec(model)
        rel = release(log.version_printed or representative_release(log))
        tp, dp = flags.tp_size or 1, flags.dp_size or 1
        attn_tp = max(1, tp // dp) if flags.enable_dp_attention else tp
        kv_flag = flags.kv_cache_dtype or "auto"
        if spec.dsv4 is not None:  # DeepSeek-V4's own pools (engines/sglang/deepseek_v4.py)
            return sgl_dsv4.cell_size(spec, speculative=False).cell_bytes
        _, e = sgl_kv_cache.kv_cache_dtype(spec, kv_flag)
        return sgl_kv_cache.cell_size(spec, rel, attn_tp=attn_tp, kv_bytes=e, kv_flag=kv_flag).cell_bytes
    except Exception:  # noqa: BLE001 - an unknown model or version just means no exact cell size
        return None


# ---------------------------------------------------------------------------------------------
# The profile algebra, inverted (engines/sglang/memory.py)
# ---------------------------------------------------------------------------------------------

def fraction_for(pre_gib: float, post_gib: float, kv_gib: float, mm_gib: float = 0.0) -> float:
    """The mem_fraction_static whose budget is exactly ``kv_gib``: SGLang's profile solved for the
    fraction (``memory.fraction_for`` with the printed KV size as the budget)."""
    return sgl_memory.fraction_for(pre_model_load_gib=pre_gib, available_gpu_gib=post_gib, budget_gib=kv_gib,
                                   reserve_gib=mm_gib)


def fraction_bounds(pre: float, post: float, kv: float, kv_terms: int, mm: float = 0.0) -> tuple[float, float]:
    """The range of fractions consistent with figures each rounded to ±0.005 GiB."""
    h = PRINT_HALF_STEP_GIB
    values = [fraction_for(p, a, k, mm)
              for p in (pre - h, pre + h) for a in (post - h, post + h)
              for k in (kv - h * kv_terms, kv + h * kv_terms) if p > 0]
    return min(values), max(values)


def token_bounds(pre: float, post: float, mfs: float, mm: float, cell: int, page: int) -> tuple[int, int]:
    """The engine's own profile (``engines/sglang/memory.py::profile``, measured-input mode) run at
    the corners of the printed figures' rounding (±0.005 GiB each)."""
    h = PRINT_HALF_STEP_GIB
    out = []
    for p in (pre - h, pre + h + SETUP_BEFORE_LOAD_GIB):
        for a in (post - h, post + h):
            prof, _ = sgl_memory.profile(release("0.5.9"), pre_model_load_gib=p, available_gpu_gib=a,
                                         mem_fraction_static=mfs, cell_bytes=cell, mm_reservation=mm)
            out.append(sgl_pools.round_to_page(prof.profiled_tokens, page))
    return min(out), max(out)


def aiter_fraction_factors(flags: SglangFlags, context_len: int | None, version: str | None) -> tuple[float, ...]:
    """The factors SGLang may have applied to the mem_fraction_static the log shows (1.0 = none).

    ``attention_backend == "aiter"`` and ``context_len > 8192``: x0.85, applied to the user's value
    too (kvscope/engines/sglang/backend.py: model_runner.py @ v0.4.7-v0.5.3, after the
    ServerArgs dump; server_args.py @ v0.5.6+, before it, so a dumped value already includes it).
    Absent @ v0.4.6.post5. When the version or context is not known both readings are allowed."""
    if flags.attention_backend != "aiter" or (context_len is not None and context_len <= 8192):
        return (1.0,)
    try:
        v = Version(version) if version else None
    except InvalidVersion:
        v = None
    if v is not None and not TRAITS["aiter_fraction_factor"].at(v):
        return (1.0,)
    if context_len is None:
        return (1.0, AITER_FACTOR)
    # the ServerArgs dump shows the multiplied value from 0.5.4 (release table)
    dumped_after = flags.mfs_source == "server_args" and (
        v is None or TRAITS["server_args_dump_after_aiter_factor"].at(v))
    if dumped_after:
        return (1.0,) if v is not None else (1.0, AITER_FACTOR)
    return (AITER_FACTOR,)


def dsa_fp8_overallocation(log: SglangLog, flags: SglangFlags, version: str | None) -> float | None:
    """budget / allocated bytes per token for a DSA model with fp8 KV before 0.5.18, else None."""
    classes = {ld.model_class for r in log.ranks.values() for ld in r.loads if ld.model_class}
    if not classes & set(DSA_CLASSES):
        return None
    dtypes = {a.dtype for r in log.ranks.values() for a in r.kv_allocs if a.dtype}
    if "fp8_e4m3" not in (flags.kv_cache_dtype or "") and not any("float8_e4m3fn" in str(d) for d in dtypes):
        return None
    try:
        if version and TRAITS["dsa_fp8_scaled_cell"].at(Version(version)):  # 0.5.18 prices the 656-byte row
            return None
    except InvalidVersion:
        pass
    return (DSA_BUDGET_ROW + DSA_INDEXER_ROW) / (DSA_BUFFER_ROW + DSA_INDEXER_ROW)


# ---------------------------------------------------------------------------------------------
# What the start printed, gathered once
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SglangObserved:
    """The figures the rules share: the sizing formula's inputs as printed (MIN over the ranks)."""

    version: str | None  # the release whose formulas apply
    cell_bytes: int | None  # exact (catalog model)
    ranks: tuple[SglangRank, ...]
    pre_by_rank: Mapping[str, tuple[float, bool, str | None]]  # label -> (GiB, derived, evidence)
    post_by_rank: Mapping[str, tuple[float, str | None]]
    pre: float | None  # pre_model_load_memory (GiB, MIN over ranks)
    post: float | None  # free after the weights (GiB, MIN over ranks)
    pre_ev: str | None
    post_ev: str | None
    kv_obs: KvAllocObs | None  # the target KV pool
    kv_gib: float | None  # printed KV size the budget paid for (target, + draft when counted)
    kv_terms: int  # printed sizes summed (each ±0.005 GiB)
    kv_budget_gib: float | None  # kv_gib as the budget priced it (DSA fp8 before 0.5.18)
    dsa_ratio: float | None
    page: int
    mm: float  # multimodal reservation (GiB)
    tokens: int | None  # max_total_num_tokens
    cell_est: int | None  # exact cell, else estimated from the printed size
    ctx_len: int | None
    factors: tuple[float, ...]  # aiter
    fail_events: tuple[Event, ...]
    negative: tuple[Event, ...]  # profiled max_total_num_tokens <= 0
    failed: bool


def _pre_post(ranks: tuple[SglangRank, ...]) -> tuple[dict[str, tuple[float, bool, str | None]],
                                                     dict[str, tuple[float, str | None]]]:
    pre_by_rank: dict[str, tuple[float, bool, str | None]] = {}
    post_by_rank: dict[str, tuple[float, str | None]] = {}
    for r in ranks:
        target, _ = target_and_draft(r)
        base, derived = baseline_gib(target)
        if base is not None and target is not None:
            fig = target.begin_avail_gib or target.end_avail_gib
            pre_by_rank[r.label] = (base, derived, fig.evidence if fig else None)
        post = post_load_gib(r)
        if post is not None:
            last = next(ld for ld in reversed(r.loads) if ld.end_avail_gib is not None)
            post_by_rank[r.label] = (post, last.end_avail_gib.evidence if last.end_avail_gib else None)
    return pre_by_rank, post_by_rank


def _kv_printed(log: SglangLog, kv_rank: SglangRank | None) -> tuple[float | None, int]:
    """The printed KV size the budget paid for (GiB, summed over the pools it counts) and the number
    of printed terms: the draft's pool too when it is in the budget (lines with a dtype, ≥0.5.10)."""
    if kv_rank is None:
        return None, 0
    _, draft = target_and_draft(kv_rank)
    allocs = kv_rank.kv_allocs if (draft is None or "kv_alloc_dtype" in log.version_markers) else kv_rank.kv_allocs[:1]
    return round(sum(a.size_gib for a in allocs), 2), sum(2 if a.kv_size_gib is None else 1 for a in allocs)


def observe(log: SglangLog, flags: SglangFlags, cell_bytes: int | None, version: str | None) -> SglangObserved:
    ranks = tuple(sorted(log.ranks.values(), key=lambda r: (r.tags.get("PP", 0), r.tags.get("DP", 0),
                                                            r.tags.get("TP", 0), r.label)))
    pre_by_rank, post_by_rank = _pre_post(ranks)
    pre = min((v[0] for v in pre_by_rank.values()), default=None)
    pre = pre if pre is not None and pre > 0 else None  # 0 GB free before load: no fraction to solve for
    post = min((v[0] for v in post_by_rank.values()), default=None)
    kv_rank = next((r for r in ranks if r.kv_allocs), None)
    kv_obs = kv_rank.kv_allocs[0] if kv_rank else None
    page = flags.page_size or 1
    summary = log.summary
    tokens = int(kv_obs.tokens.value) if kv_obs else (int(summary["max_total_num_tokens"]) if summary else None)
    kv_gib, kv_terms = _kv_printed(log, kv_rank)
    cell_est = cell_bytes or (int(round(kv_obs.size_gib * GiB / (kv_obs.tokens.value + page)))
                              if kv_obs is not None and kv_obs.tokens.value > 0 else None)
    ctx_len = (as_int(summary.get("context_len")) if summary else None) or flags.context_length
    fail_events = tuple(e for k in ("no_kv_memory", "not_enough_memory") for e in log.events.get(k, []))
    negative = tuple(e for e in log.events.get("max_total_tokens_capped", []) if e.values["profiled"] <= 0)
    failed = bool(fail_events or negative or (tokens is not None and tokens <= 0))
    dsa = dsa_fp8_overallocation(log, flags, version)
    dsa_applies = bool(not failed and pre is not None and post is not None and kv_gib is not None and pre > 0 and dsa)
    return SglangObserved(
        version=version, cell_bytes=cell_bytes, ranks=ranks, pre_by_rank=pre_by_rank, post_by_rank=post_by_rank,
        pre=pre, post=post, pre_ev=next((v[2] for v in pre_by_rank.values() if v[0] == pre), None),
        post_ev=next((v[1] for v in post_by_rank.values() if v[0] == post), None), kv_obs=kv_obs,
        kv_gib=kv_gib, kv_terms=kv_terms,
        kv_budget_gib=round(kv_gib * dsa, 2) if dsa_applies and kv_gib is not None and dsa else kv_gib,
        dsa_ratio=dsa if dsa_applies else None,
        page=page, mm=kv_rank.mm_reserve_gib.value if kv_rank is not None and kv_rank.mm_reserve_gib else 0.0,
        tokens=tokens, cell_est=cell_est, ctx_len=ctx_len,
        factors=aiter_fraction_factors(flags, ctx_len, version),
        fail_events=fail_events, negative=negative, failed=failed)


# ---------------------------------------------------------------------------------------------
# The rules, in the order they run
# ---------------------------------------------------------------------------------------------

Rule = Callable[[Analysis, SglangLog, SglangFlags, SglangObserved], None]


def top_level_figures(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """The Timeline's figures: KV tokens and bytes, weights, the cell, the profile's inputs."""
    summary = log.summary
    an.kv_cache_tokens = obs.tokens
    if summary.get("max_running_requests") is not None:
        an.max_running_requests = int(summary["max_running_requests"])
    first_load = next((target_and_draft(r)[0] for r in obs.ranks if r.loads), None)
    if first_load is not None and first_load.usage_gib is not None:
        an.weights_bytes = gib_to_bytes(first_load.usage_gib.value)
    if obs.kv_obs is not None and obs.kv_gib is not None:
        an.kv_cache_bytes = gib_to_bytes(obs.kv_obs.size_gib)
    if obs.cell_bytes:
        an.kv_cell_bytes = obs.cell_bytes
    elif obs.cell_est is not None:
        an.extra["kv_cell_bytes_estimated"] = obs.cell_est
    if obs.pre is not None:
        an.extra["pre_model_load_memory_bytes"] = gib_to_bytes(obs.pre)
    if obs.post is not None:
        an.extra["post_load_free_bytes"] = gib_to_bytes(obs.post)
    if flags.mem_fraction_static is not None:
        an.extra["mem_fraction_static"] = flags.mem_fraction_static
        an.extra["mem_fraction_static_source"] = flags.mfs_source
    for k in ("context_len", "chunked_prefill_size", "max_prefill_tokens", "available_gpu_mem"):
        if k in summary:
            if k == "available_gpu_mem":
                an.extra["available_gpu_mem_bytes"] = gib_to_bytes(summary[k])
            else:
                an.extra[k] = int(summary[k])


def aiter_factor(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """attention_backend=aiter with a long context: SGLang multiplies the fraction by 0.85."""
    if obs.factors != (1.0,):
        an.extra["aiter_fraction_factor"] = AITER_FACTOR
        mfs = flags.mem_fraction_static
        if mfs is not None and obs.factors == (AITER_FACTOR,):
            an.extra["mem_fraction_static_effective_expected"] = round(mfs * AITER_FACTOR, 4)


def kv_sizing(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """The minimum viable fraction, and whether the start failed at KV sizing."""
    pre, post = obs.pre, obs.post
    if pre is not None and post is not None:
        an.extra["min_mem_fraction_static"] = round(fraction_for(pre, post, 0.0, obs.mm), 4)
        if obs.cell_est:
            an.extra["tokens_per_0.01_mem_fraction_static"] = sgl_memory.tokens_per_fraction_step(pre, obs.cell_est)
    if obs.failed:
        an.starts = False
        an.extra["failed_at"] = "kv_sizing"
        an.error = (obs.fail_events[0].evidence if obs.fail_events else
                    obs.negative[0].evidence if obs.negative else None)
        msg_min = next((e.values.get("min_mem_fraction_static") for e in obs.fail_events
                        if e.values.get("min_mem_fraction_static")), None)
        message = _failure_message(an, flags, obs)
        fix = _failure_fix(an, flags, obs, msg_min)
        evidence = [e.evidence for e in obs.fail_events + obs.negative][:4] + [e for e in (obs.pre_ev, obs.post_ev) if e]
        an.add(KV_SIZING_FAILED, ERROR, message, evidence, fix)
    elif obs.tokens is not None and obs.tokens > 0 and (obs.kv_obs is not None or log.summary):
        an.starts = True  # the KV pool was allocated (or its summary printed): sizing succeeded


def _failure_message(an: Analysis, flags: SglangFlags, obs: SglangObserved) -> str:
    pre, post, mm, mfs = obs.pre, obs.post, obs.mm, flags.mem_fraction_static
    parts = ["SGLang failed at KV sizing: the KV budget post_load_free − pre_model_load_memory × (1 − mem_fraction_static) is ≤ 0"]
    if obs.negative:
        parts.append(f"(profiled max_total_num_tokens = {obs.negative[0].values['profiled']:,})")
    used = mfs if mfs is not None else next((e.values.get("mem_fraction_static") for e in obs.fail_events
                                             if e.values.get("mem_fraction_static")), None)
    if mfs is None and used is not None:
        an.extra["mem_fraction_static"] = used
        an.extra["mem_fraction_static_source"] = "error message"
    if pre is not None and post is not None and used is not None:
        if obs.factors == (AITER_FACTOR,) and mfs is not None:
            parts.append(f"; attention_backend=aiter with context_len {obs.ctx_len} > 8192: SGLang ran with "
                         f"{mfs:g} × 0.85 = {mfs * AITER_FACTOR:.4g}")
            used = round(mfs * AITER_FACTOR, 6)
        slack = pre * (1 - used)
        if post - mm <= slack:
            parts.append(f"; post-load free {post:.2f} GiB ≤ slack {pre:.2f} × (1 − {used:g}) = {slack:.2f} GiB")
        else:
            parts.append(f"; yet at {used:g} the slack would be {pre:.2f} × (1 − {used:g}) = {slack:.2f} GiB, "
                         f"below the {post:.2f} GiB free after weights")
    if obs.negative and obs.cell_bytes and pre is not None and post is not None:
        profiled = obs.negative[0].values["profiled"]
        rest = profiled * obs.cell_bytes / GiB
        implied = fraction_for(pre, post, rest, mm)
        an.extra["effective_mem_fraction_static"] = round(implied, 4)
        parts.append(f"; {profiled:,} tokens × {obs.cell_bytes:,} B = {rest:.2f} GiB of budget, "
                     f"which implies an effective mem_fraction_static ≈ {implied:.3f}")
        if mfs is not None and abs(implied - mfs) > 0.01:
            parts.append(f"(not the {mfs:g} passed: SGLang changed it, e.g. ×0.85 for attention_backend=aiter "
                         "with context > 8192, or ×0.9 for multimodal models in 0.4.x)")
    return " ".join(parts).replace(" ;", ";")


def _failure_fix(an: Analysis, flags: SglangFlags, obs: SglangObserved, msg_min: float | None) -> str | None:
    pre, post = obs.pre, obs.post
    minimum = msg_min
    if minimum is None and pre is not None and post is not None:
        minimum = fraction_for(pre, post, 0.0, obs.mm)
    if minimum is None:
        return None
    if minimum >= 1.0:
        return "the weights leave no memory at any fraction: use more GPUs (larger --tp) or a smaller / quantized checkpoint"
    aiter = obs.factors == (AITER_FACTOR,)
    target = ceil_to((minimum + 0.02) / (AITER_FACTOR if aiter else 1.0), 0.01)
    how = '' if msg_min is not None else f' = 1 − {post:.2f}/{pre:.2f}'
    fix = (f"minimum viable mem_fraction_static is {minimum:.4f} (1 − post_load_free/pre_model_load_memory"
           f"{how}); pass --mem-fraction-static {min(target, 0.99):.2f} or higher")
    if obs.cell_est and pre is not None:
        fix += f"; each +0.01 buys ≈ {0.01 * pre:.2f} GiB ≈ {sgl_memory.tokens_per_fraction_step(pre, obs.cell_est):,} tokens"
    if aiter:
        fix += ("; the flag value is divided by 0.85 because SGLang multiplies it by 0.85 for "
                "attention_backend=aiter at this context length (or pass --attention-backend triton)")
        if target > 0.99:
            fix += f" — {target:.2f} is above 0.99, so switch the backend or add GPUs"
    elif flags.attention_backend == "aiter":
        fix += "; note: with attention_backend=aiter and context > 8192 SGLang multiplies the fraction by 0.85"
    an.suggest("mem_fraction_static", min(target, 0.99), "smallest fraction that leaves a positive KV budget (+0.02 margin)")
    return fix


def dsa_budget(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """A DSA model with fp8 KV before 0.5.18: the pool is larger than the budget priced it."""
    if obs.dsa_ratio is None or obs.kv_gib is None or obs.kv_budget_gib is None:
        return
    kv_gib, budget_gib = obs.kv_gib, obs.kv_budget_gib
    an.extra["dsa_fp8_budgeted_kv_gib"] = budget_gib
    an.add(EFFECTIVE_FRACTION, INFO,
           f"DSA model with fp8_e4m3 KV before SGLang 0.5.18: the budget prices a token at the "
           f"{DSA_BUDGET_ROW}-wide latent row + {DSA_INDEXER_ROW} B indexer, but the pool allocates the "
           f"{DSA_BUFFER_ROW}-byte fp8 row, so the printed {kv_gib:.2f} GiB is {1 / obs.dsa_ratio:.3f}× the "
           f"{budget_gib:.2f} GiB the formula budgeted; the extra {kv_gib - budget_gib:.2f} GiB comes out of the "
           "slack meant for activations and graphs (0.5.18 prices the 656-byte row)",
           [obs.kv_obs.tokens.evidence] if obs.kv_obs else [], None)


def effective_fraction(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """The fraction the printed KV size implies, against the flag (with the aiter factor)."""
    pre, post, kv = obs.pre, obs.post, obs.kv_budget_gib
    if obs.failed or pre is None or post is None or kv is None or pre <= 0 or obs.kv_obs is None:
        return
    eff = fraction_for(pre, post, kv, obs.mm)
    lo, hi = fraction_bounds(pre, post, kv, obs.kv_terms, obs.mm)
    an.extra["effective_mem_fraction_static"] = round(eff, 4)
    an.extra["effective_mem_fraction_static_range"] = [round(lo, 4), round(hi, 4)]
    evidence = [e for e in (obs.pre_ev, obs.post_ev, obs.kv_obs.tokens.evidence) if e]
    mfs = flags.mem_fraction_static
    if mfs is not None:
        _fraction_against_flag(an, log, flags, obs, mfs, (eff, lo, hi), evidence)
    else:
        an.add(EFFECTIVE_FRACTION, INFO,
               f"the printed KV size implies mem_fraction_static ≈ {eff:.3f} (range {lo:.3f}–{hi:.3f}); the flag "
               "is not in this log (SGLang's default is computed from GPU memory, TP and chunked prefill)",
               evidence, None)
    tp = flags.tp_size
    only_local = len(obs.pre_by_rank) < (tp or 1) or (tp is None and len(obs.pre_by_rank) == 1)
    if only_local and len(log.ranks) >= 1:
        an.extra["pre_model_load_memory_note"] = (
            "baseline is the local 'Load weight begin' figure of the ranks that printed it; SGLang uses the MIN across all ranks")


def _fraction_against_flag(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved, mfs: float,
                           implied: tuple[float, float, float], evidence: list[str]) -> None:
    eff, lo, hi = implied
    tol = 0.002  # slack for the baseline measured a little before "Load weight begin"
    agrees = any(lo - tol <= round(mfs * f, 6) <= hi + tol for f in obs.factors)
    if agrees and AITER_FACTOR in obs.factors and not lo - tol <= mfs <= hi + tol:
        an.add(EFFECTIVE_FRACTION, INFO,
               f"the printed KV size implies mem_fraction_static ≈ {eff:.3f}: {mfs:g} × 0.85, the factor SGLang "
               f"applies for attention_backend=aiter with context_len {obs.ctx_len or '> 8192'}", evidence, None)
    src = flags.mfs_source
    src_ev = log.server_args_evidence if src == "server_args" else log.launch_evidence
    an.check("effective mem_fraction_static", mfs, round(eff, 4), agrees,
             "1 − (post_load_free − kv_size)/pre_model_load_memory", evidence + [src_ev])
    if not agrees:
        _fraction_mismatch(an, log, flags, obs, mfs, implied, evidence + [src_ev])


def _fraction_mismatch(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved, mfs: float,
                       implied: tuple[float, float, float], evidence: list[str | None]) -> None:
    eff, lo, hi = implied
    pre, post, mm, src = obs.pre or 0.0, obs.post or 0.0, obs.mm, flags.mfs_source
    msg = (f"{obs.kv_budget_gib:.2f} GiB of KV at post-load {post:.2f} GiB and baseline {pre:.2f} GiB implies "
           f"mem_fraction_static ≈ {eff:.3f} (range {lo:.3f}–{hi:.3f}), not {mfs:g}")
    msg += f" (from {'the server_args dump' if src == 'server_args' else 'the launch command' if src == 'launch command' else src})"
    if eff > mfs:
        budget = post - mm - pre * (1 - mfs)
        msg += f"; under that flag the KV budget would be {budget:.2f} GiB"
        msg += " — every released SGLang would refuse to start" if budget <= 0 else ""
    if src == "server_args":
        fix: str | None = ("the ServerArgs dump shows the flag but the numbers follow another rule: a different sizing path "
                           "(DSA/NSA or hybrid pools, post-capture sizing), a patched SGLang, or figures from another start; "
                           "compare with `kvscope plan` for this model and version")
    else:
        fix = ("check the server_args=ServerArgs(… mem_fraction_static=…) line at the top of the log: the server "
               f"that printed these numbers ran with ≈{eff:.3f} (0.88 is SGLang's old default for large GPUs and "
               "its fallback when GPU memory is unknown)")
        if not log.server_args:
            fix = "the log has no ServerArgs dump; " + fix
    severity = ERROR if abs(eff - mfs) > 0.05 else WARNING
    if flags.device not in ("cuda", "auto", "none", "rocm", "hip"):
        severity = INFO
        msg += (f"; device={flags.device}: the rule above is the CUDA/ROCm path, and this backend's memory "
                "accounting was not traced (see docs/doctor.md, open mismatches)")
        fix = None
    an.add(EFFECTIVE_FRACTION_MISMATCH, severity, msg, evidence, fix)


def step_checks(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """Each step's printed mem usage against its begin/end free memory; the summary against the pool."""
    for r in obs.ranks:
        steps = [(f"{r.label} weights mem usage", "Load weight begin avail − end avail", ld) for ld in r.loads]
        steps += [(f"{r.label} {g.role} CUDA graph mem usage", "capture begin avail − end avail", g) for g in r.graphs]
        for name, how, step in steps:
            if step.begin_avail_gib and step.end_avail_gib and step.usage_gib:
                rec = round(step.begin_avail_gib.value - step.end_avail_gib.value, 2)
                an.check(name, step.usage_gib.value, rec, abs(rec - step.usage_gib.value) <= 0.011, how,
                         [step.begin_avail_gib.evidence, step.end_avail_gib.evidence])
    kv_obs, summary = obs.kv_obs, log.summary
    if kv_obs is not None and summary.get("max_total_num_tokens") is not None:
        printed = int(summary["max_total_num_tokens"])
        an.check("max_total_num_tokens", printed, int(kv_obs.tokens.value), printed == int(kv_obs.tokens.value),
                 "#tokens of the KV pool", [log.summary_evidence, kv_obs.tokens.evidence])


def max_running_check(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """The summary's max_running_requests from its own max_total_num_tokens and context_len through the
    engine module (``engines/sglang/pools.py::max_num_reqs``: the req_to_token pool estimate and the
    T // 2 cap). A smaller printed value is a further cap the log may not show (mamba cache slots,
    --max-running-requests, DP attention), not an arithmetic error."""
    summary, tokens, version = log.summary, obs.tokens, obs.version
    if not version or not summary or not tokens or tokens <= 0:
        return
    printed, ctx = as_int(summary.get("max_running_requests")), as_int(summary.get("context_len"))
    if printed is None or not ctx:
        return
    user = flags.max_running_requests
    try:
        version, running = _max_running(log, flags, version, tokens, ctx, printed)
    except Exception:  # noqa: BLE001 - a version the engine module does not know: no check
        return
    how = (f"engines/sglang/memory.py max_num_reqs at {version}: req_to_token pool from "
           f"max_total_num_tokens / context_len × 512 (clamped 2048–4096), then min(T // 2 or the flag, pool)")
    if running != printed and printed < running:
        how += "; a smaller printed value is a further cap (mamba cache slots" + (
            ", printed" if any(r.mamba for r in log.ranks.values()) else ", not in this log"
        ) + ", --max-running-requests or DP attention)"
    an.check("max_running_requests", printed, running, running == printed, how, [log.summary_evidence])
    if printed < running and user is None and not log.events.get("max_running_reduced"):
        an.add(MAX_RUNNING_REDUCED, INFO,
               f"max_running_requests is {printed}, below the {running} that the req_to_token pool and "
               f"max_total_num_tokens // 2 allow: another limit capped it — with a hybrid (mamba / linear-attention) "
               "model the mamba cache slots (--max-mamba-cache-size), else DP attention or a patched default",
               [log.summary_evidence], None)


def _max_running(log: SglangLog, flags: SglangFlags, version: str, tokens: int, ctx: int,
                 printed: int) -> tuple[str, int]:
    """(release, max_running_requests) by ``pools.max_num_reqs``; with no printed version, the first
    release of the log's format range that computes the printed value (e.g. the +1 pool row of <= 0.4.6)."""
    attn_dp = (flags.dp_size or 1) if flags.enable_dp_attention else 1

    def running_at(ver: str) -> int:
        return sgl_pools.max_num_reqs(release(ver), token_capacity=tokens, profiled_tokens=tokens, context_len=ctx,
                                       max_running_requests=flags.max_running_requests, attn_dp_size=attn_dp)[1]

    running = running_at(version)
    if running != printed and not log.version_printed:
        for other in releases_in_range(log):
            if running_at(other) == printed:
                return other, printed
    return version, running


def kv_size_checks(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """With the exact cell: the printed KV size from #tokens, and #tokens from the engine's profile."""
    kv_obs, cell = obs.kv_obs, obs.cell_bytes
    if kv_obs is None or not cell:
        return
    if kv_obs.tokens.value > 0:
        size = (kv_obs.tokens.value + obs.page) * cell / GiB
        printed = kv_obs.size_gib
        rec = round(round(size / 2, 2) * 2, 2) if kv_obs.kv_size_gib is None else round(size, 2)
        an.check("KV size", printed, rec, abs(rec - printed) <= 0.011,
                 f"(#tokens + page_size) × {cell} B/token", [kv_obs.tokens.evidence])
    mfs, pre, post = flags.mem_fraction_static, obs.pre, obs.post
    if mfs is not None and pre is not None and post is not None and not obs.failed:
        lo_t, hi_t = token_bounds(pre, post, mfs, obs.mm, cell, obs.page)
        t = int(kv_obs.tokens.value)
        an.check("max_total_num_tokens from the profile", t, [lo_t, hi_t], lo_t <= t <= hi_t,
                 "int((post − pre·(1 − mfs))·2^30) // cell // page · page, figures ±0.005 GiB; the engine's "
                 f"baseline is taken at the end of init, up to {SETUP_BEFORE_LOAD_GIB} GiB above 'Load weight begin'",
                 [obs.pre_ev, obs.post_ev, kv_obs.tokens.evidence])


def arithmetic_mismatches(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    an.mismatches(exempt=("effective mem_fraction_static", "max_running_requests"))


def capacity(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """A pool smaller than the context; the engine's own caps on tokens and requests."""
    tokens, cell, pre = obs.tokens, obs.cell_est, obs.pre
    ctx = as_int(log.summary.get("context_len")) if log.summary else None
    if ctx is None:
        ctx = flags.context_length
    if not obs.failed and tokens and ctx and tokens < ctx:
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
        an.add(KV_POOL_BELOW_CONTEXT, WARNING, msg,
               [log.summary_evidence, obs.kv_obs.tokens.evidence if obs.kv_obs else None], fix)
    for e in log.events.get("max_total_tokens_capped", []):
        if e.values["profiled"] > 0:
            an.add(MAX_TOTAL_TOKENS_CAPPED, INFO,
                   f"--max-total-tokens {e.values['user']:,} is larger than the profiled {e.values['profiled']:,}; "
                   "SGLang used the profiled value", e.evidence, None)
    for e in log.events.get("max_running_reduced", []):
        an.add(MAX_RUNNING_REDUCED, INFO,
               f"max_running_requests was reduced from {e.values['requested']} to {e.values['now']} by the KV capacity",
               e.evidence, None)


def rank_balance(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """Ranks that started with different free memory: every rank is sized by the MIN."""
    events = log.events.get("unbalanced", [])
    if events:
        an.add(UNBALANCED_RANKS, WARNING,
               "SGLang reports unbalanced GPU memory across ranks: some GPU is partly occupied (another process, or "
               "a leftover server); the KV budget follows the emptiest-rank MIN",
               [e.evidence for e in events[:3]],
               "find the other process with nvidia-smi and stop it, or move to free GPUs (CUDA_VISIBLE_DEVICES)")
        return
    if len(obs.pre_by_rank) <= 1:
        return
    values = {k: v[0] for k, v in obs.pre_by_rank.items()}
    lo_k, hi_k = min(values, key=values.__getitem__), max(values, key=values.__getitem__)
    lo, hi = values[lo_k], values[hi_k]
    evidence = [obs.pre_by_rank[lo_k][2], obs.pre_by_rank[hi_k][2]]
    if lo < 0.9 * hi:
        an.add(UNBALANCED_RANKS, WARNING,
               f"free memory before weights differs across ranks: {lo_k} {lo:.2f} GiB vs {hi_k} {hi:.2f} GiB "
               "(below SGLang's 0.9 balance threshold); every rank is sized by the MIN",
               evidence, "find the other process on that GPU (nvidia-smi) and stop it")
    elif hi - lo > 1.0:
        an.add(UNBALANCED_RANKS, INFO,
               f"free memory before weights differs by {hi - lo:.2f} GiB across ranks ({lo_k} {lo:.2f}, {hi_k} {hi:.2f}); "
               "the KV budget uses the MIN", evidence, None)


def custom_allreduce(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    # the auto-disable warning is printed inside "Init torch distributed": only a log that holds the end of
    # that step (not an excerpt that starts at the weights) can show its absence
    reached_init = any(r.init_mem_usage_gib for r in obs.ranks)
    custom_allreduce_forced(an, log, flags, flags.tp_size, reached_init, "sglang")


def graphs_and_draft(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """CUDA graphs or a speculative draft eating the slack (first rank)."""
    for r in obs.ranks[:1]:
        graphs = [g for g in r.graphs if g.end_avail_gib is not None]
        _, draft = target_and_draft(r)
        if graphs and obs.pre:
            end = graphs[-1].end_avail_gib.value if graphs[-1].end_avail_gib else 0.0
            used = sum(g.usage_gib.value for g in graphs if g.usage_gib)
            if end < 0.05 * obs.pre:
                an.add(CUDA_GRAPH_SLACK, WARNING,
                       f"after CUDA graph capture only {end:.2f} GiB is free on {r.label} (graphs used {used:.2f} GiB): "
                       "prefill activations and sampling buffers must fit there at runtime",
                       [graphs[-1].end_avail_gib.evidence if graphs[-1].end_avail_gib else None],
                       "if requests hit CUDA OOM, lower --mem-fraction-static by 0.02–0.05 or --cuda-graph-max-bs")
        if draft is not None and draft.usage_gib is not None:
            classic = "kv_alloc_no_dtype" in log.version_markers or "capture_legacy" in log.version_markers
            an.add(DRAFT_MODEL_MEMORY, WARNING if classic else INFO,
                   f"a second model (speculative draft) loaded {draft.usage_gib.value:.2f} GiB on {r.label}"
                   + ("; before SGLang 0.5.14 its weights, KV and graphs come out of the (1 − mem_fraction_static) slack"
                      if classic else "; SGLang ≥0.5.14 counts it in the KV budget"),
                   [draft.end_avail_gib.evidence if draft.end_avail_gib else None],
                   "leave room for it: lower --mem-fraction-static by ≈ draft size / baseline" if classic else None)
    custom_allreduce_disabled(an, log, "NCCL is used; forcing custom AR on PCIe contends for the bus")


def runtime(an: Analysis, log: SglangLog, flags: SglangFlags, obs: SglangObserved) -> None:
    """Out of memory (at load or at runtime: the fixes go opposite ways), a full pool, a truncated log."""
    failed_early = not obs.failed and failed_start(an, "sglang", log.events, log.event_counts,
                                                   phase_of(log))
    ooms = [e for e in log.events.get("oom", []) if e.values.get("phase") == "serving"]
    if ooms and not failed_early and not obs.failed:
        eff = an.extra.get("effective_mem_fraction_static") or flags.mem_fraction_static
        target = f" (e.g. {max(0.05, (eff or 0.9) - 0.05):.2f})" if eff else ""
        an.add(RUNTIME_OOM, ERROR,
               f"CUDA out of memory after the KV pool was allocated ({log.event_counts.get('oom', 1)} line(s)): "
               "the slack left for activations / CUDA graphs is too small",
               [e.evidence for e in ooms[:3]],
               f"lower --mem-fraction-static{target} — the opposite of the startup-failure fix — or lower "
               "--chunked-prefill-size / --cuda-graph-max-bs")
    retracts = log.event_counts.get("kv_pool_full", 0)
    if retracts:
        an.add(KV_POOL_FULL, WARNING, f"the KV pool filled up at runtime and requests were retracted ({retracts} time(s))",
               [e.evidence for e in log.events["kv_pool_full"][:3]],
               "raise --mem-fraction-static (if the slack allows), add GPUs, or lower --max-running-requests")
    if obs.kv_obs is None and not obs.failed and not failed_early and log.ranks and not log.summary:
        an.add(TRUNCATED, INFO, "the log ends before the KV cache was allocated (truncated, or still starting)", (), None)


RULES: tuple[Rule, ...] = (
    top_level_figures, aiter_factor, kv_sizing, dsa_budget, effective_fraction,
    step_checks, max_running_check, kv_size_checks, arithmetic_mismatches,
    capacity, rank_balance, custom_allreduce, graphs_and_draft, runtime,
)


def analyze_sglang(log: SglangLog, flags: SglangFlags, cell_bytes: int | None = None,
                   version: str | None = None) -> Analysis:
    """Findings and checks for one SGLang start. ``cell_bytes``: exact KV bytes per token when the
    model is known (from the model catalog), else the doctor estimates it from the printed sizes.
    ``version``: the release whose formulas apply (printed, or a representative of the format range)."""
    an = Analysis()
    obs = observe(log, flags, cell_bytes, version)
    for rule in RULES:
        rule(an, log, flags, obs)
    return an
