"""``kvscope plan --engine vllm``: compose model + GPU + flags + release into a vLLM startup Timeline.

``plan_vllm(spec, gpu, flags, version, measured)`` runs vLLM's startup as named stages, each a
function returning a frozen record, each the function the conformance suite compares with vLLM's
own code (named in brackets):

1. settle args      ``settle_args``             -> VllmArgs     [args.resolve_args, backend, max_len]
2. weights          ``load_weights``            -> Estimate per stage [model/weights.py]
3. profile terms    ``profile_terms``           -> ProfileTerms [memory.*_estimate]
4. KV layout (cell) ``memory.model_kv``         -> ModelKV      [kv_cache: specs, groups, pages]
5. available memory ``available_memory``        -> Budget       [memory.request_memory / available_kv_cache_bytes]
6. pools/capacity   ``memory.capacity_from_available`` -> KVCapacity [kv_cache.kv_cache_configs]
7. graphs           ``graphs_check``            -> GraphsCheck  [memory.mamba_blocks_check]
8. verdict          ``verdict``                 -> Verdict      (error, warnings, fixes)
9. ranks            ``ranks``                   -> RankTimelines with a ``VllmDecision`` each

Measured mode: ``VllmMeasured`` figures (GiB as the log prints them) replace single estimates;
``available_kv_cache_gib`` makes the block / token / concurrency arithmetic exact. The CLI edges
(argparse) are in ``commands/vllm_flags.py``, the text in ``report/vllm_text.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...errors import FlagError
from ...hardware.gpus import GPU
from ...hardware.overhead import communicators, cuda_context, custom_all_reduce_enabled
from ...model.spec import ModelSpec
from ...model.weights import weights_per_rank
from ...timeline import (PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_WEIGHTS, PHASE_PROFILE, Fix,
                         Phase, RankTimeline, Timeline)
from ...units import gib_to_bytes
from . import kv_cache as kvc
from . import memory as mem
from .args import VllmArgs, VllmFlags, resolve_args
from .backend import backend_inputs, mxfp4_moe_backend
from .decision import VllmDecision, VllmKVCacheGroup, VllmPlanExtra
from .deepseek_v4 import notes as dsv4_notes
from .max_len import derive_max_model_len
from .release import VersionTraits, version_traits


@dataclass(frozen=True)
class VllmMeasured:
    """Figures read from a vLLM log (GiB as printed), replacing kvscope's estimates."""

    available_kv_cache_gib: float | None = None  # "Available KV cache memory: X GiB"
    weights_gib: float | None = None  # "Model loading took X GiB"
    activation_peak_gib: float | None = None  # "torch peak memory increase"
    non_torch_gib: float | None = None  # "non-torch forward increase memory"
    cudagraph_gib: float | None = None  # "Estimated CUDA graph memory: X GiB total"
    initial_free_gib: float | None = None  # "Initial free memory: X GiB"
    total_gib: float | None = None  # CUDA-visible total (mem_get_info)


@dataclass(frozen=True)
class ProfileTerms:
    """The figures ``determine_available_memory`` measures (estimated here unless measured)."""

    total_bytes: int  # CUDA-visible total
    initial_free: mem.Estimate  # free at init_snapshot
    weights: tuple[mem.Estimate, ...]  # per PP stage
    activation_peak: tuple[mem.Estimate, ...]  # per PP stage (the sampler only on the last)
    non_torch: mem.Estimate
    cudagraph: mem.Estimate


@dataclass(frozen=True)
class Budget:
    """``request_memory`` + ``determine_available_memory`` per PP stage."""

    requested: int | float  # request_memory()'s budget
    request_error: str | None  # "Free memory on device ... is less than desired ..." (None: fits)
    available: tuple[mem.AvailableKV, ...]  # memory.available_kv_cache_bytes per PP stage
    available_bytes: tuple[int, ...]  # what the KV planner gets per stage (the measured figure when given)


@dataclass(frozen=True)
class GraphsCheck:
    """The CUDA-graph stage: the mamba blocks vs ``max_num_seqs`` check (``memory.mamba_blocks_check``)."""

    error: str | None
    warning: str | None


@dataclass(frozen=True)
class Verdict:
    error: str | None  # the first error of the start (request, admission, graphs)
    warnings: tuple[str, ...]
    fixes: tuple[Fix, ...]


def plan_vllm(spec: ModelSpec, gpu: GPU, flags: VllmFlags, version: str | None = None,
              measured: VllmMeasured | None = None) -> Timeline:
    """Simulate one vLLM start (per DP engine; DP ranks are separate engines with the same numbers)."""
    measured = measured or VllmMeasured()
    traits = version_traits(version)
    a = settle_args(spec, gpu, flags, traits)
    weights = load_weights(spec, a, measured, gpu)
    terms = profile_terms(spec, gpu, a, measured, weights)
    kv = mem.model_kv(spec, a, a.max_model_len)
    budget = available_memory(a, terms, measured)
    cap = mem.capacity_from_available(list(budget.available_bytes), kv, spec, a, a.max_model_len)
    graphs = graphs_check(kv, a, cap)
    v = verdict(spec, gpu, a, terms, kv, budget, cap, graphs, measured)
    estimated = [e.name for e in (terms.initial_free, terms.non_torch, terms.cudagraph, *terms.weights[:1],
                                  *terms.activation_peak[:1]) if e.estimated]
    if measured.available_kv_cache_gib is None and estimated:
        estimated.append("available_kv_cache_bytes")
    plan0 = kv.workers[0].plan
    starts = v.error is None
    return Timeline(
        source="plan", engine="vllm", engine_version=traits.version, model=spec.name, gpu=gpu.name,
        starts=starts, error=v.error, kv_cache_tokens=cap.kv_cache_tokens, max_running_requests=a.max_num_seqs,
        kv_cell_bytes=plan0.bytes_per_block // max(plan0.min_block_size, 1) if plan0.groups else 0,
        kv_cache_bytes=cap.num_gpu_blocks * plan0.bytes_per_block if starts else None,
        weights_bytes=terms.weights[0].bytes, ranks=ranks(a, kv, terms, budget, cap), fix=v.fixes,
        extra=plan_extra(a, kv, budget, cap), warnings=v.warnings, estimated=tuple(estimated),
    )


# ---------------------------------------------------------------------------------------------
# Stages


def settle_args(spec: ModelSpec, gpu: GPU, flags: VllmFlags, traits: VersionTraits) -> VllmArgs:
    """Flags -> ``VllmArgs`` for this release and GPU (``args.resolve_args``: defaults, block size and
    backend, ``max_model_len`` derived from the HF config); a PP stage must hold a layer."""
    pp = flags.pipeline_parallel_size or 1
    if pp > spec.num_hidden_layers:
        raise FlagError(f"pipeline_parallel_size {pp} exceeds num_hidden_layers {spec.num_hidden_layers}: a "
                        "stage would hold no layer", field="--pipeline-parallel-size",
                        fix=f"use at most {spec.num_hidden_layers} stages")
    return resolve_args(flags, traits=traits, model_max_len=spec.max_position_embeddings,
                        gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name,
                        is_mla=spec.is_mla or spec.dsv4 is not None,  # DeepSeek-V4: use_mla, fp8_ds_mla
                        is_hybrid_mamba=spec.mamba is not None and spec.num_kv_layers > 0,
                        num_attention_heads=spec.num_attention_heads, gpu_sm=gpu.sm,
                        is_sparse_mla=spec.has_dsa_indexer, gpu_vendor=gpu.vendor, **backend_inputs(spec),
                        derived_max_len=derive_max_model_len(dict(spec.length_config), traits)
                        if spec.length_config else None)


def _capability(sm: str) -> tuple[int, int] | None:
    """"sm90" -> (9, 0), "sm103" -> (10, 3); None for AMD / unknown archs."""
    digits = sm[2:] if sm.startswith("sm") else ""
    return (int(digits[:-1]), int(digits[-1])) if digits.isdigit() and len(digits) >= 2 else None


def load_weights(spec: ModelSpec, a: VllmArgs, measured: VllmMeasured,
                 gpu: GPU | None = None) -> tuple[mem.Estimate, ...]:
    """Per PP stage "Model loading took" (torch-allocated weights), estimated by model/weights.py.
    DP: experts are sharded over dp x tp (``FusedMoEParallelConfig.make``), attention is not."""
    if measured.weights_gib is not None:
        return (mem.measured("weights", gib_to_bytes(measured.weights_gib)),) * a.pp
    amd = gpu is not None and gpu.vendor == "amd"
    w = weights_per_rank(spec, tp=a.tp, pp=a.pp, ep=a.tp if a.ep else 1,
                         include_mtp=a.speculative_method == "mtp", engine="vllm",
                         device="rocm" if amd else "cuda",
                         mxfp4_backend=mxfp4_moe_backend(a.traits, _capability(gpu.sm) if gpu else None,
                                                         "amd" if amd else "nvidia"))
    stages = list(getattr(w, "per_stage_bytes", None) or [w.per_rank_bytes] * a.pp)
    if a.dp > 1 and spec.moe is not None:
        experts = w.bytes_of("experts") // (a.tp * a.pp)
        stages = [s - experts + experts // a.dp for s in stages]
    return tuple(mem.Estimate("weights", s, int(s * 0.98), int(s * 1.1), True, w.source) for s in stages)


def _est(name: str, gib: float | None, fallback: mem.Estimate) -> mem.Estimate:
    return fallback if gib is None else mem.measured(name, gib_to_bytes(gib))


def _init_free(gpu: GPU, a: VllmArgs, total: int, measured: VllmMeasured) -> mem.Estimate:
    if measured.initial_free_gib is not None:
        return mem.measured("initial_free", gib_to_bytes(measured.initial_free_gib))
    world = a.tp * a.pp
    ctx = cuda_context(gpu)
    comm = communicators(gpu, world, custom_all_reduce_enabled(gpu, a.tp), engine="vllm")
    used = ctx.estimate_bytes + comm.estimate_bytes
    return mem.Estimate("initial_free", total - used, total - ctx.high_bytes - comm.high_bytes,
                        total - ctx.low_bytes - comm.low_bytes, True,
                        f"CUDA total - {ctx.name} - {comm.name} (hardware/overhead.py estimates)")


def profile_terms(spec: ModelSpec, gpu: GPU, a: VllmArgs, measured: VllmMeasured,
                  weights: tuple[mem.Estimate, ...]) -> ProfileTerms:
    """The profile run's terms: memory.non_torch_estimate / cudagraph_estimate /
    activation_peak_estimate (the sampler on the last PP stage), each replaced when measured."""
    total = gib_to_bytes(measured.total_gib) if measured.total_gib is not None else gpu.cuda_total_bytes
    free0 = _init_free(gpu, a, total, measured)
    non_torch = _est("non_torch", measured.non_torch_gib, mem.non_torch_estimate(gpu, a))
    cudagraph = _est("cudagraph", measured.cudagraph_gib, mem.cudagraph_estimate(spec, a))
    acts = tuple(_est("activation_peak", measured.activation_peak_gib,
                      mem.activation_peak_estimate(spec, a, is_last_pp_stage=(r == a.pp - 1))) for r in range(a.pp))
    return ProfileTerms(total, free0, weights, acts, non_torch, cudagraph)


def available_memory(a: VllmArgs, terms: ProfileTerms, measured: VllmMeasured) -> Budget:
    """``request_memory`` (memory.requested_memory_bytes / request_memory_error), then per PP stage
    ``determine_available_memory`` (memory.available_kv_cache_bytes); a measured "Available KV cache
    memory" replaces what the planner gets."""
    t = a.traits
    requested = mem.requested_memory_bytes(terms.total_bytes, a.gpu_memory_utilization, t)
    error = None
    if terms.initial_free.bytes < requested:
        error = mem.request_memory_error(terms.initial_free.bytes, terms.total_bytes, a.gpu_memory_utilization,
                                         requested, t)
    cudagraph = terms.cudagraph.bytes if t.cudagraph_estimate_profiled else 0
    avails = tuple(mem.available_kv_cache_bytes(requested, terms.weights[r].bytes, terms.activation_peak[r].bytes,
                                                terms.non_torch.bytes, cudagraph, t, a.kv_cache_memory_bytes)
                   for r in range(a.pp))
    given = tuple(av.available_kv_cache_bytes for av in avails)
    if measured.available_kv_cache_gib is not None:
        given = (gib_to_bytes(measured.available_kv_cache_gib),) * a.pp
    return Budget(requested, error, avails, given)


def graphs_check(kv: mem.ModelKV, a: VllmArgs, cap: mem.KVCapacity) -> GraphsCheck:
    """CUDA-graph capture after the KV cache: with mamba layers, FULL decode graphs need one mamba
    block per sequence (memory.mamba_blocks_check: v0.20.2+ raises, v0.19 caps with a warning)."""
    return GraphsCheck(*mem.mamba_blocks_check(kv, a, cap.num_gpu_blocks))


def verdict(spec: ModelSpec, gpu: GPU, a: VllmArgs, terms: ProfileTerms, kv: mem.ModelKV, budget: Budget,
            cap: mem.KVCapacity, graphs: GraphsCheck, measured: VllmMeasured) -> Verdict:
    """The first error (request, admission check, graphs), the warnings and the fixes."""
    warnings = [f"{spec.name}: {n}" for n in spec.assumed]
    if spec.dsv4 is not None:
        warnings += dsv4_notes(spec, a)
    if kv.num_padding_layers:
        warnings.append(f"Add {kv.num_padding_layers} padding layers (hybrid KV groups)")
    if a.speculative_method and a.speculative_method not in ("mtp", "ngram"):
        warnings.append("draft-model weights and KV are not modelled (pass --weights-gib to include them)")
    if graphs.warning:
        warnings.append(graphs.warning)
    error = budget.request_error or cap.error or graphs.error
    fixes = _fixes(spec, a, terms, budget, cap, kv, error, graphs.error)
    return Verdict(error, tuple(warnings), tuple(fixes))


def ranks(a: VllmArgs, kv: mem.ModelKV, terms: ProfileTerms, budget: Budget,
          cap: mem.KVCapacity) -> tuple[RankTimeline, ...]:
    """Per rank: the phases (free memory before / after each) and the ``VllmDecision``; the TP ranks of
    one PP stage are identical."""
    out = []
    for r in range(a.pp):
        phases = _phases(a, kv, terms, budget, cap, r)
        decision = _decision(a, kv, terms, budget, cap, r)
        out += [RankTimeline(rank=r * a.tp + t, phases=phases, decision=decision) for t in range(a.tp)]
    return tuple(out)


def _phases(a: VllmArgs, kv: mem.ModelKV, terms: ProfileTerms, budget: Budget, cap: mem.KVCapacity,
            r: int) -> tuple[Phase, ...]:
    w, act, non_torch, cudagraph = terms.weights[r], terms.activation_peak[r], terms.non_torch, terms.cudagraph
    plan = kv.workers[r].plan
    f_init = terms.initial_free.bytes
    f_load = f_init - w.bytes
    f_prof = f_load - non_torch.bytes  # activations are freed; non-torch growth stays
    f_kv = f_prof - cap.num_gpu_blocks * plan.bytes_per_block
    f_graph = f_kv - cudagraph.bytes
    kv_estimated = budget.available[r].available_kv_cache_bytes != budget.available_bytes[r] or w.estimated
    outside = "" if a.traits.cudagraph_estimate_applied else " (outside the budget)"
    return (
        Phase(PHASE_INIT, None, f_init, terms.initial_free.estimated, "CUDA context + NCCL before init_snapshot"),
        Phase(PHASE_LOAD_WEIGHTS, f_init, f_load, w.estimated, "Model loading took"),
        Phase(PHASE_PROFILE, f_load, f_prof, act.estimated or non_torch.estimated,
              f"profile_run at {a.max_num_batched_tokens} tokens (activation peak freed)"),
        Phase(PHASE_KV_ALLOC, f_prof, f_kv, kv_estimated, f"{cap.num_gpu_blocks} blocks x {plan.bytes_per_block} B"),
        Phase(PHASE_CUDA_GRAPH, f_kv, f_graph, cudagraph.estimated, "captured after the KV cache" + outside),
    )


def _decision(a: VllmArgs, kv: mem.ModelKV, terms: ProfileTerms, budget: Budget, cap: mem.KVCapacity,
              r: int) -> VllmDecision:
    w, act, av = terms.weights[r], terms.activation_peak[r], budget.available[r]
    return VllmDecision(
        requested_memory_bytes=int(budget.requested), gpu_memory_utilization=a.gpu_memory_utilization,
        initial_free_bytes=terms.initial_free.bytes, weights_bytes=w.bytes, activation_peak_bytes=act.bytes,
        activation_peak_bounds=(act.low_bytes, act.high_bytes), non_torch_bytes=terms.non_torch.bytes,
        cudagraph_estimate_bytes=terms.cudagraph.bytes, cudagraph_applied_bytes=av.cudagraph_applied_bytes,
        non_kv_cache_memory_bytes=av.non_kv_cache_bytes, available_kv_cache_bytes=budget.available_bytes[r],
        formula=av.formula, pp_layers=tuple(kv.workers[r].layers), bytes_per_block=kv.workers[r].plan.bytes_per_block,
        num_gpu_blocks=cap.num_gpu_blocks, kv_cache_tokens=cap.kv_cache_tokens, max_concurrency=cap.max_concurrency,
        needed_memory_bytes=cap.needed_memory_bytes, error=cap.error,
        sources={e.name: e.source for e in (terms.initial_free, w, act, terms.non_torch, terms.cudagraph)},
    )


def plan_extra(a: VllmArgs, kv: mem.ModelKV, budget: Budget, cap: mem.KVCapacity) -> VllmPlanExtra:
    plan0 = kv.workers[0].plan
    return VllmPlanExtra(
        num_gpu_blocks=cap.num_gpu_blocks, available_kv_cache_bytes=cap.available_kv_cache_bytes,
        max_concurrency=round(cap.max_concurrency, 4), max_model_len=cap.max_model_len,
        gpu_memory_utilization=a.gpu_memory_utilization, requested_memory_bytes=int(budget.requested),
        block_size=kv.layout.block_size, attention_backend=a.attention_backend,
        block_size_source=a.block_size_source, bytes_per_block=plan0.bytes_per_block,
        kv_cache_groups=tuple(VllmKVCacheGroup(g.spec.kind, len(g.layer_ids), g.spec.page_size_bytes,
                                               g.spec.block_size) for g in plan0.groups),
        max_num_batched_tokens=a.max_num_batched_tokens, kv_cache_dtype=a.kv_cache_dtype,
        tensor_parallel_size=a.tp, pipeline_parallel_size=a.pp, data_parallel_size=a.dp,
        estimated_max_model_len=cap.estimated_max_model_len,
    )


# ---------------------------------------------------------------------------------------------
# Fixes


def _round_up(x: float, step: float = 0.01) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 4)


def _fixes(spec: ModelSpec, a: VllmArgs, terms: ProfileTerms, budget: Budget, cap: mem.KVCapacity,
           kv: mem.ModelKV, error: str | None, mamba_err: str | None) -> list[Fix]:
    if error is None:
        return []
    total, free0 = terms.total_bytes, terms.initial_free.bytes
    if error.startswith("Free memory on device"):
        u = math.floor(free0 / total * 100) / 100
        return [Fix("--gpu-memory-utilization", u, f"only {kvc.format_gib(free0)} GiB is free at startup: "
                    f"the request ({a.gpu_memory_utilization} x total) must fit in it")]
    if mamba_err:
        return [Fix("--max-num-seqs", cap.num_gpu_blocks, "each decode sequence needs one Mamba cache block")]
    # the admission check's own figure (memory.capacity_from_available -> kv_cache.kv_cache_configs),
    # plus the null block it reserves from v0.30; an auto-fit that fits no token stops before the
    # check, so size that fix for the model's max_model_len
    one = cap.needed_memory_bytes or mem.capacity_from_available(
        [0] * a.pp, kv, spec, replace(a, max_model_len_auto=False), a.max_model_len).needed_memory_bytes
    needed = one + (max(w.plan.bytes_per_block for w in kv.workers) if a.traits.null_block_reserved else 0)
    fixes: list[Fix] = []
    if cap.estimated_max_model_len:
        fixes.append(Fix("--max-model-len", cap.estimated_max_model_len,
                         "the longest request that fits the available KV cache memory"))
    fixes += _memory_fixes(a, terms, needed)
    if mem.kv_dtype_bytes(spec, a.kv_cache_dtype) > 1 and (needed // 2) <= cap.check_memory_bytes:
        fixes.append(Fix("--kv-cache-dtype", "fp8", "halves the KV page size"))
    tp2 = a.tp * 2
    if spec.num_attention_heads % tp2 == 0 and not spec.is_mla:
        fixes.append(Fix("--tensor-parallel-size", tp2, "splits weights and KV heads over twice the GPUs"))
    return fixes


def _memory_fixes(a: VllmArgs, terms: ProfileTerms, needed: int) -> list[Fix]:
    """``--gpu-memory-utilization`` / ``--kv-cache-memory-bytes`` that give one max-length request."""
    mib = f"{math.ceil(needed / (1 << 20))}M"
    if a.kv_cache_memory_bytes is not None:
        return [Fix("--kv-cache-memory-bytes", mib, "the KV cache one max-length request needs")]
    total, free0 = terms.total_bytes, terms.initial_free.bytes
    non_kv = max(w.bytes for w in terms.weights) + max(x.bytes for x in terms.activation_peak) + terms.non_torch.bytes
    applied = terms.cudagraph.bytes if a.traits.cudagraph_estimate_applied else 0
    fixes = []
    u = _round_up((needed + non_kv + applied) / total)
    if u <= free0 / total and u <= 1:
        fixes.append(Fix("--gpu-memory-utilization", u,
                         f"gives {kvc.format_gib(needed)} GiB for one {a.max_model_len}-token request"))
    if free0 - non_kv - applied >= needed:
        fixes.append(Fix("--kv-cache-memory-bytes", mib, "size the KV cache directly (skips gpu_memory_utilization)"))
    return fixes


__all__ = ["Budget", "GraphsCheck", "ProfileTerms", "Verdict", "VllmFlags", "VllmMeasured", "available_memory",
           "graphs_check", "load_weights", "plan_extra", "plan_vllm", "profile_terms", "ranks", "settle_args",
           "verdict"]
