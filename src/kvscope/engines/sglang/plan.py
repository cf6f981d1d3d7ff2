"""SGLang startup simulation: per-rank timeline, the sizing decision, the verdict and the fix.

``plan_sglang`` is the stage list: settle → weights → cell → profile → pools → graphs → verdict →
ranks. Each stage returns a frozen record and runs the engine functions the conformance suite
compares with SGLang (``memory.profile``, ``pools.request_pools``, ``pools.hybrid_swa_pools``,
``kv_cache.cell_size``, ``mamba.handle_max_mamba_cache``); nothing is re-derived inline.

Sequence (SGLang v0.5.23, ``Scheduler.init_model_worker``; classic <=0.5.13 in brackets):
parallel init → baseline ``pre_model_load_memory`` (MIN over ranks) → target weights → draft
weights (>=0.5.14) → profile → KV pools (+ draft pool) → req_to_token pool → CUDA graphs
[→ draft worker: weights, KV, graphs, paid from the slack].
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

from packaging.version import Version

from ...errors import FlagError
from ...hardware.gpus import GPU
from ...hardware.overhead import communicators, cuda_context, custom_all_reduce_enabled
from ...model.spec import ModelSpec
from ...model.weights import pp_layer_range, weights_per_rank
from ...timeline import (PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_DRAFT, PHASE_LOAD_WEIGHTS,
                         PHASE_PROFILE, PHASE_REQ_POOL, Fix, Phase, RankTimeline, Timeline)
from ...units import GiB, MiB
from ...validate import SGLANG_FLAG_RULES, check_flags
from .args import SGLangArgs
from .decision import SGLangDecision, SGLangPlanExtra
from .kv_cache import CellSize, cell_size
from .mamba import MambaCarve, mamba_pp_stage_bytes, mamba_request_ratio, mamba_state_bytes_per_req
from .memory import (Profile, available_gib, min_viable_fraction, mm_reservation_gib, profile,
                     tokens_per_fraction_step)
from .pools import (PoolFlags, SwaLayout, hybrid_swa_pools, kv_buffer_bytes, kv_buffers_reserved_bytes, request_pools,
                    swa_split)
from .release import MambaCarveEra, SGLangRelease, SwaSplit, check_modelled, release
from .settle import Settled, derived_context_len, settle

EAGLE_LIKE = ("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE")
# ``is_hybrid_swa_model`` (configs/model_config.py @ v0.5.9 l.1320, @ v0.5.23 l.2651): only these
# architectures get the split SWA pool; Gemma 2/3 sliding layers use the ordinary (full) pool.
HYBRID_SWA_ARCHS = frozenset({"Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM",
                              "Step3p5ForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})


@dataclass(frozen=True)
class Measured:
    """Observed free memory per rank (bytes), replacing the predicted phases."""

    pre_load_free_bytes: tuple[int, ...] | None = None
    post_load_free_bytes: tuple[int, ...] | None = None


def _per_rank(values: Sequence[int] | None, world: int, name: str, gpu: GPU | None = None,
              above: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
    """Measured free memory per rank: one value for all ranks or one per rank, each > 0, at most the
    GPU's memory and (after the weights) at most the free memory before them."""
    if values is None:
        return None
    vals = tuple(int(x) for x in values)
    if len(vals) == 1:
        vals = vals * world
    if len(vals) != world:
        raise FlagError(f"{len(vals)} values for {world} ranks", field=name,
                        fix=f"give one value (all ranks) or exactly {world} (one per rank)")
    if any(x <= 0 for x in vals):
        raise FlagError(f"free memory must be > 0 GiB, got {min(vals) / GiB:g}", field=name,
                        fix="pass the 'avail mem=X GB' figure of the log (X > 0)")
    if gpu is not None and max(vals) > gpu.memory_bytes:
        raise FlagError(f"{max(vals) / GiB:.2f} GiB free is more than the {gpu.key}'s {gpu.memory_bytes / GiB:.2f} GiB",
                        field=name, fix="check the value, or give the GPU's size with --gpu-memory-mib")
    if above is not None and any(v > a for v, a in zip(vals, above)):
        r = next(i for i, (v, a) in enumerate(zip(vals, above)) if v > a)
        raise FlagError(f"rank {r}: {vals[r] / GiB:.2f} GiB free after the weights is more than the "
                        f"{above[r] / GiB:.2f} GiB free before them", field=name,
                        fix="loading weights only lowers free memory: check --pre-load-free-gib / --post-load-free-gib")
    return vals


def validate(spec: ModelSpec, a: SGLangArgs) -> None:
    """Refuse what SGLang refuses (model_config.py / server_args.py checks).

    The spec-independent checks stay here rather than in ``SGLangArgs.__post_init__``: ``kvscope.plan``
    builds the args before it loads the draft spec and ``plan_sglang`` parses ``--engine-version``, and
    those errors win today (``--tp -1 --engine-version bogus`` reports the version); ``--page-size``
    is checked after the spec-dependent ones."""
    check_flags("sglang", {f: getattr(a, f) for f in SGLANG_FLAG_RULES}, types_only=True)
    for name, val in (("--tp", a.tp_size), ("--pp", a.pp_size), ("--dp", a.dp_size)):
        if val < 1:
            raise FlagError(f"must be >= 1, got {val}", field=name, fix="pass a positive integer")
    if a.mem_fraction_static is not None and not 0 < a.mem_fraction_static < 1:
        raise FlagError(f"must be in (0, 1), got {a.mem_fraction_static}", field="--mem-fraction-static",
                        fix="e.g. 0.85")
    if a.enable_dp_attention and a.tp_size % a.dp_size:
        raise FlagError(f"tp_size {a.tp_size} is not divisible by dp_size {a.dp_size}", field="--dp",
                        fix="with --enable-dp-attention, --tp must be a multiple of --dp")
    attn_tp = a.attn_tp_size
    if spec.num_attention_heads % attn_tp:
        raise FlagError(f"num_attention_heads ({spec.num_attention_heads}) must be divisible by "
                        f"attention tp size ({attn_tp})", field="--tp",
                        fix=f"use a --tp that divides {spec.num_attention_heads}")
    kv = spec.num_key_value_heads
    if not spec.is_mla and (kv % attn_tp if kv >= attn_tp else attn_tp % kv):
        raise FlagError(f"num_key_value_heads ({kv}) and attention tp size ({attn_tp}) do not divide each other",
                        field="--tp", fix="use a --tp that divides or is a multiple of the KV heads")
    if a.pp_size > spec.num_hidden_layers:
        raise FlagError(f"pp_size {a.pp_size} exceeds num_hidden_layers {spec.num_hidden_layers}", field="--pp",
                        fix="use fewer pipeline stages")
    derived = derived_context_len(spec)
    if a.context_length is not None and a.context_length < 1:
        raise FlagError(f"must be >= 1, got {a.context_length}", field="--context-length",
                        fix=f"a token count up to the derived context_length ({derived})")
    if a.context_length is not None and a.context_length > derived:
        raise FlagError(f"User-specified context_length ({a.context_length}) is greater than the derived "
                        f"context_length ({derived})", field="--context-length",
                        fix="lower it, or set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in SGLang")
    if a.page_size is not None and a.page_size < 1:
        raise FlagError("must be >= 1", field="--page-size", fix="e.g. 1, 16 or 64")
    check_flags("sglang", {f: getattr(a, f) for f in SGLANG_FLAG_RULES})  # the rest: validate.SGLANG_FLAG_RULES


def _draft_layers(spec: ModelSpec, a: SGLangArgs, draft: ModelSpec | None) -> int:
    algo = (a.speculative_algorithm or "").upper()
    if algo not in EAGLE_LIKE:
        return 0
    if draft is not None:
        return max(draft.num_hidden_layers, draft.num_kv_layers)
    return spec.num_nextn_predict_layers or 1


def _draft_weights_bytes(spec: ModelSpec, a: SGLangArgs, draft: ModelSpec | None) -> int:
    algo = (a.speculative_algorithm or "").upper()
    if algo not in EAGLE_LIKE:
        return 0
    if draft is not None:
        return weights_per_rank(draft, tp=a.tp_size).per_rank_bytes
    # MTP / NEXTN: the checkpoint's own MTP layer(s)
    with_mtp = weights_per_rank(spec, tp=a.tp_size, include_mtp=True, include_vision=False).per_rank_bytes
    without = weights_per_rank(spec, tp=a.tp_size, include_mtp=False, include_vision=False).per_rank_bytes
    return with_mtp - without


# --------------------------------------------------------------------------------------------
# Stage records


@dataclass(frozen=True)
class Loaded:
    """Free memory per rank before and after the weights (baseline, target weights, >=0.5.14 draft)."""

    total_bytes: int  # the device's memory as CUDA reports it (free before init)
    ctx_bytes: int  # CUDA context (estimated)
    comm_bytes: int  # communicators (estimated)
    custom_all_reduce: bool
    pre: tuple[int, ...]  # free before the weights, per rank
    post: tuple[int, ...]  # free after the weights (and a budgeted draft), per rank
    post_measured: bool
    stage_weights: tuple[int, ...]  # target weights per PP stage
    weights_exact: bool  # from safetensors headers
    draft_weights: int  # draft weights per rank (0: none)
    estimated: tuple[str, ...]
    load_oom: str | None = None  # torch's out-of-memory error when the weights exceed the free memory

    @property
    def starts_loading(self) -> bool:
        return self.load_oom is None


@dataclass(frozen=True)
class Cells:
    """The KV cell of each PP stage, and what the profile needs besides it."""

    stages: tuple[CellSize, ...]
    draft_layers: int  # EAGLE/MTP draft KV layers (0: none)
    swa_pool: bool  # the split hybrid sliding-window pool (is_hybrid_swa_model)
    mamba_per_req: int  # state bytes per request the carve charges (0: no state)
    warnings: tuple[str, ...]
    estimated: tuple[str, ...]

    @property
    def last(self) -> CellSize:
        return self.stages[-1]

    @property
    def worst(self) -> CellSize:
        return max(self.stages, key=lambda c: c.cell_bytes)


@dataclass(frozen=True)
class Profiled:
    """``memory.profile`` on every PP stage; the first stage's profile and carve are the decision's."""

    pre_gib: float
    avail_gib: float
    mm_gib: float
    first: Profile
    carve: MambaCarve | None
    stage_tokens: tuple[int, ...]  # profiled tokens per stage (hybrid SWA >=0.5.14: the full pool)


@dataclass(frozen=True)
class Pools:
    """The token and request pools (``pools.request_pools``) and the buffers as allocated."""

    error: str | None
    tokens: int  # max_total_num_tokens (0 when the start fails)
    swa_tokens: int | None
    profiled: int  # min over stages, before page rounding and caps
    req_pool_size: int
    running: int
    req_to_token_bytes: int
    kv_alloc: int  # the target's KV buffers (+1 page)
    kv_reserved: int  # the same after torch's allocator rounding
    draft_kv: int
    mamba_bytes: int
    warnings: tuple[str, ...]
    state_cache_too_small: bool = False  # the hybrid state pool admits no request (>=0.5.13 RuntimeError)

    @property
    def starts(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Graphs:
    """What the slack must hold after the pools (estimated with SGLang's own reserve heuristic)."""

    graph_bytes: int
    activation_bytes: int
    classic_draft_bytes: int  # <0.5.14: draft weights + KV paid from the slack
    headroom_bytes: int
    free_before_bytes: int = 0  # free memory (smallest rank) when the capture starts


@dataclass(frozen=True)
class Verdict:
    """The minimum viable fraction, tokens per step, the fixes and the notes."""

    min_fraction: float  # the effective fraction that leaves one page of KV
    tokens_per_step: int  # tokens per +0.01 of the fraction
    fixes: tuple[Fix, ...]
    warnings: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# The plan


def plan_sglang(spec: ModelSpec, gpu: GPU, a: SGLangArgs, version: str | None = None,
                measured: Measured | None = None, draft: ModelSpec | None = None,
                exact_weights_per_rank: int | None = None, check_fixes: bool = True) -> Timeline:
    """Simulate one SGLang start. ``exact_weights_per_rank``: from safetensors headers (pp=1).
    ``check_fixes``: plan again with each fix applied and keep only values that start (advice.py)."""
    check_modelled(version)
    rel = release(version)
    validate(spec, a)
    measured = measured or Measured()
    s = settle(spec, gpu, a, rel)
    loaded = weights(spec, gpu, s, rel, measured, draft, exact_weights_per_rank)
    cells = cell(spec, gpu, s, rel, draft)
    prof = profile_stages(spec, s, rel, loaded, cells)
    pools = pool_stage(spec, s, rel, cells, prof)
    graphs = graph_stage(spec, s, rel, prof, pools, loaded)
    # the weights' out-of-memory comes first: the engine dies in load_model, before the profile (whose
    # figures the decision record still shows)
    error = (loaded.load_oom or pools.error or _memory_pool_error(gpu, s, graphs, pools)
             or _graph_capture_error(gpu, rel, graphs, pools))
    verdict = verdict_stage(spec, gpu, s, rel, prof, cells, pools, graphs, loaded)
    ranks = rank_stage(s, rel, loaded, cells, prof, pools, graphs)
    sized = pools.starts and loaded.starts_loading
    t = Timeline(
        source="plan", engine="sglang", engine_version=str(rel.version), model=spec.name, gpu=gpu.key,
        starts=error is None, error=error, kv_cache_tokens=pools.tokens if sized else 0,
        max_running_requests=pools.running if sized else None, kv_cell_bytes=cells.worst.cell_bytes,
        kv_cache_bytes=pools.kv_alloc + pools.draft_kv, weights_bytes=max(loaded.stage_weights), ranks=ranks,
        fix=verdict.fixes, extra=plan_extra(s, loaded, prof, pools, verdict, measured),
        warnings=(*spec.assumed, *cells.warnings, *pools.warnings, *verdict.warnings),
        estimated=(*loaded.estimated, *cells.estimated))
    if not check_fixes or not t.fix:
        return t
    from .advice import recheck  # every fix re-planned (issue 18)

    current = s.mem_fraction_static / s.fraction_factor if t.starts else None
    return dataclasses.replace(t, fix=recheck(t, a, s.context_len, current, lambda b: plan_sglang(
        spec, gpu, b, version, measured, draft, exact_weights_per_rank, check_fixes=False),
        measured=measured != Measured()))


def weights(spec: ModelSpec, gpu: GPU, s: Settled, rel: SGLangRelease, measured: Measured,
            draft: ModelSpec | None, exact_weights_per_rank: int | None) -> Loaded:
    """Parallel init → baseline ``pre_model_load_memory`` → target weights → draft weights (>=0.5.14)."""
    a = s.args
    world = a.tp_size * a.pp_size
    estimated: list[str] = []
    car = custom_all_reduce_enabled(gpu, a.tp_size)
    ctx = cuda_context(gpu)
    comm = communicators(gpu, a.tp_size, car)
    pre = _per_rank(measured.pre_load_free_bytes, world, "--pre-load-free-gib", gpu)
    if pre is None:
        pre = (gpu.cuda_total_bytes - ctx.estimate_bytes - comm.estimate_bytes,) * world
        estimated.append("pre_model_load_memory")
    # Llama 4 loads no vision tower without --enable-multimodal from 0.4.10 (models/mllama4.py)
    vision = not (rel.llama4_vision_opt_in and "Llama4ForConditionalGeneration" in spec.architectures)
    w = weights_per_rank(spec, tp=a.tp_size, pp=a.pp_size, attn_tp=a.attn_tp_size, engine="sglang",
                         device="rocm" if gpu.vendor == "amd" else "cuda", include_vision=vision)
    exact = exact_weights_per_rank is not None and a.pp_size == 1
    stage_weights = (exact_weights_per_rank,) if exact else w.per_stage_bytes
    draft_w = _draft_weights_bytes(spec, a, draft)
    budgeted = draft_w if rel.draft_in_budget else 0
    post = _per_rank(measured.post_load_free_bytes, world, "--post-load-free-gib", gpu,
                     above=pre if measured.pre_load_free_bytes is not None else None)
    post_measured = post is not None
    oom = None
    if post is None:
        post = tuple(pre[r] - stage_weights[r // a.tp_size] - budgeted for r in range(world))
        if not exact:  # exact header bytes are not an estimate (pre_model_load_memory may be)
            estimated.append("weights")
        short = min(range(world), key=lambda r: post[r])
        if post[short] < 0:
            oom = _load_oom_error(gpu, short, pre[short], stage_weights[short // a.tp_size] + budgeted)
    return Loaded(gpu.cuda_total_bytes, ctx.estimate_bytes, comm.estimate_bytes, car, pre, post, post_measured,
                  tuple(stage_weights),
                  exact, draft_w, tuple(estimated), oom)


def _load_oom_error(gpu: GPU, rank: int, free: int, need: int) -> str:
    """What the engine dies with when the weights do not fit: torch's caching allocator raises
    ``torch.OutOfMemoryError`` inside ``ModelRunner.load_model`` (the tensor it was allocating is not
    modelled, so the figures are the rank's totals)."""
    device = "HIP" if gpu.vendor == "amd" else "CUDA"
    return (f"torch.OutOfMemoryError: {device} out of memory while loading weights on rank {rank}: its weights "
            f"need {need / GiB:.2f} GiB, {free / GiB:.2f} GiB is free before loading")


def cell(spec: ModelSpec, gpu: GPU, s: Settled, rel: SGLangRelease, draft: ModelSpec | None) -> Cells:
    """``kv_cache.cell_size`` per PP stage (the draft's layers on the last), or DeepSeek-V4's view."""
    a = s.args
    draft_layers = _draft_layers(spec, a, draft)
    warnings, estimated = [], []
    if draft_layers and draft is None and not spec.num_nextn_predict_layers:
        estimated.append("draft_kv")
        warnings.append(f"{a.speculative_algorithm}: no draft config (--speculative-draft-model-path) and no MTP "
                        "layer in the target: the draft KV is estimated as one layer of the target's width")
    stages = []
    for stage in range(a.pp_size):
        d = draft_layers if stage == a.pp_size - 1 else 0
        if spec.dsv4 is not None:  # DSV4PoolConfigurator's coefficient as a cell (deepseek_v4.py)
            from . import deepseek_v4 as dsv4  # imported only for DeepSeek-V4 (import cost)

            stages.append(dsv4.cell_size(spec, speculative=bool(d)))
            continue
        lo, hi = pp_layer_range(spec.num_hidden_layers, stage, a.pp_size)
        stages.append(cell_size(spec, rel, attn_tp=a.attn_tp_size, kv_bytes=s.kv_bytes,
                                kv_flag=a.kv_cache_dtype.lower(), layer_ids=range(lo, hi), draft_layers=d,
                                draft_in_budget=rel.draft_in_budget,
                                attention_backends=(s.backend.name, s.backend.name),
                                sm100=gpu.sm in ("sm100", "sm103")))
    mamba_per_req = mamba_pp_stage_bytes(  # the largest PP stage's share (rel.mamba_pp_stage_share)
        rel, mamba_state_bytes_per_req(spec, a.attn_tp_size),
        [i for i, t in enumerate(spec.layer_types) if t in ("linear_attention", "mamba")],
        spec.num_hidden_layers, a.pp_size) if spec.is_mambaish else 0
    swa_pool = spec.is_hybrid_swa and bool(HYBRID_SWA_ARCHS.intersection(spec.architectures))
    return Cells(tuple(stages), draft_layers, swa_pool, mamba_per_req, tuple(warnings), tuple(estimated))


def profile_stages(spec: ModelSpec, s: Settled, rel: SGLangRelease, loaded: Loaded, cells: Cells) -> Profiled:
    """``memory.profile`` per PP stage (MIN over the world, float32 all-reduce):
    rest = available − pre × (1 − mfs) [− mm] [− mamba state]; tokens = int(rest × 2^30) // cell."""
    a = s.args
    distributed = len(loaded.pre) > 1
    pre_gib = available_gib(loaded.pre, distributed)
    avail_gib = available_gib(loaded.post, distributed)
    mm_gib = mm_reservation_gib(rel, spec.is_multimodal and not a.language_only)
    results = []
    for c in cells.stages:
        profile_cell = (c.full_layer_bytes * c.num_full_layers + c.swa_layer_bytes * c.num_swa_layers
                        if cells.swa_pool else c.cell_bytes)
        p, carve = profile(rel, pre_model_load_gib=pre_gib, available_gpu_gib=avail_gib,
                           mem_fraction_static=s.mem_fraction_static, cell_bytes=profile_cell, mm_reservation=mm_gib,
                           mamba_per_req_bytes=cells.mamba_per_req, disable_radix_cache=a.disable_radix_cache,
                           max_running_requests=a.max_running_requests, attn_dp_size=a.attn_dp_size,
                           mamba_is_gdn=bool(spec.mamba and spec.mamba.kind == "gdn"),
                           speculative_num_draft_tokens=a.speculative_num_draft_tokens if a.speculative_algorithm
                           else None)
        tokens = p.profiled_tokens
        if p.error is None and cells.swa_pool and rel.swa_split_in_profile:
            tokens, _swa = swa_split(rel, p.rest_memory_bytes, c, s.page_size, 0.8)
        results.append((p, carve, tokens))
    first, carve, _ = results[0]
    return Profiled(pre_gib, avail_gib, mm_gib, first, carve, tuple(t for _, _, t in results))


def pool_stage(spec: ModelSpec, s: Settled, rel: SGLangRelease, cells: Cells, prof: Profiled) -> Pools:
    """``pools.request_pools`` on the smallest stage's tokens (hybrid SWA / DeepSeek-V4: on the pools
    their configurators size), then the KV buffers as allocated."""
    a = s.args
    profiled = min(prof.stage_tokens)
    if prof.first.error is not None:
        return Pools(prof.first.error, 0, None, profiled, 0, 0, 0, 0, 0, 0, 0, ())
    sized, swa_tokens, error, warnings = _configured_tokens(spec, s, rel, cells, prof)
    rp = request_pools(rel, profiled, s.context_len, pool_flags(s),
                       max_mamba_cache_size=prof.carve.max_mamba_cache_size if prof.carve is not None else None,
                       sized_tokens=sized)
    if rp.capped_by_user:
        warnings = (f"max_total_tokens={a.max_total_tokens} is larger than the profiled value {profiled}. Use the "
                    "profiled value instead." if a.max_total_tokens > profiled else
                    f"--max-total-tokens {a.max_total_tokens} caps the pool below the profiled {profiled}",
                    *warnings)
    if error is None and rp.error is not None:
        return Pools(rp.error, 0, swa_tokens, profiled, 0, 0, 0, 0, 0, 0, 0, warnings, rp.state_cache_too_small)
    if error is not None:
        return Pools(error, 0, swa_tokens, profiled, 0, 0, 0, 0, 0, 0, 0, warnings)
    tokens = rp.max_total_num_tokens
    kv_alloc, kv_reserved, draft_kv, mamba_bytes = _buffers(spec, s, rel, cells, prof, tokens, swa_tokens)
    return Pools(None, tokens, swa_tokens, profiled, rp.req_pool_size, rp.max_running_requests,
                 rp.req_to_token_bytes, kv_alloc, kv_reserved, draft_kv, mamba_bytes, warnings)


def pool_flags(s: Settled) -> PoolFlags:
    """The settled flags the pool sizing reads."""
    a = s.args
    return PoolFlags(page_size=s.page_size, max_total_tokens=a.max_total_tokens,
                     max_running_requests=a.max_running_requests, attn_dp_size=a.attn_dp_size,
                     speculative_algorithm=a.speculative_algorithm, num_steps=a.speculative_num_steps,
                     topk=a.speculative_eagle_topk, num_draft_tokens=a.speculative_num_draft_tokens,
                     mem_fraction_static=s.mem_fraction_static, disable_radix_cache=a.disable_radix_cache,
                     chunked_prefill_size=s.defaults.chunked_prefill_size)


def _configured_tokens(spec: ModelSpec, s: Settled, rel: SGLangRelease, cells: Cells, prof: Profiled
                       ) -> tuple[int | None, int | None, str | None, tuple[str, ...]]:
    """(tokens, SWA tokens, error, notes) from the configurators that own the token pool:
    ``pools.hybrid_swa_pools`` (split SWA pool), ``deepseek_v4.plan_tokens`` (DSV4PoolConfigurator)."""
    a, c, rest = s.args, cells.last, prof.first.rest_memory_bytes
    sized = swa = error = None
    if cells.swa_pool:
        llama4 = ("Llama4ForConditionalGeneration" in spec.architectures and spec.sliding_window
                  and rel.swa_split == SwaSplit.LAYER_COUNT)
        layout = SwaLayout(c.full_layer_bytes, c.num_full_layers, c.swa_layer_bytes or c.full_layer_bytes,
                           c.num_swa_layers, draft_full_layers=cells.draft_layers)
        sw = hybrid_swa_pools(rel, rest, layout, pool_flags(s), ratio=0.8, sliding_window=spec.sliding_window,
                              llama4_chunk_ratio=spec.sliding_window / s.context_len if llama4 else None)
        sized, swa, error = sw.max_total_num_tokens, sw.swa_tokens, sw.error
    if error is None and spec.dsv4 is not None:
        from . import deepseek_v4 as dsv4

        sized, swa, notes, v4 = dsv4.plan_tokens(spec, rest, a, s.defaults.chunked_prefill_size)
        return sized, swa, v4.error, tuple(notes)
    return sized, swa, error, ()


def _buffers(spec: ModelSpec, s: Settled, rel: SGLangRelease, cells: Cells, prof: Profiled, tokens: int,
             swa_tokens: int | None) -> tuple[int, int, int, int]:
    """(KV buffers, the same after torch's allocator rounding, draft KV, mamba state) in bytes."""
    page, w, carve = s.page_size, cells.worst, prof.carve
    target_cell = w.pool_bytes_per_token or w.cell_bytes - w.draft_bytes
    if swa_tokens is not None:
        kv_alloc = (kv_buffer_bytes(tokens, page, w.full_layer_bytes * w.num_full_layers)
                    + kv_buffer_bytes(swa_tokens, page, w.swa_layer_bytes * w.num_swa_layers))
    else:
        kv_alloc = kv_buffer_bytes(tokens, page, target_cell)
    # per-layer buffers rounded by torch's caching allocator (uniform, non-hybrid, non-DSA pools only)
    kv_reserved = kv_alloc
    if swa_tokens is None and carve is None and not spec.has_dsa_indexer and spec.dsv4 is None \
            and target_cell == w.full_layer_bytes * w.num_full_layers:
        n_buf = w.num_full_layers * (1 if spec.is_mla else 2)
        kv_reserved = kv_buffers_reserved_bytes(tokens, page, target_cell, n_buf)
    draft_kv = kv_buffer_bytes(tokens, page, w.full_layer_bytes * cells.draft_layers) if cells.draft_layers else 0
    pad = 1 if rel.mamba_carve == MambaCarveEra.PADDED else 0  # the state pool's padding slot
    mamba_bytes = (carve.max_mamba_cache_size + pad) * carve.per_req_bytes if carve is not None else 0
    return kv_alloc, kv_reserved, draft_kv, mamba_bytes


def graph_stage(spec: ModelSpec, s: Settled, rel: SGLangRelease, prof: Profiled, pools: Pools,
                loaded: Loaded) -> Graphs:
    """CUDA graphs and activations (estimated) against the slack the profile leaves."""
    a, d = s.args, s.defaults
    slack_bytes = int(prof.first.slack_gib * GiB)
    decode_bs = 0 if a.disable_cuda_graph else (a.cuda_graph_max_bs or d.cuda_graph_max_bs or 160)
    prefill_mib = 1536 if spec.is_mla and d.prefill_graph_tokens else d.prefill_graph_tokens * 8
    if a.disable_cuda_graph and rel.disable_cuda_graph_all_phases:
        prefill_mib = 0
    graph_est = int((decode_bs * 2 + prefill_mib) * MiB)
    activation_est = _activation_estimate(spec, d.chunked_prefill_size, a.tp_size)
    classic_draft = 0 if rel.draft_in_budget else loaded.draft_weights + pools.draft_kv
    headroom = slack_bytes - pools.req_to_token_bytes - graph_est - activation_est - classic_draft
    free = min(loaded.post) - pools.kv_reserved - pools.draft_kv - pools.mamba_bytes - pools.req_to_token_bytes \
        - classic_draft
    return Graphs(graph_est, activation_est, classic_draft, headroom, free)


def _memory_pool_error(gpu: GPU, s: Settled, graphs: Graphs, pools: Pools) -> str | None:
    """``ModelRunner.init_memory_pool`` allocates the KV buffers and the ``req_to_token`` table
    ((max_num_reqs + 1) x (context_len + 4) int32, ``ReqToTokenPool``, mem_cache/memory_pool.py @ v0.4.6.post5 ..
    v0.5.23) from the free memory after the weights; ``profile_max_num_token`` sizes the KV pool only, so a
    huge table (Llama-4's 10M context: 80.04 GiB at 2049 rows, sgl-project/sglang#5755) does not fit and
    torch raises out of memory there, before any CUDA graph is captured."""
    left = graphs.free_before_bytes + graphs.classic_draft_bytes  # after the KV buffers and req_to_token
    if not pools.starts or left >= 0 or pools.req_to_token_bytes <= 0:
        return None
    device = "HIP" if gpu.vendor == "amd" else "CUDA"
    req = pools.req_to_token_bytes
    return (f"torch.OutOfMemoryError: {device} out of memory. Tried to allocate {req / GiB:.2f} GiB "
            f"(the req_to_token pool: {pools.req_pool_size} requests x context_len {s.context_len} x int32 "
            f"does not fit the {(left + req) / GiB:.2f} GiB left after the KV cache); lower --context-length "
            "or --max-running-requests")


def _graph_capture_error(gpu: GPU, rel: SGLangRelease, graphs: Graphs, pools: Pools) -> str | None:
    """CUDA-graph capture runs after the pools; graphs larger than what is left fail there, with the
    runner's own text (``CudaGraphRunner.__init__``: ``Capture cuda graph failed: {e}`` +
    CUDA_GRAPH_CAPTURE_FAILED_MSG, model_executor/cuda_graph_runner.py @ v0.4.8.post1 .. v0.5.9,
    runner/decode_cuda_graph_runner.py @ v0.5.23; "Capture CUDA graph failed" @ v0.4.6.post5). The graph
    size is kvscope's estimate, so this verdict is too."""
    if not pools.starts or graphs.graph_bytes <= 0 or graphs.free_before_bytes - graphs.graph_bytes >= 0:
        return None
    word = "CUDA" if rel.version < Version("0.4.8") else "cuda"
    device = "HIP" if gpu.vendor == "amd" else "CUDA"
    return (f"Exception: Capture {word} graph failed: {device} out of memory (estimated: the graphs need "
            f"~{graphs.graph_bytes / GiB:.2f} GiB, {max(graphs.free_before_bytes, 0) / GiB:.2f} GiB is left after "
            "the KV cache). Possible solutions: 1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7) "
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16) ... 4. disable CUDA graph by "
            "--disable-cuda-graph.")


def verdict_stage(spec: ModelSpec, gpu: GPU, s: Settled, rel: SGLangRelease, prof: Profiled, cells: Cells,
                  pools: Pools, graphs: Graphs, loaded: Loaded) -> Verdict:
    """The minimum viable fraction, the fixes and the notes."""
    a, b, cell_bytes = s.args, s.backend, cells.worst.cell_bytes
    reserve = prof.mm_gib + (prof.first.mamba_state_gib if prof.carve is not None else 0.0)
    min_mfs = min_viable_fraction(pre_model_load_gib=prof.pre_gib, available_gpu_gib=prof.avail_gib,
                                  reserve_gib=reserve, need_bytes=cell_bytes * s.page_size)
    per_step = tokens_per_fraction_step(prof.pre_gib, cell_bytes)
    fixes = (_state_pool_floor_and_recommended(spec, s, rel, prof, cells, reserve, per_step)
             if pools.state_cache_too_small
             else _graph_fixes(s, prof, graphs) if pools.starts and graphs.free_before_bytes < graphs.graph_bytes
             else _fixes(spec, s, prof, pools, min_mfs, per_step, reserve, cell_bytes))
    w: list[str] = []
    if pools.starts and graphs.headroom_bytes < 0:
        h, c = graphs.headroom_bytes, graphs.classic_draft_bytes
        w.append(f"estimated runtime headroom is negative ({h / GiB:.2f} GiB): the slack "
                 f"{prof.first.slack_gib:.2f} GiB "
                 f"must hold req_to_token ({pools.req_to_token_bytes / GiB:.2f} GiB), CUDA graphs "
                 f"(~{graphs.graph_bytes / GiB:.2f} GiB, est.), activations (~{graphs.activation_bytes / GiB:.2f} GiB, "
                 "est.)" + (f" and the draft ({c / GiB:.2f} GiB)" if c else "")
                 + "; an OOM after startup is fixed by LOWERING --mem-fraction-static")
    if pools.starts and pools.tokens < s.context_len:
        w.append(f"the KV pool holds {pools.tokens} tokens, fewer than context_len {s.context_len}: "
                 f"max_req_len = {min(s.context_len, pools.tokens) - 1}; longer requests are refused")
    running = _requested_running(a)
    if pools.starts and running and pools.tokens < s.context_len * running:
        w.append(f"{OVERCOMMIT_NOTE} {a.max_running_requests}" + (" per DP group" if a.attn_dp_size > 1 else "")
                 + f" exceeds what the KV pool holds at full context: {pools.tokens:,} tokens hold "
                 f"{pools.tokens // s.context_len} request(s) of {s.context_len:,} tokens"
                 + (f" per DP worker ({running} requested)" if a.attn_dp_size > 1 else "")
                 + "; the rest wait (or are retracted) once requests grow long")
    if b.fraction_factor is not None:
        w.append(f"attention backend aiter with context_len {s.context_len} > 8192: SGLang multiplies "
                 f"mem_fraction_static by {b.fraction_factor:g} ({s.defaults.mem_fraction_static:.4g} -> "
                 f"{s.mem_fraction_static:.4g}), the user's value included")
    if b.page_size_source not in ("user", "default"):
        w.append(f"page_size {b.page_size}: {b.page_size_source} (attention backend {b.name}, {b.reason})")
    if not loaded.custom_all_reduce and a.tp_size > 2 and not gpu.interconnect.is_full_nvlink:
        w.append(f"custom all-reduce is disabled: {a.tp_size} PCIe-only GPUs (>2) — NCCL is used "
                 "(custom_all_reduce_utils.py: 'not supported on more than two PCIe-only GPUs')")
    return Verdict(min_mfs, per_step, tuple(fixes), tuple(w))


def rank_stage(s: Settled, rel: SGLangRelease, loaded: Loaded, cells: Cells, prof: Profiled, pools: Pools,
               graphs: Graphs) -> tuple[RankTimeline, ...]:
    """Per-rank phases and the decision record."""
    tp = s.args.tp_size
    return tuple(RankTimeline(rank=r, phases=_phases(r, s, rel, loaded, cells, prof, pools, graphs),
                              decision=_decision(r, s, loaded, cells.stages[r // tp], prof, pools,
                                                 prof.stage_tokens[r // tp], graphs))
                 for r in range(len(loaded.pre)))


def _phases(r: int, s: Settled, rel: SGLangRelease, loaded: Loaded, cells: Cells, prof: Profiled, pools: Pools,
            graphs: Graphs) -> tuple[Phase, ...]:
    L, tp, est = loaded, s.args.tp_size, not loaded.post_measured
    weights, draft_w, budgeted = L.stage_weights[r // tp], L.draft_weights, rel.draft_in_budget
    pre, post = L.pre[r], L.post[r]
    if L.load_oom is not None:  # the engine dies inside load_model: nothing after the weights happens
        return (Phase(PHASE_INIT, L.total_bytes, pre, estimated=True, note="CUDA context + communicators (est.)"),
                Phase(PHASE_LOAD_WEIGHTS, pre, pre - weights - (draft_w if budgeted else 0), estimated=est,
                      note="out of memory: the weights do not fit the free memory"))
    phases = [Phase(PHASE_INIT, L.total_bytes, pre, estimated=True,
                    note=f"CUDA context ~{L.ctx_bytes / GiB:.2f} + communicators ~{L.comm_bytes / GiB:.2f} GiB (est.)")]
    target_after = post + (draft_w if budgeted else 0) if L.post_measured else pre - weights
    phases.append(Phase(PHASE_LOAD_WEIGHTS, pre, target_after, estimated=est,
                        note=f"target weights {weights / GiB:.2f} GiB "
                        f"({'exact, safetensors headers' if L.weights_exact else 'estimated'})"))
    if draft_w and budgeted:
        phases.append(Phase(PHASE_LOAD_DRAFT, target_after, post, estimated=True,
                            note=f"draft weights {draft_w / GiB:.2f} GiB before the profile (>=0.5.14)"))
    phases.append(Phase(PHASE_PROFILE, post, post, estimated=est,
                        note="rest = available - pre x (1 - mfs)" + (" - mm" if prof.mm_gib else "")))
    if not pools.starts:
        return tuple(phases)
    free, p = post, pools
    rounding = p.kv_reserved - p.kv_alloc
    phases.append(Phase(PHASE_KV_ALLOC, free, free - p.kv_reserved - p.draft_kv - p.mamba_bytes, estimated=est,
                        note=f"{p.tokens} tokens x {cells.worst.cell_bytes} B (+1 page)"
                        + (f" + {rounding / MiB:.0f} MiB torch allocator rounding" if rounding else "")))
    free -= p.kv_reserved + p.draft_kv + p.mamba_bytes
    draft_tokens = s.args.speculative_num_draft_tokens or 0
    phases.append(Phase(PHASE_REQ_POOL, free, free - p.req_to_token_bytes, estimated=est,
                        note=f"({p.req_pool_size}+1) x ({s.context_len}+4"
                        f"{'+' + str(draft_tokens) if draft_tokens and budgeted else ''}) x 4 B"))
    free -= p.req_to_token_bytes
    if graphs.classic_draft_bytes:
        phases.append(Phase(PHASE_LOAD_DRAFT, free, free - graphs.classic_draft_bytes, estimated=True,
                            note="classic (<0.5.14): draft weights + KV paid from the slack"))
        free -= graphs.classic_draft_bytes
    phases.append(Phase(PHASE_CUDA_GRAPH, free, free - graphs.graph_bytes, estimated=True,
                        note="estimated with SGLang's reserve heuristic (max_bs x 2 MiB + prefill graph)"))
    return tuple(phases)


def _decision(r: int, s: Settled, loaded: Loaded, c: CellSize, prof: Profiled, pools: Pools, profiled: int,
              graphs: Graphs) -> SGLangDecision:
    p, d, ok = prof.first, s.defaults, pools.starts
    return SGLangDecision(
        pre_model_load_gib=prof.pre_gib, pre_model_load_bytes=min(loaded.pre), available_gpu_gib=prof.avail_gib,
        available_gpu_bytes=min(loaded.post), local_free_after_load_bytes=loaded.post[r],
        mem_fraction_static=s.mem_fraction_static, mem_fraction_static_source=d.mem_fraction_static_source,
        reserved_mem_mib=d.reserved_mem_mib, vlm_factor=d.vlm_factor, slack_gib=p.slack_gib,
        mm_reservation_gib=prof.mm_gib, mamba_state_gib=p.mamba_state_gib,
        max_mamba_cache_size=prof.carve.max_mamba_cache_size if prof.carve else None,
        rest_memory_gib=p.rest_memory_gib, rest_memory_bytes=p.rest_memory_bytes, cell_size=c.cell_bytes,
        cell_formula=c.formula, kv_cache_dtype=s.kv_dtype_name, profiled_tokens=profiled, page_size=s.page_size,
        max_total_tokens_flag=s.args.max_total_tokens, max_total_num_tokens=pools.tokens if ok else None,
        swa_tokens=pools.swa_tokens, max_num_reqs=pools.req_pool_size if ok else None,
        max_running_requests=pools.running if ok else None, req_to_token_bytes=pools.req_to_token_bytes,
        kv_buffer_bytes=pools.kv_alloc, draft_kv_bytes=pools.draft_kv,
        runtime_headroom_bytes_estimated=graphs.headroom_bytes if ok else None, error=pools.error)


def plan_extra(s: Settled, loaded: Loaded, prof: Profiled, pools: Pools, verdict: Verdict,
               measured: Measured) -> SGLangPlanExtra:
    a, b, d, f, min_mfs = s.args, s.backend, s.defaults, s.fraction_factor, verdict.min_fraction
    return SGLangPlanExtra(
        mem_fraction_static=s.mem_fraction_static, mem_fraction_static_source=d.mem_fraction_static_source,
        mem_fraction_static_flag=d.mem_fraction_static, attention_backend=b.name, attention_backend_source=b.source,
        attention_backend_reason=b.reason, page_size_source=b.page_size_source, aiter_fraction_factor=b.fraction_factor,
        # flag units: what to pass as --mem-fraction-static (the effective minimum / aiter factor)
        min_mem_fraction_static=round(min_mfs / f, 4) if min_mfs / f < 1 else None,
        min_effective_mem_fraction_static=round(min_mfs, 4) if min_mfs < 1 else None,
        engine_min_mem_fraction_static=round(1 - prof.avail_gib / prof.pre_gib, 4),
        tokens_per_0_01_mem_fraction=verdict.tokens_per_step, context_len=s.context_len, page_size=s.page_size,
        kv_cache_dtype=s.kv_dtype_name, chunked_prefill_size=d.chunked_prefill_size,
        cuda_graph_max_bs=d.cuda_graph_max_bs, pre_model_load_bytes=min(loaded.pre),
        available_gpu_bytes=min(loaded.post), rest_memory_bytes=prof.first.rest_memory_bytes,
        swa_tokens=pools.swa_tokens, req_to_token_bytes=pools.req_to_token_bytes,
        draft_weights_bytes=loaded.draft_weights, custom_all_reduce=loaded.custom_all_reduce, tp=a.tp_size,
        pp=a.pp_size, dp=a.dp_size, enable_dp_attention=a.enable_dp_attention,
        weights_estimated="weights" in loaded.estimated,
        measured_inputs=bool(measured.pre_load_free_bytes or measured.post_load_free_bytes))


def _activation_estimate(spec: ModelSpec, chunk: int, tp: int) -> int:
    """Estimated prefill activation peak for one chunk: tokens x (gate+up width per rank + ~4 hidden) x dtype,
    x2 for temporaries. An estimate (SGLang does not compute it; its default-fraction heuristic reserves
    chunk x 1.5 MiB, which is far more conservative)."""
    width = spec.intermediate_size
    if spec.moe is not None:
        width = max(width, spec.moe.num_experts_per_tok * spec.moe.moe_intermediate_size)
    return max(chunk, 1) * (2 * width // tp + 4 * spec.hidden_size) * spec.dtype_bytes * 2


def _ceil3(x: float) -> float:
    return math.ceil(x * 1000 - 1e-9) / 1000


def _state_pool_floor_and_recommended(spec: ModelSpec, s: Settled, rel: SGLangRelease, prof: Profiled, cells: Cells,
                                      reserve: float, per_step: int) -> list[Fix]:
    """The recommendations (one full request; the requested requests) above the state-pool floor."""
    floor = _state_pool_fixes(spec, s, rel, prof, cells)
    low = max((f.value for f in floor if f.flag == "--mem-fraction-static"), default=0.0)
    return [f for f in _recommended_fixes(spec, s, prof, reserve, cells.worst.cell_bytes, per_step)
            if f.flag != "--mem-fraction-static" or f.value > low] + floor


def _state_pool_fixes(spec: ModelSpec, s: Settled, rel: SGLangRelease, prof: Profiled, cells: Cells) -> list[Fix]:
    """The smallest fraction whose mamba state pool admits one request (``max_mamba_cache_size //
    ratio >= 1``), found by running ``memory.profile`` (bisection on 0.001 steps)."""
    a, ratio = s.args, mamba_request_ratio(s.args.disable_radix_cache)

    def admits(milli: int) -> bool:
        _, carve = profile(rel, pre_model_load_gib=prof.pre_gib, available_gpu_gib=prof.avail_gib,
                           mem_fraction_static=milli / 1000, cell_bytes=cells.worst.cell_bytes,
                           mm_reservation=prof.mm_gib, mamba_per_req_bytes=cells.mamba_per_req,
                           disable_radix_cache=a.disable_radix_cache, max_running_requests=a.max_running_requests,
                           attn_dp_size=a.attn_dp_size, mamba_is_gdn=bool(spec.mamba and spec.mamba.kind == "gdn"),
                           speculative_num_draft_tokens=a.speculative_num_draft_tokens if a.speculative_algorithm
                           else None)
        return carve is not None and carve.error is None and carve.max_mamba_cache_size // ratio >= 1

    lo, hi = math.floor(s.mem_fraction_static * 1000), 999
    if not admits(hi):
        return [Fix("--tp", a.tp_size * 2,
                    "the state pool cannot hold one request at any fraction: shard over more GPUs")]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if admits(mid) else (mid, hi)
    flag = hi / 1000 / s.fraction_factor
    out = []
    if flag < 1:
        out.append(Fix("--mem-fraction-static", _ceil3(flag), f"floor: smallest fraction whose mamba state pool holds "
                       f"{ratio} slot(s) per request (max_mamba_cache_size // mamba_ratio >= 1)"))
    if not a.disable_radix_cache:
        out.append(Fix("--disable-radix-cache", True, "mamba_ratio 1 instead of 3: one state slot per request"))
    return out


OVERCOMMIT_NOTE = "--max-running-requests"  # the verdict's under-sized note starts with it (report/sglang_text.py)


def _requested_running(a: SGLangArgs) -> int | None:
    """``--max-running-requests`` as given, per DP-attention worker (SGLang divides it: ``max_num_reqs``)."""
    if a.max_running_requests is None:
        return None
    return max(1, a.max_running_requests // max(1, a.attn_dp_size))


def _recommended_fixes(spec: ModelSpec, s: Settled, prof: Profiled, reserve: float, cell: int,
                       per_step: int) -> list[Fix]:
    """The recommendations: the fraction that holds one full ``context_len`` request, and (with
    ``--max-running-requests``) that many requests at the context — each at least SGLang's default
    for the layout, which keeps its runtime reserve (CUDA graphs, activations). From
    ``min_viable_fraction`` (SGLang's budget solved for the fraction, memory.py)."""
    a, factor, ctx = s.args, s.fraction_factor, min(s.context_len, derived_context_len(spec))
    default = s.defaults.mem_fraction_static
    wants = [(1, f"holds one full {ctx:,}-token request")]
    running = _requested_running(a)
    if running and running > 1:
        per = " per DP worker" if a.attn_dp_size > 1 else ""
        wants.append((running, f"holds --max-running-requests {a.max_running_requests} ({running}{per}) "
                               f"at {ctx:,} tokens = {running * ctx:,} tokens"))
    out: list[Fix] = []
    for n, what in wants:
        f = min_viable_fraction(pre_model_load_gib=prof.pre_gib, available_gpu_gib=prof.avail_gib,
                                reserve_gib=reserve, need_bytes=n * ctx * cell) / factor
        if f >= 1:
            if min_viable_fraction(pre_model_load_gib=prof.pre_gib, available_gpu_gib=prof.avail_gib,
                                   reserve_gib=reserve, need_bytes=cell * s.page_size) / factor < 1:
                out.append(Fix("--tp", a.tp_size * 2, f"no fraction below 1 {what}: shard over more GPUs"))
            break  # (no budget at all: _tp_fixes sizes the TP)
        value = max(_ceil3(f), default)
        keep = f" (needs {_ceil3(f)}; SGLang's default {default:g} keeps its runtime reserve)" if value > _ceil3(f) \
            else f" ({per_step:,} tokens per +0.01)"
        out.append(Fix("--mem-fraction-static", value, f"recommended: {what}{keep}"))
    return out


def _graph_fixes(s: Settled, prof: Profiled, graphs: Graphs) -> list[Fix]:
    """Room for the (estimated) CUDA graphs: each -0.01 of the fraction leaves pre x 0.01 more free
    after the KV cache; or no decode graphs at all."""
    deficit_gib = (graphs.graph_bytes - graphs.free_before_bytes) / GiB
    effective = s.mem_fraction_static - deficit_gib / prof.pre_gib if prof.pre_gib > 0 else 0.0
    out = []
    if effective > 0:
        flag = math.floor(effective / s.fraction_factor * 1000 + 1e-9) / 1000
        out.append(Fix("--mem-fraction-static", flag, f"leaves the ~{graphs.graph_bytes / GiB:.2f} GiB of CUDA "
                       "graphs (est.) free after the KV cache"))
    if not s.args.disable_cuda_graph:
        out.append(Fix("--disable-cuda-graph", True, "no decode graphs to capture (slower decode)"))
    return out


def _tp_fixes(spec: ModelSpec, s: Settled, prof: Profiled, reserve: float, cell: int) -> list[Fix]:
    """When the weights leave no budget at any fraction: the TP that holds one full request at SGLang's
    default fraction (recommended) and the least TP that leaves a KV budget at 0.99 (floor). Estimated:
    the weights on a rank (pre - available) and the cell scale with this TP / the new TP (GQA cells:
    KV heads per rank, at least one; MLA cells do not shrink)."""
    a, heads, kvh = s.args, spec.num_attention_heads, max(1, spec.num_key_value_heads)
    ctx = min(s.context_len, derived_context_len(spec))
    w, default = prof.pre_gib - prof.avail_gib, s.defaults.mem_fraction_static
    floor = rec = None
    n = a.tp_size * 2
    while n <= 64 and rec is None:
        if heads % n == 0:
            wn = w * a.tp_size / n
            cn = cell if spec.is_mla else cell * max(1, kvh // n) / max(1, kvh // a.tp_size)
            if floor is None and prof.pre_gib * 0.99 - wn - reserve > cn * s.page_size / GiB:
                floor = (n, wn)
            if prof.pre_gib * default - wn - reserve >= ctx * cn / GiB:
                rec = (n, wn)
        n *= 2
    out = []
    if rec is not None:
        out.append(Fix("--tp", rec[0], f"recommended (est.): holds one full {ctx:,}-token request at SGLang's default "
                                       f"fraction {default:g}: ~{rec[1]:.1f} GiB of weights per rank (scaled 1/TP)"))
    if floor is not None:
        out.append(Fix("--tp", floor[0], f"floor (est.): the least TP whose weights (~{floor[1]:.1f} GiB per rank) "
                                         "leave a KV budget"))
    return out


def _fixes(spec: ModelSpec, s: Settled, prof: Profiled, pools: Pools, min_mfs: float, per_step: int,
           reserve: float, cell: int) -> list[Fix]:
    """Fix values are flag values: an effective fraction f needs ``--mem-fraction-static f / factor``
    when SGLang scales the flag (aiter x0.85, see backend.py)."""
    a, starts, tokens, context_len, kv_bytes = s.args, pools.starts, pools.tokens, s.context_len, s.kv_bytes
    pre_gib, avail_gib, factor = prof.pre_gib, prof.avail_gib, s.fraction_factor
    out: list[Fix] = []
    scaled = "" if factor == 1.0 else f" (SGLang multiplies the flag by {factor:g} for this backend)"
    if not starts:
        out += _recommended_fixes(spec, s, prof, reserve, cell, per_step)
        if min_mfs < 1:
            if min_mfs / factor < 1:
                out.append(Fix("--mem-fraction-static", _ceil3(min_mfs / factor),
                               f"floor: the least that starts (a KV budget of one page): 1 - (available "
                               f"{avail_gib:.2f} - reserve {reserve:.2f}) / pre {pre_gib:.2f} GiB{scaled}; each "
                               f"+0.01 above it buys {per_step} tokens"))
            else:
                out.append(Fix("--attention-backend", "triton",
                               f"the flag would need {min_mfs / factor:.3f} > 1 because SGLang multiplies it by "
                               f"{factor:g} for aiter at context > 8192; triton does not"))
        else:
            out += _tp_fixes(spec, s, prof, reserve, cell) or [
                Fix("--tp", a.tp_size * 2, "the weights alone exceed the free memory: shard over more GPUs")]
        if kv_bytes > 1 and min_mfs < 1:
            out.append(Fix("--kv-cache-dtype", "fp8_e4m3",
                           "halves the cell size (more tokens per GiB) once the budget is positive; it does not "
                           "fix a negative budget"))
        return out
    running = _requested_running(a)
    if tokens < context_len or (running and tokens < context_len * running):
        out += [f for f in _recommended_fixes(spec, s, prof, reserve, cell, per_step)
                if f.flag != "--mem-fraction-static" or f.value > s.mem_fraction_static / factor + 1e-9]
        if min_mfs / factor < 1:
            out.append(Fix("--mem-fraction-static", _ceil3(min_mfs / factor),
                           f"floor: the least that starts; it holds only {s.page_size} token(s)"))
    if tokens < context_len:
        out.append(Fix("--context-length", tokens, "cap requests to what the pool holds"))
        if kv_bytes > 1:
            out.append(Fix("--kv-cache-dtype", "fp8_e4m3", "fp8 KV doubles the tokens per GiB"))
    return out
