"""``kvscope perf`` use-case: compose traffic, all-reduce, decode, prefill and speculative models.

``build_perf(spec, gpu, PerfOptions(...)) -> PerfReport``; ``PerfReport.to_dict()`` is the JSON.
Top-level decode figures are for the first ``batches`` entry; ``by_batch`` has all of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..errors import FlagError
from ..hardware.gpus import GPU
from ..model.spec import ModelSpec
from ..model.weights import weights_per_rank
from .allreduce import CommunicatorChoice, Fabric, choose_communicator, fabric_for, PCIE_TOPOLOGIES
from .decode import (BANDWIDTH_EFFICIENCY_SOURCE, DEFAULT_BANDWIDTH_EFFICIENCY, DEFAULT_FIXED_OVERHEAD_S,
                     FIXED_OVERHEAD_SOURCE, DecodeStep, Hardware, StepSettings, decode_step)
from .prefill import DEFAULT_CHUNKED_PREFILL_SIZE, PrefillEstimate, prefill
from .speculative import (SpeculativeEstimate, draft_traffic, eagle3_head, nextn_traffic, resolve_spec_config,
                          speculative)
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
        }
        return out


def hardware_for(gpu: GPU, spec: ModelSpec) -> Hardware:
    """GEMM dtype: FP8 tensor cores for FP8 checkpoints (W8A8), BF16 otherwise (W4A16 kernels such as
    Marlin dequantize to BF16)."""
    use_fp8 = spec.quant.method in _FP8_GEMM or (spec.quant.method == "compressed-tensors" and spec.quant.weight_bits == 8)
    tflops, dt = (gpu.fp8_tflops, "fp8") if use_fp8 and gpu.fp8_tflops else (gpu.bf16_tflops, "bf16")
    return Hardware(gpu_key=gpu.key, mem_bandwidth_gbps=gpu.mem_bandwidth_gbps, tflops=tflops, tflops_dtype=dt,
                    source=f"GPU catalog ({gpu.key}): {gpu.source}")


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
    eff = options.bandwidth_efficiency
    settings = StepSettings(
        bandwidth_efficiency=eff if eff is not None else DEFAULT_BANDWIDTH_EFFICIENCY,
        bandwidth_efficiency_source=("given (--bandwidth-efficiency, measured)" if eff is not None
                                     else BANDWIDTH_EFFICIENCY_SOURCE),
        fixed_overhead_s=(options.fixed_overhead_ms * 1e-3 if options.fixed_overhead_ms is not None
                          else DEFAULT_FIXED_OVERHEAD_S),
        fixed_overhead_source=("given (--fixed-overhead-ms)" if options.fixed_overhead_ms is not None
                               else FIXED_OVERHEAD_SOURCE),
        communicator=comm.used if comm.used != "none" else "nccl",
        allreduce_latency_us=options.allreduce_latency_us,
        **({"flops_efficiency": options.flops_efficiency, "flops_efficiency_source": "given (--flops-efficiency)"}
           if options.flops_efficiency is not None else {}),
    )
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
    pre = prefill(spec, w, kv.full_layer_bytes_per_token + kv.sliding_layer_bytes_per_token, hw, fabric, settings,
                  prompt_tokens=max(1, options.context_tokens), chunk_tokens=options.chunked_prefill_size)
    spec_est = None
    if options.speculative_algorithm:
        cfg = resolve_spec_config(options.speculative_algorithm, options.speculative_num_steps,
                                  options.speculative_eagle_topk, options.speculative_num_draft_tokens)
        if cfg.algorithm == "NEXTN":
            if spec.num_nextn_predict_layers == 0:
                raise FlagError(f"{spec.name} has no MTP layers (num_nextn_predict_layers = 0)",
                                field="--speculative-algorithm", fix="use EAGLE3 with a draft model")
            draft = nextn_traffic(w, spec, tp, kv)
        else:
            draft = draft_traffic(eagle3_head(spec, options.draft_config, options.draft_name), tp)
        if cfg.eagle_topk > 1 and options.accept_length is None:
            notes.append("tree drafts (topk > 1): the accept-rate formula assumes a chain; pass --accept-length")
        spec_est = speculative(spec, w, kv, hw, fabric, settings, cfg, draft, steps[0], batch=steps[0].batch,
                               accept_length=options.accept_length, accept_rate=options.accept_rate,
                               verify_allreduce_latency_us=options.verify_allreduce_latency_us,
                               spec_overhead_s=options.spec_overhead_ms * 1e-3)
    return PerfReport(model=spec.name, gpu=gpu, options=options, hardware=hw, fabric=fabric, communicator=comm,
                      settings=settings, weights=w, kv=kv, weights_per_gpu_bytes=resident, decode=steps,
                      prefill=pre, speculative=spec_est, notes=tuple(notes),
                      implied_allreduce_latency_us=implied_allreduce_latency_us(steps[0], options.observed_tokens_per_s))


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
