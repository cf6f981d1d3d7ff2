"""``kvscope perf`` use-case: compose traffic, all-reduce, decode, prefill and speculative models.

``build_perf(spec, gpu, PerfOptions(...)) -> PerfReport``; ``PerfReport.to_dict()`` is the JSON.
Top-level decode figures are for the first ``batches`` entry; ``by_batch`` has all of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from ..errors import FlagError
from ..hardware.gpus import GPU
from ..model.spec import ModelSpec
from ..model.weights import weights_per_rank
from .allreduce import CommunicatorChoice, Fabric, choose_communicator, fabric_for, PCIE_TOPOLOGIES
from .decode import DecodeStep, Hardware, StepSettings, decode_step
from .params import BANDWIDTH_EFFICIENCY, ENGINES, ModelParams, gpu_family, params_for
from .prefill import DEFAULT_CHUNKED_PREFILL_SIZE, PrefillEstimate, prefill
from .speculative import (DraftTraffic, SpeculativeEstimate, draft_traffic, eagle3_head, nextn_traffic,
                          resolve_spec_config, speculative)
from .traffic import KVTraffic, WeightTraffic, kv_traffic, weight_traffic

_FP8_GEMM = ("fp8", "modelopt-fp8")


@dataclass(frozen=True)
class PerfOptions:
    tp: int = 1
    batches: tuple[int, ...] = (1,)
    context_tokens: int = 2048
    kv_cache_dtype: str = "auto"
    allreduce: str = "auto"  # auto | nccl | custom
    pcie_topology: str | None = None  # switch | cross-socket (None: assumed from the GPU count)
    bandwidth_efficiency: float | None = None
    flops_efficiency: float | None = None
    fixed_overhead_ms: float | None = None
    allreduce_latency_us: float | None = None
    verify_allreduce_latency_us: float | None = None
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL_SIZE
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    accept_length: float | None = None
    accept_rate: float | None = None
    spec_overhead_ms: float = 0.0
    draft_config: Mapping[str, Any] | None = field(default=None, compare=False)
    draft_name: str | None = None
    observed_tokens_per_s: float | None = None  # measured plain-decode tok/s (first batch) to back-solve
    engine: str = "sglang"  # sglang | vllm: per-engine step cost (perf/params.py)
    ep: int = 1  # expert-parallel ranks (SGLang --ep-size, vLLM --enable-expert-parallel -> ep = tp)
    cuda_graph: bool = True  # False: --disable-cuda-graph / --enforce-eager


@dataclass(frozen=True)
class PerfReport:
    model: str
    gpu: GPU
    options: PerfOptions
    hardware: Hardware
    fabric: Fabric
    communicator: CommunicatorChoice
    settings: StepSettings
    weights: WeightTraffic
    kv: KVTraffic
    weights_per_gpu_bytes: int  # resident weights (for the fit warning)
    decode: tuple[DecodeStep, ...]
    prefill: PrefillEstimate
    speculative: SpeculativeEstimate | None
    notes: tuple[str, ...]
    implied_allreduce_latency_us: float | None = None  # from observed_tokens_per_s, holding the rest
    family: str = "nvidia-hbm"  # GPU family the parameters are taken from (perf/params.py)
    params: ModelParams | None = None  # central parameter values used
    decode_range: tuple[tuple[float, float], ...] = ()  # per batch: (slow, fast) aggregate tok/s
    ttft_s: float = 0.0  # prefill of the context as one prompt, plus the fixed first-token cost
    ttft_range_s: tuple[float, float] = (0.0, 0.0)  # (fast, slow)

    @property
    def primary(self) -> DecodeStep:
        return self.decode[0]

    def to_dict(self) -> dict:
        p = self.primary
        out: dict[str, Any] = {
            "model": self.model,
            "gpu": self.gpu.key,
            "tp": self.options.tp,
            "batch": p.batch,
            "context_tokens": p.context_tokens,
            "decode_tokens_per_s": p.decode_tokens_per_s,
            "per_stream_tokens_per_s": p.per_stream_tokens_per_s,
            "step_time_s": p.step_time_s,
            "memory_time_s": p.memory_time_s,
            "compute_time_s": p.compute_time_s,
            "fixed_overhead_s": p.fixed_overhead_s,
            "allreduce_count": p.allreduce_count,
            "allreduce_latency_us": p.allreduce.latency_us,
            "allreduce_time_s": p.allreduce_time_s,
            "weight_bytes_per_gpu_per_step": p.weight_bytes_per_gpu_per_step,
            "kv_bytes_per_gpu_per_step": p.kv_bytes_per_gpu_per_step,
            "experts_touched_per_layer": p.experts_touched_per_layer,
            "prefill_tokens_per_s": self.prefill.prefill_tokens_per_s,
            "bandwidth_efficiency": self.settings.bandwidth_efficiency,
            "bandwidth_efficiency_source": self.settings.bandwidth_efficiency_source,
            "estimated": True,
            "hardware": self.hardware.to_dict(),
            "fabric": self.fabric.to_dict(),
            "communicator": self.communicator.to_dict(),
            "settings": self.settings.to_dict(),
            "weights": self.weights.to_dict(),
            "kv": self.kv.to_dict(),
            "weights_per_gpu_bytes": self.weights_per_gpu_bytes,
            "by_batch": [d.to_dict() for d in self.decode],
            "prefill": self.prefill.to_dict(),
            "speculative": self.speculative.to_dict() if self.speculative else None,
            "notes": list(self.notes),
            "observed_tokens_per_s": self.options.observed_tokens_per_s,
            "implied_allreduce_latency_us": self.implied_allreduce_latency_us,
            "engine": self.options.engine,
            "gpu_family": self.family,
            "parameters": self.params.to_dict() if self.params else None,
            "decode_tokens_per_s_range": list(self.decode_range[0]) if self.decode_range else None,
            "by_batch_range": [list(r) for r in self.decode_range],
            "ttft_s": self.ttft_s,
            "ttft_s_range": list(self.ttft_range_s),
        }
        return out


def hardware_for(gpu: GPU, spec: ModelSpec) -> Hardware:
    """GEMM dtype: FP8 tensor cores for FP8 checkpoints (W8A8), BF16 otherwise (W4A16 kernels such as
    Marlin dequantize to BF16)."""
    use_fp8 = spec.quant.method in _FP8_GEMM or (spec.quant.method == "compressed-tensors" and spec.quant.weight_bits == 8)
    tflops, dt = (gpu.fp8_tflops, "fp8") if use_fp8 and gpu.fp8_tflops else (gpu.bf16_tflops, "bf16")
    return Hardware(gpu_key=gpu.key, mem_bandwidth_gbps=gpu.mem_bandwidth_gbps, tflops=tflops, tflops_dtype=dt,
                    source=f"GPU catalog ({gpu.key}): {gpu.source}", sm=gpu.sm)


def _check(options: PerfOptions, spec: ModelSpec) -> None:
    if options.tp < 1:
        raise FlagError("--tp must be >= 1", field="--tp", fix="e.g. --tp 8")
    if any(b < 1 for b in options.batches):
        raise FlagError("--batch values must be >= 1", field="--batch", fix="e.g. --batch 1,8,64")
    if options.context_tokens < 0:
        raise FlagError("--context must be >= 0", field="--context", fix="e.g. --context 2048")
    if options.bandwidth_efficiency is not None and not 0 < options.bandwidth_efficiency <= 1:
        raise FlagError("--bandwidth-efficiency must be in (0, 1]", field="--bandwidth-efficiency", fix="e.g. 0.7")
    if options.flops_efficiency is not None and not 0 < options.flops_efficiency <= 1:
        raise FlagError("--flops-efficiency must be in (0, 1]", field="--flops-efficiency", fix="e.g. 0.5")
    if options.allreduce not in ("auto", "nccl", "custom"):
        raise FlagError(f"unknown --allreduce {options.allreduce!r}", field="--allreduce", fix="auto, nccl or custom")
    if options.pcie_topology is not None and options.pcie_topology not in PCIE_TOPOLOGIES:
        raise FlagError(f"unknown --pcie-topology {options.pcie_topology!r}", field="--pcie-topology",
                        fix=" or ".join(PCIE_TOPOLOGIES))
    for name in ("allreduce_latency_us", "verify_allreduce_latency_us"):
        v = getattr(options, name)
        if v is not None and v < 0:
            flag = "--" + name.replace("_", "-")
            raise FlagError(f"{flag} must be >= 0", field=flag, fix="a measured latency in microseconds")
    if options.engine not in ENGINES:
        raise FlagError(f"unknown --engine {options.engine!r}", field="--engine", fix=" or ".join(ENGINES))
    if options.ep < 1 or (options.ep > 1 and options.tp % options.ep):
        raise FlagError(f"--ep {options.ep} must be >= 1 and divide --tp {options.tp}", field="--ep",
                        fix="e.g. --ep equal to --tp")
    if spec.num_attention_heads % options.tp:
        raise FlagError(f"--tp {options.tp} does not divide num_attention_heads={spec.num_attention_heads}",
                        field="--tp", fix="use a TP size that divides the attention heads")


def build_perf(spec: ModelSpec, gpu: GPU, options: PerfOptions) -> PerfReport:
    _check(options, spec)
    tp = options.tp
    notes: list[str] = []
    hw = hardware_for(gpu, spec)
    fabric = fabric_for(gpu, tp, options.pcie_topology)
    if fabric.pcie_topology and options.pcie_topology is None and tp > 1:
        notes.append(f"PCIe topology assumed {fabric.pcie_topology!r} for {tp} GPUs "
                     "(pass --pcie-topology switch|cross-socket)")
    comm = choose_communicator(gpu, fabric, options.allreduce)
    notes.extend(comm.notes)
    settings = step_settings(gpu, options, comm.used if comm.used != "none" else "nccl")
    w = weight_traffic(spec, tp)
    kv = kv_traffic(spec, options.context_tokens, tp, options.kv_cache_dtype)
    if kv.note:
        notes.append(kv.note)
    resident = weights_per_rank(spec, tp=tp, include_vision=spec.vision is not None).per_rank_bytes
    if resident > gpu.memory_bytes:
        notes.append(f"weights alone need {resident / 2**30:.1f} GiB per GPU, more than the "
                     f"{gpu.memory_mib / 1024:.1f} GiB of a {gpu.key}: this setup cannot load")
    if spec.moe and w.num_experts:
        notes.append("routed experts: expected distinct experts E(1-(1-k/E)^B) assume independent routing [E]")
    steps = tuple(decode_step(spec, w, kv, hw, fabric, settings, batch=b) for b in options.batches)
    kv_tok = kv.full_layer_bytes_per_token + kv.sliding_layer_bytes_per_token
    pre = prefill(spec, w, kv_tok, hw, fabric, settings, prompt_tokens=max(1, options.context_tokens),
                  chunk_tokens=options.chunked_prefill_size)
    rng = {b: replace(settings, params=params_for(gpu_family(gpu), options.engine, b, cuda_graph=options.cuda_graph,
                                                  overrides=_overrides(options)))
           for b in ("lo", "hi")}
    decode_range = tuple(
        (decode_step(spec, w, kv, hw, fabric, rng["hi"], batch=b).decode_tokens_per_s,
         decode_step(spec, w, kv, hw, fabric, rng["lo"], batch=b).decode_tokens_per_s) for b in options.batches)
    ttft_range = tuple(prefill(spec, w, kv_tok, hw, fabric, rng[b], prompt_tokens=max(1, options.context_tokens),
                               chunk_tokens=options.chunked_prefill_size).prefill_time_s for b in ("lo", "hi"))
    spec_est = None
    if options.speculative_algorithm:
        spec_est = _speculative(spec, gpu, options, w, kv, hw, fabric, settings, steps[0], notes)
    return PerfReport(model=spec.name, gpu=gpu, options=options, hardware=hw, fabric=fabric, communicator=comm,
                      settings=settings, weights=w, kv=kv, weights_per_gpu_bytes=resident, decode=steps,
                      prefill=pre, speculative=spec_est, notes=tuple(notes),
                      implied_allreduce_latency_us=implied_allreduce_latency_us(steps[0], options.observed_tokens_per_s),
                      family=gpu_family(gpu), params=settings.params, decode_range=decode_range,
                      ttft_s=pre.prefill_time_s, ttft_range_s=ttft_range)


def _overrides(options: PerfOptions) -> dict:
    """Measured values given on the command line replace the parameters they name."""
    o = {}
    if options.bandwidth_efficiency is not None:
        o["bandwidth_efficiency"] = options.bandwidth_efficiency
    if options.flops_efficiency is not None:
        o["flops_efficiency"] = options.flops_efficiency
    if options.fixed_overhead_ms is not None:
        o["step_fixed_ms"] = options.fixed_overhead_ms
    return o


def step_settings(gpu: GPU, options: PerfOptions, communicator: str) -> StepSettings:
    """The mechanism-model settings for this GPU family and engine (perf/params.py), measured overrides applied."""
    fam = gpu_family(gpu)
    p = params_for(fam, options.engine, cuda_graph=options.cuda_graph, overrides=_overrides(options))
    eff = options.bandwidth_efficiency
    return StepSettings(
        bandwidth_efficiency=p.bandwidth_efficiency,
        bandwidth_efficiency_source=("given (--bandwidth-efficiency, measured)" if eff is not None
                                     else BANDWIDTH_EFFICIENCY[fam].source),
        flops_efficiency=p.flops_efficiency,
        flops_efficiency_source=("given (--flops-efficiency)" if options.flops_efficiency is not None
                                 else f"perf/params.py flops_efficiency[{fam}]"),
        fixed_overhead_s=0.0,  # the mechanism model adds params.step_fixed_ms (overridden by --fixed-overhead-ms)
        fixed_overhead_source=("given (--fixed-overhead-ms)" if options.fixed_overhead_ms is not None
                               else f"perf/params.py step_fixed_ms[{options.engine}]"),
        communicator=communicator, allreduce_latency_us=options.allreduce_latency_us, params=p, ep=options.ep,
        engine=options.engine)


def _speculative(spec: ModelSpec, gpu: GPU, options: PerfOptions, w: WeightTraffic, kv: KVTraffic, hw: Hardware,
                 fabric: Fabric, settings: StepSettings, base: DecodeStep, notes: list) -> SpeculativeEstimate:
    cfg = resolve_spec_config(options.speculative_algorithm, options.speculative_num_steps,
                              options.speculative_eagle_topk, options.speculative_num_draft_tokens)
    if cfg.algorithm == "NEXTN":
        if spec.num_nextn_predict_layers == 0:
            raise FlagError(f"{spec.name} has no MTP layers (num_nextn_predict_layers = 0)",
                            field="--speculative-algorithm", fix="use EAGLE3 with a draft model")
        draft = nextn_traffic(w, spec, options.tp, kv)
    elif cfg.algorithm == "NGRAM":
        draft = DraftTraffic(layer_bytes=0, fc_bytes=0, kv_bytes_per_token=0, num_allreduces=0,
                             hidden_size=spec.hidden_size)
    else:
        draft = draft_traffic(eagle3_head(spec, options.draft_config, options.draft_name), options.tp)
    if cfg.eagle_topk > 1 and options.accept_length is None:
        notes.append("tree drafts (topk > 1): the accept-rate formula assumes a chain; pass --accept-length")
    est = speculative(spec, w, kv, hw, fabric, settings, cfg, draft, base, batch=base.batch,
                      accept_length=options.accept_length, accept_rate=options.accept_rate,
                      verify_allreduce_latency_us=options.verify_allreduce_latency_us,
                      spec_overhead_s=options.spec_overhead_ms * 1e-3)
    if est.accept_length_assumed:
        notes.append(f"speculative: accept length assumed ({est.accepted_tokens_per_step:.2f}, range "
                     f"{est.accept_length_range[0]:.2f}-{est.accept_length_range[1]:.2f}); break-even "
                     f"{est.break_even_accept_length:.2f}")
    return est


def implied_allreduce_latency_us(step: DecodeStep, observed_tokens_per_s: float | None) -> float | None:
    """Per-all-reduce latency that makes the modelled step match an observed decode rate, holding the
    memory and fixed terms (shared/specs/perf.md §3.3: 89.5 tok/s -> ~43 us per collective)."""
    if not observed_tokens_per_s or not step.allreduce_count:
        return None
    rest = step.step_time_s - step.allreduce_time_s
    return (step.batch / observed_tokens_per_s - rest) / step.allreduce_count * 1e6


def options_dict(options: PerfOptions) -> dict:
    d = asdict(options)
    d.pop("draft_config", None)
    return d
