"""``kvscope plan --engine vllm``: compose model + GPU + flags + version into a vLLM startup Timeline.

Pure core: ``plan_vllm(spec, gpu, flags, version, measured)``. Edges: ``add_vllm_arguments`` /
``plan_vllm_from_args`` (argparse) and ``render_vllm`` (text). Measured mode: give
``available_kv_cache_gib`` as the log printed it and the block / token / concurrency arithmetic runs
on it exactly; ``weights_gib`` / ``activation_peak_gib`` / ``non_torch_gib`` / ``cudagraph_gib`` /
``initial_free_gib`` replace single estimates.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from typing import Any

from ...errors import FlagError
from ...hardware.gpus import GPU
from ...hardware.overhead import communicators, cuda_context, custom_all_reduce_enabled
from ...model.spec import ModelSpec
from ...model.weights import vllm_mxfp4_backend, weights_per_rank
from ...timeline import (PHASE_CUDA_GRAPH, PHASE_INIT, PHASE_KV_ALLOC, PHASE_LOAD_WEIGHTS, PHASE_PROFILE, Fix,
                         Phase, RankTimeline, Timeline)
from ...units import GiB, gib_to_bytes
from . import kv_cache as kvc
from . import memory as mem
from .args import (KV_CACHE_DTYPES, LATEST_VERSION, VllmArgs, VllmFlags, backend_inputs, parse_human_bytes,
                   resolve_args, version_traits, derive_max_model_len)


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


def _est(name: str, gib: float | None, fallback: mem.Estimate) -> mem.Estimate:
    return fallback if gib is None else mem.measured(name, gib_to_bytes(gib))


def _capability(sm: str) -> tuple[int, int] | None:
    """"sm90" -> (9, 0), "sm103" -> (10, 3); None for AMD / unknown archs."""
    digits = sm[2:] if sm.startswith("sm") else ""
    return (int(digits[:-1]), int(digits[-1])) if digits.isdigit() and len(digits) >= 2 else None


def _weights(spec: ModelSpec, a: VllmArgs, measured: VllmMeasured, gpu: GPU | None = None,
             version: str | None = None) -> list[mem.Estimate]:
    """Per PP stage "Model loading took" (torch-allocated weights), estimated by model/weights.py.
    DP: experts are sharded over dp x tp (``FusedMoEParallelConfig.make``), attention is not."""
    if measured.weights_gib is not None:
        return [mem.measured("weights", gib_to_bytes(measured.weights_gib))] * a.pp
    amd = gpu is not None and gpu.vendor == "amd"
    w = weights_per_rank(spec, tp=a.tp, pp=a.pp, ep=a.tp if a.ep else 1,
                         include_mtp=a.speculative_method == "mtp", engine="vllm",
                         device="rocm" if amd else "cuda",
                         mxfp4_backend=vllm_mxfp4_backend(version, _capability(gpu.sm) if gpu else None,
                                                          "amd" if amd else "nvidia"))
    stages = list(getattr(w, "per_stage_bytes", None) or [w.per_rank_bytes] * a.pp)
    if a.dp > 1 and spec.moe is not None:
        experts = w.bytes_of("experts") // (a.tp * a.pp)
        stages = [s - experts + experts // a.dp for s in stages]
    return [mem.Estimate("weights", s, int(s * 0.98), int(s * 1.1), True, w.source) for s in stages]


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


def plan_vllm(spec: ModelSpec, gpu: GPU, flags: VllmFlags, version: str | None = None,
              measured: VllmMeasured | None = None) -> Timeline:
    """Simulate one vLLM start (per DP engine; DP ranks are separate engines with the same numbers)."""
    measured = measured or VllmMeasured()
    traits = version_traits(version)
    pp = flags.pipeline_parallel_size or 1
    if pp > spec.num_hidden_layers:
        raise FlagError(f"pipeline_parallel_size {pp} exceeds num_hidden_layers {spec.num_hidden_layers}: a "
                        "stage would hold no layer", field="--pipeline-parallel-size",
                        fix=f"use at most {spec.num_hidden_layers} stages")
    a = resolve_args(flags, traits=traits, model_max_len=spec.max_position_embeddings,
                     gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name,
                     is_mla=spec.is_mla or spec.dsv4 is not None,  # DeepSeek-V4: use_mla, fp8_ds_mla
                     is_hybrid_mamba=spec.mamba is not None and spec.num_kv_layers > 0,
                     num_attention_heads=spec.num_attention_heads, gpu_sm=gpu.sm,
                     is_sparse_mla=spec.has_dsa_indexer, gpu_vendor=gpu.vendor, **backend_inputs(spec),
                     derived_max_len=derive_max_model_len(dict(spec.length_config), traits)
                     if spec.length_config else None)
    total = gib_to_bytes(measured.total_gib) if measured.total_gib is not None else gpu.cuda_total_bytes
    free0 = _init_free(gpu, a, total, measured)
    requested = mem.requested_memory_bytes(total, a.gpu_memory_utilization, traits)
    weights = _weights(spec, a, measured, gpu, version)
    non_torch = _est("non_torch", measured.non_torch_gib, mem.non_torch_estimate(gpu, a))
    cudagraph = _est("cudagraph", measured.cudagraph_gib, mem.cudagraph_estimate(spec, a))
    acts = [_est("activation_peak", measured.activation_peak_gib,
                 mem.activation_peak_estimate(spec, a, is_last_pp_stage=(r == a.pp - 1))) for r in range(a.pp)]
    kv = mem.model_kv(spec, a, a.max_model_len)
    warnings: list[str] = [f"{spec.name}: {n}" for n in spec.assumed]
    if spec.dsv4 is not None:
        from .deepseek_v4 import notes as dsv4_notes
        warnings += dsv4_notes(spec, a)
    if kv.num_padding_layers:
        warnings.append(f"Add {kv.num_padding_layers} padding layers (hybrid KV groups)")
    if a.speculative_method and a.speculative_method not in ("mtp", "ngram"):
        warnings.append("draft-model weights and KV are not modelled (pass --weights-gib to include them)")
    error = None
    if free0.bytes < requested:
        error = mem.request_memory_error(free0.bytes, total, a.gpu_memory_utilization, requested, traits)
    avails = []
    for r in range(a.pp):
        av = mem.available_kv_cache_bytes(requested, weights[r].bytes, acts[r].bytes, non_torch.bytes,
                                          cudagraph.bytes if traits.cudagraph_estimate_profiled else 0,
                                          traits, a.kv_cache_memory_bytes)
        avails.append(av)
    avail_bytes = [av.available_kv_cache_bytes for av in avails]
    if measured.available_kv_cache_gib is not None:
        avail_bytes = [gib_to_bytes(measured.available_kv_cache_gib)] * a.pp
    cap = mem.capacity_from_available(avail_bytes, kv, spec, a, a.max_model_len)
    error = error or cap.error
    mamba_err, mamba_warn = mem.mamba_blocks_check(kv, a, cap.num_gpu_blocks)
    if mamba_warn:
        warnings.append(mamba_warn)
    error = error or mamba_err
    starts = error is None
    ranks = _ranks(a, kv, free0, weights, acts, non_torch, cudagraph, avails, avail_bytes, cap, requested, traits)
    fixes = _fixes(spec, a, gpu, total, free0.bytes, requested, weights, acts, non_torch, cudagraph, cap, kv,
                   error, mamba_err, measured)
    estimated_names = [e.name for e in (free0, non_torch, cudagraph, *weights[:1], *acts[:1]) if e.estimated]
    if measured.available_kv_cache_gib is None and estimated_names:
        estimated_names.append("available_kv_cache_bytes")
    plan0 = kv.workers[0].plan
    kv_alloc = cap.num_gpu_blocks * plan0.bytes_per_block if starts else None
    extra: dict[str, Any] = {
        "num_gpu_blocks": cap.num_gpu_blocks,
        "available_kv_cache_bytes": cap.available_kv_cache_bytes,
        "max_concurrency": round(cap.max_concurrency, 4),
        "max_model_len": cap.max_model_len,
        "gpu_memory_utilization": a.gpu_memory_utilization,
        "requested_memory_bytes": int(requested),
        "block_size": kv.layout.block_size,
        "attention_backend": a.attention_backend, "block_size_source": a.block_size_source,
        "bytes_per_block": plan0.bytes_per_block,
        "kv_cache_groups": [{"kind": g.spec.kind, "num_layers": len(g.layer_ids), "page_size_bytes":
                             g.spec.page_size_bytes, "block_size": g.spec.block_size} for g in plan0.groups],
        "max_num_batched_tokens": a.max_num_batched_tokens,
        "kv_cache_dtype": a.kv_cache_dtype,
        "tensor_parallel_size": a.tp, "pipeline_parallel_size": a.pp, "data_parallel_size": a.dp,
    }
    if cap.estimated_max_model_len is not None:
        extra["estimated_max_model_len"] = cap.estimated_max_model_len
    per_token = plan0.bytes_per_block // max(plan0.min_block_size, 1) if plan0.groups else 0
    return Timeline(
        source="plan", engine="vllm", engine_version=traits.version, model=spec.name, gpu=gpu.name,
        starts=starts, error=error, kv_cache_tokens=cap.kv_cache_tokens, max_running_requests=a.max_num_seqs,
        kv_cell_bytes=per_token, kv_cache_bytes=kv_alloc, weights_bytes=weights[0].bytes,
        ranks=ranks, fix=tuple(fixes), extra=extra, warnings=tuple(warnings), estimated=tuple(estimated_names),
    )


def _ranks(a: VllmArgs, kv: mem.ModelKV, free0: mem.Estimate, weights, acts, non_torch, cudagraph, avails,
           avail_bytes, cap: mem.KVCapacity, requested, traits) -> tuple[RankTimeline, ...]:
    out = []
    for r in range(a.pp):
        w, act = weights[r], acts[r]
        plan = kv.workers[r].plan
        f_init = free0.bytes
        f_load = f_init - w.bytes
        f_prof = f_load - non_torch.bytes  # activations are freed; non-torch growth stays
        kv_bytes = cap.num_gpu_blocks * plan.bytes_per_block
        f_kv = f_prof - kv_bytes
        f_graph = f_kv - cudagraph.bytes
        phases = (
            Phase(PHASE_INIT, None, f_init, free0.estimated, "CUDA context + NCCL before init_snapshot"),
            Phase(PHASE_LOAD_WEIGHTS, f_init, f_load, w.estimated, "Model loading took"),
            Phase(PHASE_PROFILE, f_load, f_prof, act.estimated or non_torch.estimated,
                  f"profile_run at {a.max_num_batched_tokens} tokens (activation peak freed)"),
            Phase(PHASE_KV_ALLOC, f_prof, f_kv, avails[r].available_kv_cache_bytes != avail_bytes[r] or w.estimated,
                  f"{cap.num_gpu_blocks} blocks x {plan.bytes_per_block} B"),
            Phase(PHASE_CUDA_GRAPH, f_kv, f_graph, cudagraph.estimated,
                  "captured after the KV cache" + ("" if traits.cudagraph_estimate_applied else " (outside the budget)")),
        )
        decision = {
            "requested_memory_bytes": int(requested),
            "gpu_memory_utilization": a.gpu_memory_utilization,
            "initial_free_bytes": free0.bytes,
            "weights_bytes": w.bytes,
            "activation_peak_bytes": act.bytes,
            "activation_peak_bounds": [act.low_bytes, act.high_bytes],
            "non_torch_bytes": non_torch.bytes,
            "cudagraph_estimate_bytes": cudagraph.bytes,
            "cudagraph_applied_bytes": avails[r].cudagraph_applied_bytes,
            "non_kv_cache_memory_bytes": avails[r].non_kv_cache_bytes,
            "available_kv_cache_bytes": avail_bytes[r],
            "formula": avails[r].formula,
            "pp_layers": list(kv.workers[r].layers),
            "bytes_per_block": plan.bytes_per_block,
            "num_gpu_blocks": cap.num_gpu_blocks,
            "kv_cache_tokens": cap.kv_cache_tokens,
            "max_concurrency": cap.max_concurrency,
            "needed_memory_bytes": cap.needed_memory_bytes,
            "error": cap.error,
            "sources": {e.name: e.source for e in (free0, w, act, non_torch, cudagraph)},
        }
        for t in range(a.tp):
            out.append(RankTimeline(rank=r * a.tp + t, phases=phases, decision=decision))
    return tuple(out)


def _round_up(x: float, step: float = 0.01) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 4)


def _fixes(spec, a: VllmArgs, gpu: GPU, total: int, free0: int, requested, weights, acts, non_torch, cudagraph,
           cap: mem.KVCapacity, kv: mem.ModelKV, error: str | None, mamba_err: str | None,
           measured: VllmMeasured) -> list[Fix]:
    if error is None:
        return []
    fixes: list[Fix] = []
    t = a.traits
    if error.startswith("Free memory on device"):
        u = math.floor(free0 / total * 100) / 100
        fixes.append(Fix("--gpu-memory-utilization", u, f"only {kvc.format_gib(free0)} GiB is free at startup: "
                         f"the request ({a.gpu_memory_utilization} x total) must fit in it"))
        return fixes
    if mamba_err:
        fixes.append(Fix("--max-num-seqs", cap.num_gpu_blocks,
                         "each decode sequence needs one Mamba cache block"))
        return fixes
    # the admission check's own figure (memory.capacity_from_available -> kv_cache.kv_cache_configs),
    # plus the null block it reserves from v0.30; an auto-fit that fits no token stops before the
    # check, so size that fix for the model's max_model_len
    one = cap.needed_memory_bytes or mem.capacity_from_available(
        [0] * a.pp, kv, spec, replace(a, max_model_len_auto=False), a.max_model_len).needed_memory_bytes
    needed = one + (max(w.plan.bytes_per_block for w in kv.workers) if t.null_block_reserved else 0)
    non_kv = max(w.bytes for w in weights) + max(x.bytes for x in acts) + non_torch.bytes
    applied = cudagraph.bytes if t.cudagraph_estimate_applied else 0
    if cap.estimated_max_model_len:
        fixes.append(Fix("--max-model-len", cap.estimated_max_model_len,
                         "the longest request that fits the available KV cache memory"))
    if a.kv_cache_memory_bytes is None:
        u = _round_up((needed + non_kv + applied) / total)
        if u <= free0 / total and u <= 1:
            fixes.append(Fix("--gpu-memory-utilization", u,
                             f"gives {kvc.format_gib(needed)} GiB for one {a.max_model_len}-token request"))
        room = free0 - non_kv - applied
        if room >= needed:
            fixes.append(Fix("--kv-cache-memory-bytes", f"{math.ceil(needed / (1 << 20))}M",
                             "size the KV cache directly (skips gpu_memory_utilization)"))
    else:
        fixes.append(Fix("--kv-cache-memory-bytes", f"{math.ceil(needed / (1 << 20))}M",
                         "the KV cache one max-length request needs"))
    if mem.kv_dtype_bytes(spec, a.kv_cache_dtype) > 1:
        if (needed // 2) <= cap.check_memory_bytes:
            fixes.append(Fix("--kv-cache-dtype", "fp8", "halves the KV page size"))
    tp2 = a.tp * 2
    if spec.num_attention_heads % tp2 == 0 and not spec.is_mla:
        fixes.append(Fix("--tensor-parallel-size", tp2, "splits weights and KV heads over twice the GPUs"))
    return fixes


# ---------------------------------------------------------------------------------------------
# CLI edges


def _max_model_len(text: str) -> int:
    s = str(text).strip().lower()
    if s in ("auto", "-1"):
        return -1
    mult = 1
    if s and s[-1] in "km":
        mult = 1000 if s[-1] == "k" else 1000 ** 2
        s = s[:-1]
    try:
        return int(float(s) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid max_model_len {text!r} (an integer, 32k, -1 or auto)") from None


def _add(group, *names: str, **kw) -> None:
    """Add an option unless another engine's group already registered the same name (shared parser)."""
    existing = getattr(group, "_option_string_actions", {})
    if any(n in existing for n in names):
        return
    group.add_argument(*names, **kw)


def add_vllm_arguments(parser) -> None:
    """vLLM's own flag names (``vllm serve``) plus kvscope's measured inputs."""
    _add(parser, "--tensor-parallel-size", "-tp", dest="tensor_parallel_size", type=int, default=1)
    _add(parser, "--pipeline-parallel-size", "-pp", dest="pipeline_parallel_size", type=int, default=1)
    _add(parser, "--data-parallel-size", "-dp", dest="data_parallel_size", type=int, default=1)
    _add(parser, "--enable-expert-parallel", action="store_true")
    _add(parser, "--gpu-memory-utilization", type=float, default=None)
    _add(parser, "--max-model-len", type=_max_model_len, default=None, help="tokens, 32k, or -1/auto (auto-fit)")
    _add(parser, "--max-num-seqs", type=int, default=None)
    _add(parser, "--max-num-batched-tokens", type=int, default=None)
    _add(parser, "--kv-cache-dtype", default="auto", help=f"one of {', '.join(KV_CACHE_DTYPES)}")
    _add(parser, "--block-size", type=int, default=None)
    _add(parser, "--attention-backend", default=None, help="vLLM backend name, e.g. FLASHINFER_MLA (v0.19+)")
    _add(parser, "--enforce-eager", action="store_true")
    _add(parser, "--kv-cache-memory-bytes", default=None, help="bytes (40G = 40 GiB, 40g = 40e9)")
    _add(parser, "--num-gpu-blocks-override", type=int, default=None)
    _add(parser, "--speculative-config", default=None, help='JSON, e.g. {"method": "mtp", "num_speculative_tokens": 1}')
    _add(parser, "--enable-prefix-caching", dest="enable_prefix_caching", action="store_true", default=None)
    _add(parser, "--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    _add(parser, "--allow-long-max-model-len", action="store_true", help="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    _add(parser, "--available-kv-cache-gib", type=float, default=None,
         help="measured: 'Available KV cache memory: X GiB' (exact block/token arithmetic)")
    _add(parser, "--weights-gib", type=float, default=None, help="measured: 'Model loading took X GiB'")
    _add(parser, "--activation-peak-gib", type=float, default=None, help="measured: torch peak memory increase")
    _add(parser, "--non-torch-gib", type=float, default=None, help="measured: non-torch forward increase memory")
    _add(parser, "--cudagraph-gib", type=float, default=None, help="measured: 'Estimated CUDA graph memory'")
    _add(parser, "--initial-free-gib", type=float, default=None, help="measured: 'Initial free memory: X GiB'")


def _speculative(text: str | None) -> tuple[str | None, int]:
    if not text:
        return None, 0
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FlagError(f"--speculative-config is not JSON ({exc.msg})", field="--speculative-config",
                        fix='e.g. \'{"method": "mtp", "num_speculative_tokens": 1}\'') from None
    if not isinstance(cfg, dict):
        raise FlagError("--speculative-config must be a JSON object", field="--speculative-config", fix="{...}")
    method = cfg.get("method") or ("draft_model" if cfg.get("model") else None)
    n = int(cfg.get("num_speculative_tokens") or 0)
    return (str(method).lower() if method else None), n


def flags_from_args(args: argparse.Namespace) -> VllmFlags:
    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    method, nspec = _speculative(g("speculative_config"))
    kvmb = g("kv_cache_memory_bytes")
    return VllmFlags(
        tensor_parallel_size=g("tensor_parallel_size", 1) or 1,
        pipeline_parallel_size=g("pipeline_parallel_size", 1) or 1,
        data_parallel_size=g("data_parallel_size", 1) or 1,
        enable_expert_parallel=bool(g("enable_expert_parallel", False)),
        gpu_memory_utilization=g("gpu_memory_utilization"),
        max_model_len=g("max_model_len"),
        max_num_seqs=g("max_num_seqs"),
        max_num_batched_tokens=g("max_num_batched_tokens"),
        kv_cache_dtype=g("kv_cache_dtype", "auto") or "auto",
        block_size=g("block_size"), attention_backend=g("attention_backend"),
        enforce_eager=bool(g("enforce_eager", False)),
        kv_cache_memory_bytes=parse_human_bytes(kvmb) if kvmb is not None else None,
        num_gpu_blocks_override=g("num_gpu_blocks_override"),
        num_speculative_tokens=nspec, speculative_method=method,
        enable_prefix_caching=g("enable_prefix_caching"),
        allow_long_max_model_len=bool(g("allow_long_max_model_len", False)),
    )


def measured_from_args(args: argparse.Namespace) -> VllmMeasured:
    g = lambda name: getattr(args, name, None)  # noqa: E731
    return VllmMeasured(available_kv_cache_gib=g("available_kv_cache_gib"), weights_gib=g("weights_gib"),
                        activation_peak_gib=g("activation_peak_gib"), non_torch_gib=g("non_torch_gib"),
                        cudagraph_gib=g("cudagraph_gib"), initial_free_gib=g("initial_free_gib"))


def plan_vllm_from_args(args: argparse.Namespace, spec: ModelSpec, gpu: GPU) -> Timeline:
    return plan_vllm(spec, gpu, flags_from_args(args), getattr(args, "engine_version", None) or LATEST_VERSION,
                     measured_from_args(args))


def _gib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f} GiB"


def render_vllm(t: Timeline) -> str:
    """Readable text: budget, profile terms, KV groups, capacity, verdict, fixes (GiB as vLLM prints)."""
    x = t.extra
    d = t.ranks[0].decision if t.ranks else {}
    est = set(t.estimated)
    mark = lambda name: " (estimated)" if name in est else ""  # noqa: E731
    rows = [
        ("vLLM", f"{t.engine_version}  model {t.model}  GPU {t.gpu}"),
        ("parallel", f"tp {x.get('tensor_parallel_size')}  pp {x.get('pipeline_parallel_size')}  "
                     f"dp {x.get('data_parallel_size')} (per DP engine)"),
        ("requested memory", f"{_gib(d.get('requested_memory_bytes'))}  (gpu_memory_utilization "
                             f"{x.get('gpu_memory_utilization')} x total)"),
        ("initial free", _gib(d.get("initial_free_bytes")) + mark("initial_free")),
        ("Model loading took", _gib(d.get("weights_bytes")) + mark("weights")),
        ("torch peak increase", _gib(d.get("activation_peak_bytes")) + mark("activation_peak")
         + f"  at max_num_batched_tokens {x.get('max_num_batched_tokens')}"),
        ("non-torch increase", _gib(d.get("non_torch_bytes")) + mark("non_torch")),
        ("CUDA graph estimate", _gib(d.get("cudagraph_estimate_bytes")) + mark("cudagraph")
         + ("  (subtracted)" if d.get("cudagraph_applied_bytes") else "  (not subtracted)")),
        ("Available KV cache memory", _gib(x.get("available_kv_cache_bytes")) + mark("available_kv_cache_bytes")),
        ("formula", str(d.get("formula", ""))),
        ("block size", f"{x.get('block_size')} tokens, {x.get('bytes_per_block')} B per block, "
                       f"kv dtype {x.get('kv_cache_dtype')}"),
        ("attention backend", f"{x.get('attention_backend') or 'not modelled'} (block size: "
                              f"{x.get('block_size_source')})"),
    ]
    for i, g in enumerate(x.get("kv_cache_groups", ())):
        rows.append((f"  group {i}", f"{g['kind']}: {g['num_layers']} layers x {g['page_size_bytes']} B page "
                                     f"({g['block_size']} tokens)"))
    rows += [
        ("num_gpu_blocks", f"{x.get('num_gpu_blocks'):,}"),
        ("GPU KV cache size", f"{t.kv_cache_tokens:,} tokens" if t.kv_cache_tokens is not None else "-"),
        ("Maximum concurrency", f"{x.get('max_concurrency', 0):.2f}x for {x.get('max_model_len'):,} tokens per request"),
        ("max_num_seqs", str(t.max_running_requests)),
        ("starts", "yes" if t.starts else "NO"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    if t.error:
        lines.append(f"error: {t.error}")
    for f in t.fix:
        lines.append(f"fix: {f.flag} {f.value}  # {f.why}")
    for w in t.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


__all__ = ["VllmFlags", "VllmMeasured", "add_vllm_arguments", "plan_vllm", "plan_vllm_from_args", "render_vllm",
           "flags_from_args", "measured_from_args"]
