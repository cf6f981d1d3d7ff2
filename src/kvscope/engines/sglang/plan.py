"""SGLang startup simulation: per-rank timeline, the sizing decision, the verdict and the fix.

Sequence (SGLang v0.5.23, ``Scheduler.init_model_worker``; classic <=0.5.13 in brackets):
parallel init → baseline ``pre_model_load_memory`` (MIN over ranks) → target weights → draft
weights (>=0.5.14) → profile → KV pools (+ draft pool) → req_to_token pool → CUDA graphs
[→ draft worker: weights, KV, graphs, paid from the slack].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ...errors import FlagError
from ...hardware.gpus import GPU
from ...hardware.overhead import communicators, cuda_context, custom_all_reduce_enabled
from ...model.spec import ModelSpec
from ...model.weights import pp_layer_range, weights_per_rank
from ...timeline import (PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_DRAFT, PHASE_LOAD_WEIGHTS,
                         PHASE_PROFILE, PHASE_REQ_POOL, Fix, Phase, RankTimeline, Timeline)
from ...units import GiB, MiB
from . import memory as mem
from .args import SGLangArgs, at_least, parse_version, resolve_defaults
from .backend import resolve_attention_backend

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


def _per_rank(values: Sequence[int] | None, world: int, name: str) -> tuple[int, ...] | None:
    if values is None:
        return None
    vals = tuple(int(x) for x in values)
    if len(vals) == 1:
        return vals * world
    if len(vals) != world:
        raise FlagError(f"{len(vals)} values for {world} ranks", field=name,
                        fix=f"give one value (all ranks) or exactly {world} (one per rank)")
    if any(x < 0 for x in vals):
        raise FlagError("free memory cannot be negative", field=name, fix="pass GiB values >= 0")
    return vals


def validate(spec: ModelSpec, a: SGLangArgs) -> None:
    """Refuse what SGLang refuses (model_config.py / server_args.py checks)."""
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
    if a.context_length is not None and a.context_length > derived:
        raise FlagError(f"User-specified context_length ({a.context_length}) is greater than the derived "
                        f"context_length ({derived})", field="--context-length",
                        fix="lower it, or set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in SGLang")
    if a.page_size is not None and a.page_size < 1:
        raise FlagError("must be >= 1", field="--page-size", fix="e.g. 1, 16 or 64")


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


def derived_context_len(spec: ModelSpec) -> int:
    """``ModelConfig.context_len`` when ``--context-length`` is not given (model_config.py @ v0.5.9
    ``_derive_context_length``): SGLang's ``get_context_length``, see ``ModelSpec.sglang_context_len``."""
    return spec.sglang_context_len or spec.max_position_embeddings


def plan_sglang(spec: ModelSpec, gpu: GPU, a: SGLangArgs, version: str | None = None,
                measured: Measured | None = None, draft: ModelSpec | None = None,
                exact_weights_per_rank: int | None = None) -> Timeline:
    """Simulate one SGLang start. ``exact_weights_per_rank``: from safetensors headers (pp=1)."""
    v = parse_version(version)
    validate(spec, a)
    measured = measured or Measured()
    world = a.tp_size * a.pp_size
    attn_tp = a.attn_tp_size
    context_len = a.context_length or derived_context_len(spec)
    d = resolve_defaults(v, a, gpu.memory_mib, is_mla=spec.is_mla, is_multimodal=spec.is_multimodal,
                         vit_num_layers=spec.vision.sglang_num_layers if spec.vision else 24,
                         vit_hidden_size=spec.vision.sglang_hidden_size if spec.vision else 1024,
                         is_amd=gpu.vendor == "amd")
    backend = resolve_attention_backend(v, spec, gpu, a, context_len)
    page = backend.page_size
    if spec.dsv4 is not None:  # DeepSeek-V4 overrides: dsv4 backend, page 256, max_running_requests 256
        from .deepseek_v4 import apply_overrides as dsv4_overrides
        a, page = dsv4_overrides(a)
    factor = backend.fraction_factor or 1.0
    mfs = d.mem_fraction_static * factor
    kv_name, kv_bytes = mem.kv_cache_dtype(spec, a.kv_cache_dtype)
    warnings: list[str] = list(spec.assumed)
    estimated: list[str] = []

    # --- phase 1: parallel init -> baseline -------------------------------------------------
    car = custom_all_reduce_enabled(gpu, a.tp_size)
    ctx = cuda_context(gpu)
    comm = communicators(gpu, a.tp_size, car)
    pre = _per_rank(measured.pre_load_free_bytes, world, "--pre-load-free-gib")
    if pre is None:
        pre = (gpu.cuda_total_bytes - ctx.estimate_bytes - comm.estimate_bytes,) * world
        estimated.append("pre_model_load_memory")

    # --- phase 2: weights (target, then draft for >=0.5.14) ---------------------------------
    w = weights_per_rank(spec, tp=a.tp_size, pp=a.pp_size, attn_tp=attn_tp, engine="sglang",
                         device="rocm" if gpu.vendor == "amd" else "cuda")
    stage_weights = w.per_stage_bytes
    weights_exact = exact_weights_per_rank is not None and a.pp_size == 1
    if weights_exact:
        stage_weights = (exact_weights_per_rank,)
    draft_w = _draft_weights_bytes(spec, a, draft)
    draft_first = at_least(v, "0.5.14")
    post = _per_rank(measured.post_load_free_bytes, world, "--post-load-free-gib")
    post_measured = post is not None
    if post is None:
        post = tuple(pre[r] - stage_weights[r // a.tp_size] - (draft_w if draft_first else 0) for r in range(world))
        estimated.append("weights")

    # --- phase 3: profile (MIN over the world; float32 all-reduce) ---------------------------
    distributed = world > 1
    pre_gib = mem.available_gib(pre, distributed)
    avail_gib = mem.available_gib(post, distributed)
    mm_gib = mem.mm_reservation_gib(v, spec.is_multimodal and not a.language_only)
    draft_layers = _draft_layers(spec, a, draft)
    if draft_layers and draft is None and not spec.num_nextn_predict_layers:
        estimated.append("draft_kv")
        warnings.append(f"{a.speculative_algorithm}: no draft config (--speculative-draft-model-path) and no MTP "
                        "layer in the target: the draft KV is estimated as one layer of the target's width")
    mamba_per_req = mem.mamba_pp_stage_bytes(  # the largest PP stage's share (>=0.5.18)
        v, mem.mamba_state_bytes_per_req(spec, attn_tp),
        [i for i, t in enumerate(spec.layer_types) if t in ("linear_attention", "mamba")],
        spec.num_hidden_layers, a.pp_size) if spec.is_mambaish else 0
    swa_pool = spec.is_hybrid_swa and bool(HYBRID_SWA_ARCHS.intersection(spec.architectures))
    stage_tokens = []
    cells = []
    prof = carve = None
    for stage in range(a.pp_size):
        lo, hi = pp_layer_range(spec.num_hidden_layers, stage, a.pp_size)
        cell = mem.cell_size(spec, v, attn_tp=attn_tp, kv_bytes=kv_bytes, kv_flag=a.kv_cache_dtype.lower(),
                             layer_ids=range(lo, hi), draft_layers=draft_layers if stage == a.pp_size - 1 else 0,
                             draft_in_budget=draft_first, attention_backends=(backend.name, backend.name),
                             sm100=gpu.sm in ("sm100", "sm103"))
        cells.append(cell)
        p, c = mem.profile(v, pre_model_load_gib=pre_gib, available_gpu_gib=avail_gib, mem_fraction_static=mfs,
                           cell_bytes=cell.cell_bytes if not swa_pool else
                           cell.full_layer_bytes * cell.num_full_layers + cell.swa_layer_bytes * cell.num_swa_layers,
                           mm_reservation=mm_gib, mamba_per_req_bytes=mamba_per_req,
                           disable_radix_cache=a.disable_radix_cache, max_running_requests=a.max_running_requests,
                           attn_dp_size=a.attn_dp_size, mamba_is_gdn=bool(spec.mamba and spec.mamba.kind == "gdn"),
                           speculative_num_draft_tokens=a.speculative_num_draft_tokens if a.speculative_algorithm
                           else None)
        prof = prof or p
        carve = carve or c
        if p.error is None and swa_pool and at_least(v, "0.5.14"):
            full, _swa = mem.swa_split(v, p.rest_memory_bytes, cell, page, 0.8)
            stage_tokens.append(full)
        else:
            stage_tokens.append(p.profiled_tokens)
    assert prof is not None
    cell = cells[-1] if a.pp_size > 1 else cells[0]
    cell_worst = max(cells, key=lambda c: c.cell_bytes)

    error = prof.error
    profiled = min(stage_tokens)
    spec_headroom = 0  # <0.5.9: the target pads the shared pool for EAGLE drafts (memory.classic_spec_headroom_tokens)
    if error is None and a.speculative_algorithm and not at_least(v, "0.5.9"):
        est = a.max_running_requests if a.max_running_requests is not None else min(
            max(int(profiled / context_len * 512), 2048), 4096)
        spec_headroom = mem.classic_spec_headroom_tokens(
            v, a.speculative_algorithm, est, num_steps=a.speculative_num_steps or 0,
            topk=a.speculative_eagle_topk or 0, num_draft_tokens=a.speculative_num_draft_tokens or 0)
    tokens, capped = mem.apply_token_constraints(min(mem.round_to_page(t + spec_headroom, page) for t in stage_tokens)
                                                 if error is None else 0, page, a.max_total_tokens)
    if capped:
        warnings.append(f"max_total_tokens={a.max_total_tokens} is larger than the profiled value "
                        f"{profiled}. Use the profiled value instead." if a.max_total_tokens > profiled else
                        f"--max-total-tokens {a.max_total_tokens} caps the pool below the profiled {profiled}")
    swa_tokens = None
    if error is None and swa_pool:  # per-release split incl. cap and validate (memory.hybrid_swa_pools)
        llama4 = ("Llama4ForConditionalGeneration" in spec.architectures and spec.sliding_window
                  and not at_least(v, "0.5.9"))
        sw = mem.hybrid_swa_pools(
            v, available_bytes=prof.rest_memory_bytes, full_layer_bytes=cell.full_layer_bytes,
            num_full_layers=cell.num_full_layers, swa_layer_bytes=cell.swa_layer_bytes or cell.full_layer_bytes,
            num_swa_layers=cell.num_swa_layers, page_size=page, ratio=0.8, max_total_tokens=a.max_total_tokens,
            sliding_window=spec.sliding_window, draft_full_layers=draft_layers, mem_fraction_static=mfs,
            llama4_chunk_ratio=spec.sliding_window / context_len if llama4 else None,
            disable_radix_cache=a.disable_radix_cache, max_running_requests=a.max_running_requests,
            chunked_prefill_size=d.chunked_prefill_size, attn_dp_size=a.attn_dp_size,
            speculative_algorithm=a.speculative_algorithm, num_steps=a.speculative_num_steps,
            topk=a.speculative_eagle_topk, num_draft_tokens=a.speculative_num_draft_tokens)
        tokens, swa_tokens, error = sw.max_total_num_tokens, sw.swa_tokens, sw.error
    if error is None and spec.dsv4 is not None:  # DeepSeek-V4: DSV4PoolConfigurator (sglang/deepseek_v4.py)
        from .deepseek_v4 import plan_tokens as dsv4_plan_tokens
        tokens, swa_tokens, v4_notes, v4_pools = dsv4_plan_tokens(spec, prof.rest_memory_bytes, a, d.chunked_prefill_size)
        warnings += v4_notes
        error = v4_pools.error
    if error is None and tokens <= 0:
        error = mem.runtime_error_text(v, mfs)
    starts = error is None

    # --- phase 4: pools ----------------------------------------------------------------------
    mamba_cap = None
    if carve is not None:
        ratio = 1 if a.disable_radix_cache else 3
        mamba_cap = carve.max_mamba_cache_size // ratio
    pool, running = (0, 0)
    if starts:
        pool, running = mem.max_num_reqs(v, token_capacity=tokens, profiled_tokens=profiled, context_len=context_len,
                                         max_running_requests=a.max_running_requests, attn_dp_size=a.attn_dp_size,
                                         mamba_cap=mamba_cap)
    draft_tokens = a.speculative_num_draft_tokens or 0
    req_extra = mem.req_to_token_extra_context_len(v, speculative_algorithm=a.speculative_algorithm,
                                                   num_draft_tokens=a.speculative_num_draft_tokens,
                                                   num_steps=a.speculative_num_steps, topk=a.speculative_eagle_topk,
                                                   page_size=page)
    req_bytes = mem.req_to_token_bytes(v, pool, context_len, extra_context_len=req_extra) if starts else 0
    target_cell = cell_worst.pool_bytes_per_token or cell_worst.cell_bytes - cell_worst.draft_bytes
    if starts and swa_tokens is not None:
        kv_alloc = (mem.kv_buffer_bytes(tokens, page, cell_worst.full_layer_bytes * cell_worst.num_full_layers)
                    + mem.kv_buffer_bytes(swa_tokens, page, cell_worst.swa_layer_bytes * cell_worst.num_swa_layers))
    else:
        kv_alloc = mem.kv_buffer_bytes(tokens, page, target_cell) if starts else 0
    # what the pool takes from free memory: per-layer buffers rounded by torch's caching allocator
    # (uniform, non-hybrid, non-DSA pools only; else the printed size)
    kv_reserved = kv_alloc
    if starts and swa_tokens is None and carve is None and not spec.has_dsa_indexer and spec.dsv4 is None \
            and target_cell == cell_worst.full_layer_bytes * cell_worst.num_full_layers:
        n_buf = cell_worst.num_full_layers * (1 if spec.is_mla else 2)
        kv_reserved = mem.kv_buffers_reserved_bytes(tokens, page, target_cell, n_buf)
    per_layer = cell_worst.full_layer_bytes
    draft_kv = mem.kv_buffer_bytes(tokens, page, per_layer * draft_layers) if starts and draft_layers else 0
    mamba_bytes = ((carve.max_mamba_cache_size + (1 if at_least(v, "0.5.18") else 0)) * carve.per_req_bytes
                   if carve is not None and starts else 0)

    # --- verdict helpers ---------------------------------------------------------------------
    reserve = mm_gib + (prof.mamba_state_gib if carve is not None else 0.0)
    need = cell_worst.cell_bytes * page
    min_mfs = mem.min_viable_fraction(pre_model_load_gib=pre_gib, available_gpu_gib=avail_gib, reserve_gib=reserve,
                                      need_bytes=need)
    per_step = mem.tokens_per_fraction_step(pre_gib, cell_worst.cell_bytes)
    fixes = _fixes(v, a, spec, starts, mfs, min_mfs, per_step, tokens, context_len, pre_gib, avail_gib, reserve,
                   cell_worst.cell_bytes, kv_bytes, page, factor)

    # graphs/activations (estimated with SGLang's own reserve heuristic) vs the slack left
    slack_bytes = int(prof.slack_gib * GiB)
    graph_est = int(((a.cuda_graph_max_bs or d.cuda_graph_max_bs or 160) * 2 + (
        1536 if spec.is_mla and d.prefill_graph_tokens else d.prefill_graph_tokens * 8)) * MiB)
    activation_est = _activation_estimate(spec, d.chunked_prefill_size, a.tp_size)
    classic_draft = 0 if draft_first else draft_w + draft_kv
    headroom = slack_bytes - req_bytes - graph_est - activation_est - classic_draft - mamba_bytes * 0
    if starts and headroom < 0:
        warnings.append(
            f"estimated runtime headroom is negative ({headroom / GiB:.2f} GiB): the slack "
            f"{prof.slack_gib:.2f} GiB must hold req_to_token ({req_bytes / GiB:.2f} GiB), CUDA graphs (~{graph_est / GiB:.2f} GiB, est.), "
            f"activations (~{activation_est / GiB:.2f} GiB, est.)" + (f" and the draft ({classic_draft / GiB:.2f} GiB)" if classic_draft else "")
            + "; an OOM after startup is fixed by LOWERING --mem-fraction-static")
    if starts and tokens < context_len:
        warnings.append(f"the KV pool holds {tokens} tokens, fewer than context_len {context_len}: "
                        f"max_req_len = {min(context_len, tokens) - 1}; longer requests are refused")
    if backend.fraction_factor is not None:
        warnings.append(f"attention backend aiter with context_len {context_len} > 8192: SGLang multiplies "
                        f"mem_fraction_static by {backend.fraction_factor:g} ({d.mem_fraction_static:.4g} -> "
                        f"{mfs:.4g}), the user's value included")
    if backend.page_size_source not in ("user", "default"):
        warnings.append(f"page_size {backend.page_size}: {backend.page_size_source} (attention backend "
                        f"{backend.name}, {backend.reason})")
    if not car and a.tp_size > 2 and not gpu.interconnect.is_full_nvlink:
        warnings.append(f"custom all-reduce is disabled: {a.tp_size} PCIe-only GPUs (>2) — NCCL is used "
                        "(custom_all_reduce_utils.py: 'not supported on more than two PCIe-only GPUs')")

    # --- per-rank timelines ------------------------------------------------------------------
    ranks = []
    for r in range(world):
        stage = r // a.tp_size
        before_init = gpu.cuda_total_bytes
        p_pre, p_post = pre[r], post[r]
        phases = [Phase(PHASE_INIT, before_init, p_pre, estimated=True,
                        note=f"CUDA context ~{ctx.estimate_bytes / GiB:.2f} + communicators ~{comm.estimate_bytes / GiB:.2f} GiB (est.)")]
        target_after = p_post + (draft_w if draft_first else 0) if post_measured else p_pre - stage_weights[stage]
        phases.append(Phase(PHASE_LOAD_WEIGHTS, p_pre, target_after, estimated=not post_measured,
                            note=f"target weights {stage_weights[stage] / GiB:.2f} GiB ({'exact, safetensors headers' if weights_exact else 'estimated'})"))
        if draft_w and draft_first:
            phases.append(Phase(PHASE_LOAD_DRAFT, target_after, p_post, estimated=True,
                                note=f"draft weights {draft_w / GiB:.2f} GiB before the profile (>=0.5.14)"))
        phases.append(Phase(PHASE_PROFILE, p_post, p_post, estimated=not post_measured,
                            note="rest = available - pre x (1 - mfs)" + (" - mm" if mm_gib else "")))
        free = p_post
        if starts:
            rounding = kv_reserved - kv_alloc
            phases.append(Phase(PHASE_KV_ALLOC, free, free - kv_reserved - draft_kv - mamba_bytes,
                                estimated=not post_measured,
                                note=f"{tokens} tokens x {cell_worst.cell_bytes} B (+1 page)"
                                + (f" + {rounding / MiB:.0f} MiB torch allocator rounding" if rounding else "")))
            free -= kv_reserved + draft_kv + mamba_bytes
            phases.append(Phase(PHASE_REQ_POOL, free, free - req_bytes, estimated=not post_measured,
                                note=f"({pool}+1) x ({context_len}+4{'+' + str(draft_tokens) if draft_tokens and draft_first else ''}) x 4 B"))
            free -= req_bytes
            if classic_draft:
                phases.append(Phase(PHASE_LOAD_DRAFT, free, free - classic_draft, estimated=True,
                                    note="classic (<0.5.14): draft weights + KV paid from the slack"))
                free -= classic_draft
            phases.append(Phase(PHASE_CUDA_GRAPH, free, free - graph_est, estimated=True,
                                note="estimated with SGLang's reserve heuristic (max_bs x 2 MiB + prefill graph)"))
        decision = {
            "pre_model_load_gib": pre_gib,
            "pre_model_load_bytes": min(pre),
            "available_gpu_gib": avail_gib,
            "available_gpu_bytes": min(post),
            "local_free_after_load_bytes": p_post,
            "mem_fraction_static": mfs,
            "mem_fraction_static_source": d.mem_fraction_static_source,
            "reserved_mem_mib": d.reserved_mem_mib,
            "vlm_factor": d.vlm_factor,
            "slack_gib": prof.slack_gib,
            "mm_reservation_gib": mm_gib,
            "mamba_state_gib": prof.mamba_state_gib,
            "max_mamba_cache_size": carve.max_mamba_cache_size if carve else None,
            "rest_memory_gib": prof.rest_memory_gib,
            "rest_memory_bytes": prof.rest_memory_bytes,
            "cell_size": cells[stage].cell_bytes,
            "cell_formula": cells[stage].formula,
            "kv_cache_dtype": kv_name,
            "profiled_tokens": stage_tokens[stage],
            "page_size": page,
            "max_total_tokens_flag": a.max_total_tokens,
            "max_total_num_tokens": tokens if starts else None,
            "swa_tokens": swa_tokens,
            "max_num_reqs": pool if starts else None,
            "max_running_requests": running if starts else None,
            "req_to_token_bytes": req_bytes,
            "kv_buffer_bytes": kv_alloc,
            "draft_kv_bytes": draft_kv,
            "runtime_headroom_bytes_estimated": headroom if starts else None,
            "error": error,
        }
        ranks.append(RankTimeline(rank=r, phases=tuple(phases), decision=decision))

    extra = {
        "mem_fraction_static": mfs,
        "mem_fraction_static_source": d.mem_fraction_static_source,
        "mem_fraction_static_flag": d.mem_fraction_static,
        "attention_backend": backend.name,
        "attention_backend_source": backend.source,
        "attention_backend_reason": backend.reason,
        "page_size_source": backend.page_size_source,
        "aiter_fraction_factor": backend.fraction_factor,
        # flag units: what to pass as --mem-fraction-static (the effective minimum / aiter factor)
        "min_mem_fraction_static": round(min_mfs / factor, 4) if min_mfs / factor < 1 else None,
        "min_effective_mem_fraction_static": round(min_mfs, 4) if min_mfs < 1 else None,
        "engine_min_mem_fraction_static": round(1 - avail_gib / pre_gib, 4),
        "tokens_per_0_01_mem_fraction": per_step,
        "context_len": context_len,
        "page_size": page,
        "kv_cache_dtype": kv_name,
        "chunked_prefill_size": d.chunked_prefill_size,
        "cuda_graph_max_bs": d.cuda_graph_max_bs,
        "pre_model_load_bytes": min(pre),
        "available_gpu_bytes": min(post),
        "rest_memory_bytes": prof.rest_memory_bytes,
        "swa_tokens": swa_tokens,
        "req_to_token_bytes": req_bytes,
        "draft_weights_bytes": draft_w,
        "custom_all_reduce": car,
        "tp": a.tp_size, "pp": a.pp_size, "dp": a.dp_size, "enable_dp_attention": a.enable_dp_attention,
        "weights_estimated": "weights" in estimated,
        "measured_inputs": bool(measured.pre_load_free_bytes or measured.post_load_free_bytes),
    }
    return Timeline(
        source="plan", engine="sglang", engine_version=str(v), model=spec.name, gpu=gpu.key, starts=starts,
        error=error, kv_cache_tokens=tokens if starts else 0, max_running_requests=running if starts else None,
        kv_cell_bytes=cell_worst.cell_bytes, kv_cache_bytes=kv_alloc + draft_kv, weights_bytes=max(stage_weights),
        ranks=tuple(ranks), fix=tuple(fixes), extra=extra, warnings=tuple(warnings), estimated=tuple(estimated))


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


def _fixes(v, a: SGLangArgs, spec: ModelSpec, starts: bool, mfs: float, min_mfs: float, per_step: int, tokens: int,
           context_len: int, pre_gib: float, avail_gib: float, reserve: float, cell: int, kv_bytes: int,
           page: int, factor: float = 1.0) -> list[Fix]:
    """Fix values are flag values: an effective fraction f needs ``--mem-fraction-static f / factor``
    when SGLang scales the flag (aiter x0.85, see backend.py)."""
    out: list[Fix] = []
    scaled = "" if factor == 1.0 else f" (SGLang multiplies the flag by {factor:g} for this backend)"
    if not starts:
        if min_mfs < 1:
            if min_mfs / factor < 1:
                out.append(Fix("--mem-fraction-static", _ceil3(min_mfs / factor),
                               f"minimum that leaves a KV budget: 1 - (available {avail_gib:.2f} - reserve "
                               f"{reserve:.2f}) / pre {pre_gib:.2f} GiB{scaled}; each +0.01 above it buys "
                               f"{per_step} tokens"))
            else:
                out.append(Fix("--attention-backend", "triton",
                               f"the flag would need {min_mfs / factor:.3f} > 1 because SGLang multiplies it by "
                               f"{factor:g} for aiter at context > 8192; triton does not"))
        else:
            out.append(Fix("--tp", a.tp_size * 2, "the weights alone exceed the free memory: shard over more GPUs"))
        if kv_bytes > 1 and min_mfs < 1:
            out.append(Fix("--kv-cache-dtype", "fp8_e4m3",
                           "halves the cell size (more tokens per GiB) once the budget is positive; it does not "
                           "fix a negative budget"))
        return out
    if tokens < context_len:
        need = min(context_len, derived_context_len(spec)) * cell
        f = mem.min_viable_fraction(pre_model_load_gib=pre_gib, available_gpu_gib=avail_gib, reserve_gib=reserve,
                                    need_bytes=need)
        if f / factor < 1:
            out.append(Fix("--mem-fraction-static", _ceil3(f / factor),
                           f"holds one full {context_len}-token request ({per_step} tokens per +0.01){scaled}"))
        out.append(Fix("--context-length", tokens, "cap requests to what the pool holds"))
        if kv_bytes > 1:
            out.append(Fix("--kv-cache-dtype", "fp8_e4m3", "fp8 KV doubles the tokens per GiB"))
    return out
