"""Named, sourced parameters of the step-time model, each with a plausible range.

Every parameter is a :class:`Param`: a central value, a range ``(lo, hi)`` that the output shows as
the uncertainty band, where the value comes from, and whether it was calibrated on the public
benchmark set (``benchmarks/perf_cases/``). Calibrated values were fitted by
``benchmarks/perf_accuracy.py --fit`` on the whole set; the accuracy it reports in
``docs/perf-accuracy.md`` is measured on held-out sources (each source refitted without itself),
never on the data a value was fitted to.

GPU families (``gpu_family``): achievable bandwidth and kernel floors differ by memory type and
vendor stack far more than by SKU, so parameters are per family, not per GPU:
``nvidia-hbm`` (H100/H200/H20/B200/B300/GB200), ``nvidia-ampere`` (A100/A800), ``nvidia-gddr`` (GeForce, RTX PRO, L40S, L4,
A10, A6000), ``amd`` (MI300X/MI325X/MI355X: ROCm kernels, AITER/triton).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Mapping

from ..hardware.gpus import GPU

FAMILIES = ("nvidia-hbm", "nvidia-ampere", "nvidia-gddr", "amd")
ENGINES = ("sglang", "vllm")


def gpu_family(gpu: GPU) -> str:
    """Memory type and vendor stack of a catalog GPU."""
    if gpu.vendor == "amd":
        return "amd"
    if gpu.sm == "sm80":  # A100 / A800: no FP8, older kernel generation
        return "nvidia-ampere"
    if gpu.interconnect.kind == "pcie" and gpu.key != "h100-pcie":
        return "nvidia-gddr"
    return "nvidia-hbm"


def vendor_of(family: str) -> str:
    """Kernel floors and GEMM efficiency are per vendor stack (CUDA vs ROCm), bandwidth per family."""
    return "amd" if family == "amd" else "nvidia"


@dataclass(frozen=True)
class Param:
    name: str
    value: float
    lo: float
    hi: float
    unit: str
    source: str
    calibrated: bool = False
    prior: float | None = None  # the sourced starting value the calibration is pulled towards

    def to_dict(self) -> dict:
        return asdict(self)


def _p(name: str, value: float, lo: float, hi: float, unit: str, source: str, calibrated: bool = False,
       prior: float | None = None) -> Param:
    return Param(name, value, lo, hi, unit, source, calibrated, value if prior is None else prior)


_CAL = "calibrated on benchmarks/perf_cases (held-out accuracy: docs/perf-accuracy.md)"

# --- achievable memory bandwidth (fraction of the datasheet peak) ------------------------------------
# Priors: 'well-optimized CUDA stacks commonly run in the 70 to 85 percent range' (shared/specs/perf.md
# §3.1); ROCm decode kernels reach less of MI300X's 5.3 TB/s (issue #19: MI300X/MI325X modelled 2x too fast
# with the NVIDIA default).
BANDWIDTH_EFFICIENCY: Mapping[str, Param] = {
    "nvidia-hbm": _p("bandwidth_efficiency[nvidia-hbm]", 0.74, 0.60, 0.88, "x peak",
                     f"prior 0.70-0.85 (perf.md §3.1); {_CAL}", True, prior=0.8),
    "nvidia-ampere": _p("bandwidth_efficiency[nvidia-ampere]", 0.5, 0.50, 0.85, "x peak",
                        f"prior 0.70-0.85 (perf.md §3.1); A100 decode measured at 60-77 % (tenstorrent #340, johnmusgrave.com); {_CAL}", True, prior=0.7),
    "nvidia-gddr": _p("bandwidth_efficiency[nvidia-gddr]", 0.8, 0.70, 0.90, "x peak",
                      f"prior 0.70-0.85 (perf.md §3.1); {_CAL}", True, prior=0.8),
    "amd": _p("bandwidth_efficiency[amd]", 0.394, 0.35, 0.70, "x peak",
              f"prior 0.4-0.7 (ROCm decode, issue #19 pattern); {_CAL}", True, prior=0.55),
}

# --- routed-expert GEMMs at small M (fused MoE kernels) read at a lower rate -------------------------
# A TP-sharded expert is a few-hundred-column GEMM; fused MoE kernels (triton / CUTLASS grouped GEMM)
# with M of a few tokens reach a fraction of the dense GEMV bandwidth. The factor applies at one token per
# expert and recovers as tokens per touched expert (M_e) grow: f(M_e) = 1 - (1 - f) / M_e [E].
EXPERT_BANDWIDTH_FACTOR = _p("expert_bandwidth_factor", 0.575, 0.25, 0.90, "x dense efficiency",
                             f"[E] small-M grouped GEMM; {_CAL}", True, prior=0.6)

# --- per-layer floor: the step cannot be faster than its kernels' launch/latency floor --------------
# With CUDA graphs a layer is still ~10-25 kernels of a few µs each; an MoE layer adds routing, top-k,
# align/sort, two grouped GEMMs and the combine (issue #19: large MoE at batch 1 on B200/B300 never
# below ~7 ms/token over 61 layers, i.e. ~110 µs per layer).
_FLOOR_PRIORS = {"nvidia": (60.0, 15.0), "amd": (100.0, 25.0)}  # (MoE, dense) µs per layer [E]
LAYER_FLOOR_US: Mapping[str, Mapping[str, Param]] = {
    vendor: {
        "moe": _p(f"moe_layer_floor_us[{vendor}]", v_moe, lo_moe, hi_moe, "µs/layer",
                  f"[E] kernel-latency floor of one MoE layer; {_CAL}", True, _FLOOR_PRIORS[vendor][0]),
        "dense": _p(f"dense_layer_floor_us[{vendor}]", v_d, lo_d, hi_d, "µs/layer",
                    f"[E] kernel-latency floor of one dense layer; {_CAL}", True, _FLOOR_PRIORS[vendor][1]),
    }
    for vendor, (v_moe, lo_moe, hi_moe, v_d, lo_d, hi_d) in {
        "nvidia": (51.25, 30.0, 200.0, 5.0, 5.0, 40.0),
        "amd": (175.0, 50.0, 300.0, 5.0, 5.0, 80.0),
    }.items()
}
# A100's MoE layers run a different kernel path than Hopper/Blackwell (no TMA/wgmma for the Triton fused-MoE
# and Marlin kernels) on a slower chip: 108 SMs at 1.41 GHz against 132 at 1.98 GHz (1.7x per latency-bound
# kernel, datasheets); the family gets its own MoE floor, prior 1.7 x the NVIDIA prior [E].
AMPERE_MOE_LAYER_FLOOR_US = _p("moe_layer_floor_us[nvidia-ampere]", 181.25, 50.0, 400.0, "µs/layer",
                               "[E] kernel-latency floor of one MoE layer on A100/A800: 1.7x fewer SM-cycles per "
                               f"second than H100 (108 SMs x 1.41 GHz vs 132 x 1.98 GHz); {_CAL}", True, prior=100.0)

# GEMM efficiency grows with the tokens in the forward: eff(M) = eff_max * M / (M + M_half) [E: GEMMs
# with a few hundred rows are latency/occupancy bound; prefill chunks of 8K reach the plateau]. Fitted:
# A100 Qwen3-14B prefill reaches ~34 % of peak at 1K tokens and ~78 % at 8K (tenstorrent issue #340).
GEMM_HALF_TOKENS = _p("gemm_half_tokens", 100.0, 100.0, 1250.0, "tokens",
                      "[E] tokens per forward at which GEMMs reach half their plateau efficiency; upper end from a "
                      "microbenchmark: a 2048x2048x2048 BF16 GEMM (smaller than a 7B+ model's prefill GEMMs in N and K "
                      "too) already runs at 62 % of the 8192^3 plateau on B200 (cuBLAS 1006 vs 1610 TFLOPS, "
                      "pyptx.dev/performance), so M/(M+h) >= 0.62 at M = 2048 gives h <= 1250; "
                      f"{_CAL}", True, prior=500.0)
# Kernel floors: a launch/synchronisation part that is the same on every GPU, and a part that scales with
# how fast the GPU runs a small kernel (dense BF16 TFLOPS stands in for clock x SMs, H100 SXM = 989):
# floor x ((1 - share) + share x 989 / bf16_tflops) [E]. A100 MoE layers at batch 1 take ~180-280 µs
# (tenstorrent #340, vllm #22331) against ~55-105 µs on H100/GB300 (InferenceX #828, SGLang cookbook).
# No longer calibrated: the A100 floors it stood in for have their own parameter (AMPERE_MOE_LAYER_FLOOR_US);
# it was fitted to 0 on the public set, and 0 is what ships.
FLOOR_COMPUTE_EXPONENT = _p("floor_compute_share", 0.0, 0.0, 1.0, "",
                            "[E] share of the kernel floor that scales with 989 / bf16 TFLOPS (fitted 0 while "
                            "calibrated; A100 now has its own MoE floor)")

# --- per-step fixed cost per engine (sampling, scheduler, input prep, graph replay) ------------------
STEP_FIXED_MS: Mapping[str, Param] = {
    "sglang": _p("step_fixed_ms[sglang]", 1.5, 0.2, 1.5, "ms/step",
                 f"[E] sampling + scheduler with CUDA graphs and the overlap scheduler (perf.md §3.1: 0.5-1.5 ms); {_CAL}", True, prior=0.6),
    "vllm": _p("step_fixed_ms[vllm]", 1.15, 0.3, 2.0, "ms/step",
               f"[E] sampling + scheduler with CUDA graphs (perf.md §3.1: 0.5-1.5 ms); {_CAL}", True, prior=0.8),
}
# Without CUDA graphs (--disable-cuda-graph / --enforce-eager) every kernel is launched from Python:
# ~5 µs per launch on the CPU, ~20 kernels per layer [E].
EAGER_LAUNCH_US_PER_LAYER = _p("eager_launch_us_per_layer", 100.0, 60.0, 200.0, "µs/layer",
                               "[E] ~20 kernel launches x ~5 µs CPU time per layer without CUDA graphs")

# --- prefill -----------------------------------------------------------------------------------------
FLOPS_EFFICIENCY: Mapping[str, Param] = {
    "nvidia": _p("flops_efficiency[nvidia]", 0.85, 0.40, 0.85, "x dense peak (plateau)",
                 f"prior 0.4-0.6 (perf.md §3.2) for whole-model prefill, plateau of large GEMMs; {_CAL}", True, prior=0.6),
    "amd": _p("flops_efficiency[amd]", 0.30, 0.30, 0.55, "x dense peak",
              "public measurement: MI300X sustains ~45 % of its datasheet FP8/BF16/FP16 peak on real AI "
              "workloads, H100/B200 up to 93 % (aiweekly.co/alerts/amd-mi300x-hits-only-45-of-peak-flops-in-"
              "practice); AMD's own max-achievable-FLOPs method: rocm.blogs.amd.com measuring-max-achievable-"
              f"flops-part2 (hipBLASLt-bench); {_CAL}", True, prior=0.45),
}
TTFT_FIXED_MS = _p("ttft_fixed_ms", 27.25, 8.0, 30.0, "ms",
                   f"[E] HTTP, tokenization, scheduling and the first sampled token; {_CAL}", True, prior=15.0)

# --- speculative decoding ------------------------------------------------------------------------------
SPEC_STEP_OVERHEAD_MS: Mapping[str, Param] = {
    "sglang": _p("spec_step_overhead_ms[sglang]", 0.6, 0.3, 3.0, "ms/step",
                 "[E] spec loop bookkeeping: tree/mask build, verify sampling, KV commit, no overlap scheduler"),
    "vllm": _p("spec_step_overhead_ms[vllm]", 1.2, 0.3, 3.0, "ms/step",
               "[E] vLLM spec loop: rejection sampler, proposer prep (~2 ms on V1 at release, docs/perf.md)"),
}
# One draft forward is a one-layer model plus lm_head: it too has a launch floor.
DRAFT_FORWARD_FLOOR_US = _p("draft_forward_floor_us", 150.0, 80.0, 300.0, "µs/draft forward",
                            "[E] one draft decoder layer + lm_head + top-k kernels under CUDA graphs")
# A split-KV decode-attention kernel with a fixed, small grid (vLLM TRITON_MLA: batch x head blocks x 4 KV
# splits, perf/attention.py) streams the whole cache with a few CTAs at small batch; each CTA's rate is
# bounded by the loads it keeps in flight: Little's law, one 32-token x 576 x 2 B tile (36 KB), two stages,
# over ~0.5-1 µs loaded DRAM latency = 36-150 GB/s, less the softmax/dot work between tiles [E].
SPLIT_KV_CTA_GBPS = _p("split_kv_cta_gbps", 40.0, 20.0, 100.0, "GB/s per CTA",
                       "[E] Little's law: 36-72 KB of KV tiles in flight per CTA over 0.5-1 µs DRAM latency, "
                       "compute between tiles not overlapped")


@dataclass(frozen=True)
class ModelParams:
    """The parameter values one estimate uses (central, optimistic or pessimistic)."""

    bandwidth_efficiency: float
    expert_bandwidth_factor: float
    moe_layer_floor_us: float
    dense_layer_floor_us: float
    step_fixed_ms: float
    flops_efficiency: float
    ttft_fixed_ms: float
    spec_step_overhead_ms: float
    draft_forward_floor_us: float
    eager_launch_us_per_layer: float = 0.0  # 0 with CUDA graphs
    gemm_half_tokens: float = GEMM_HALF_TOKENS.value
    floor_compute_exponent: float = FLOOR_COMPUTE_EXPONENT.value
    split_kv_cta_gbps: float = SPLIT_KV_CTA_GBPS.value

    def to_dict(self) -> dict:
        return asdict(self)


def params_for(family: str, engine: str, bound: str = "value", *, cuda_graph: bool = True,
               overrides: Mapping[str, float] | None = None) -> ModelParams:
    """Parameter values for a GPU family and engine. ``bound``: ``value`` (central), ``lo`` (fast end of
    every range) or ``hi`` (slow end). Efficiencies are fast at ``hi``; times are fast at ``lo``."""
    fast = bound == "lo"
    slow = bound == "hi"

    def eff(p: Param) -> float:  # higher is faster
        return p.hi if fast else p.lo if slow else p.value

    def cost(p: Param) -> float:  # lower is faster
        return p.lo if fast else p.hi if slow else p.value

    fam = family if family in FAMILIES else "nvidia-hbm"
    eng = engine if engine in ENGINES else "sglang"
    vendor = vendor_of(fam)
    floors = LAYER_FLOOR_US[vendor]
    mp = ModelParams(
        bandwidth_efficiency=eff(BANDWIDTH_EFFICIENCY[fam]), expert_bandwidth_factor=eff(EXPERT_BANDWIDTH_FACTOR),
        moe_layer_floor_us=cost(AMPERE_MOE_LAYER_FLOOR_US if fam == "nvidia-ampere" else floors["moe"]),
        dense_layer_floor_us=cost(floors["dense"]),
        step_fixed_ms=cost(STEP_FIXED_MS[eng]), flops_efficiency=eff(FLOPS_EFFICIENCY[vendor]),
        ttft_fixed_ms=cost(TTFT_FIXED_MS), spec_step_overhead_ms=cost(SPEC_STEP_OVERHEAD_MS[eng]),
        draft_forward_floor_us=cost(DRAFT_FORWARD_FLOOR_US),
        eager_launch_us_per_layer=0.0 if cuda_graph else cost(EAGER_LAUNCH_US_PER_LAYER),
        gemm_half_tokens=cost(GEMM_HALF_TOKENS), floor_compute_exponent=FLOOR_COMPUTE_EXPONENT.value,
        split_kv_cta_gbps=eff(SPLIT_KV_CTA_GBPS))
    return replace(mp, **dict(overrides)) if overrides else mp


def all_params() -> list[Param]:
    """Every named parameter (for docs and the JSON ``parameters`` list)."""
    out = list(BANDWIDTH_EFFICIENCY.values()) + [EXPERT_BANDWIDTH_FACTOR, GEMM_HALF_TOKENS, FLOOR_COMPUTE_EXPONENT]
    for vendor in ("nvidia", "amd"):
        out += [LAYER_FLOOR_US[vendor]["moe"], LAYER_FLOOR_US[vendor]["dense"]]
    out += [AMPERE_MOE_LAYER_FLOOR_US]
    out += list(STEP_FIXED_MS.values()) + [EAGER_LAUNCH_US_PER_LAYER] + list(FLOPS_EFFICIENCY.values())
    out += [TTFT_FIXED_MS] + list(SPEC_STEP_OVERHEAD_MS.values()) + [DRAFT_FORWARD_FLOOR_US, SPLIT_KV_CTA_GBPS]
    return out
