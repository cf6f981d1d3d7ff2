"""All-reduce latency: an alpha-beta model per interconnect, NCCL's protocol choice, and the
vLLM/SGLang custom all-reduce (one-shot / two-shot) with the engines' refusal rule.

``t_AR(S, n) = alpha + S * 2(n-1)/n / busbw`` (nccl-tests ``doc/PERFORMANCE.md``; shared/specs/perf.md §2.1).

Every figure here is an estimate (``estimated=True`` on each result). The constants are NCCL's own
tuning constants (``NVIDIA/nccl: src/graph/tuning.cc``) and published measurements, each with its
source (shared/specs/perf.md §2.2-2.4); where a constant is fitted to measurements the fit is
written out next to it, so a test can check the model returns the measured point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..hardware.gpus import GPU
from ..hardware.overhead import custom_all_reduce_enabled

# --- NCCL tuning model (NVIDIA/nccl src/graph/tuning.cc; shared/specs/perf.md §2.2) -------------
# Ring all-reduce latency = baseLat[proto] + 2(n-1) * hwLat[link][proto]   (µs), single node.
PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_BASE_LAT_RING_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
NCCL_HW_LAT_RING_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "pcie": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
}
# Fraction of the link's bus bandwidth each protocol gets (tuning.cc: LL busBw*0.5, LL128 *0.92).
NCCL_PROTO_BW_FACTOR = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
NCCL_SOURCE = "NVIDIA/nccl src/graph/tuning.cc ring latency/bandwidth model (shared/specs/perf.md §2.2)"

# --- Large-message NCCL all-reduce bus bandwidth per link (GB/s) --------------------------------
# (kind, generation) -> (busbw_gbps, source)
BUSBW_GBPS = {
    ("nvlink", 5): (18 * 40.1, "[E] 18 links x SM100_NVLINK_BW 40.1 GB/s (NVIDIA/nccl src/graph/topo.h)"),
    ("nvlink", 4): (370.0, "[V] 'NCCL can get an effective NVLink bandwidth of 370 GB/s' (nccl-tests#212)"),
    ("nvlink", 3): (12 * 20.0, "[E] 12 links x SM80_NVLINK_BW 20.0 GB/s (NVIDIA/nccl src/graph/topo.h)"),
    ("nvlink", 2): (6 * 20.0, "[E] 6 NVLink-2 links x 20 GB/s"),
    ("pcie", 5): (22.2, "[V] NCCL all-reduce busBw, 8x RTX PRO 6000 PCIe Gen5, default 2 channels "
                        "(local-inference-lab/rtx6kpro hardware/pcie-bandwidth.md)"),
    ("pcie", 4): (11.1, "[E] PCIe Gen5 measurement (22.2 GB/s) halved for Gen4 link rate"),
    ("pcie", 3): (5.55, "[E] PCIe Gen5 measurement (22.2 GB/s) quartered for Gen3 link rate"),
}

# --- Host topology term for PCIe boxes (µs added to every NCCL all-reduce) ------------------------
# NCCL's model explains the PCIe-switch box (LL ring intercept 20.6 µs at 8 GPUs vs 24.6 µs measured
# at 256 B) but not a dual-socket direct-attach host (48.2 µs measured at 32 KB with default NCCL:
# AMD_BW mis-estimate, cross-socket paths). The term is the measured point minus the NCCL model there.
PCIE_TOPOLOGIES = ("switch", "cross-socket")
PCIE_CALIBRATION = {
    # topology: (n, bytes, measured µs, source)
    "switch": (8, 256, 24.6, "8x RTX PRO 6000 behind PCIe switches, NCCL 24.6 µs at 256 B "
                             "(local-inference-lab/rtx6kpro hardware/pcie-bandwidth.md)"),
    "cross-socket": (8, 32768, 48.2, "8x RTX PRO 6000, dual EPYC Turin direct attach, default NCCL 48.2 µs "
                                     "at 32 KB (local-inference-lab/rtx6kpro optimization/nccl-tuning.md)"),
}

# --- vLLM / SGLang custom all-reduce ---------------------------------------------------------------
CUSTOM_AR_MAX_BYTES = 8192 * 1024  # _MAX_CAR_SIZE (sglang/vllm custom_all_reduce.py)
CUSTOM_AR_SOURCE = ("one-shot if ws==2 or (ws<=4 and S<512KB) or (ws<=8 and S<256KB), else two-shot "
                    "(vllm csrc/custom_all_reduce.cuh); refused for ws>2 without full NVLink "
                    "(sglang/vllm custom_all_reduce.py)")
# One-shot pull over PCIe behind switches, fitted to 8x RTX PRO 6000 custom AR: 7.5 µs at 256 B-1 KB,
# 16.5 µs at 32 KB, 73.6 µs at 256 KB (rtx6kpro models/kimi-k25.md): each rank reads (n-1)*S,
# slope (73.6-16.5) µs / (7 * 224 KiB) = 28.1 GB/s effective pull bandwidth (Gen5).
CUSTOM_PCIE_PULL_GBPS_GEN5 = 7 * (262144 - 32768) / ((73.6 - 16.5) * 1e3)
# Launch + barriers: 7.5 µs at n=8 (above), 6.1 µs at n=4 (same NUMA, optimization/pcie-oneshot-allreduce.md).
CUSTOM_PCIE_ALPHA_US = {2: 5.4, 4: 6.1, 6: 6.8, 8: 7.5}
# NVLink: 8x A100 custom AR 11-13 / 12-14 / 14 µs at n = 2 / 4 / 8 for 512 B-32 KB (sglang PR #2688).
CUSTOM_NVLINK_ALPHA_US = {2: 11.0, 4: 12.0, 6: 13.0, 8: 14.0}
# Direct-attach / cross-socket PCIe without ForceP2P regkeys: kernel-issued P2P is staged through
# system memory ("~15x slower than NCCL", rtx6kpro optimization/pcie-oneshot-allreduce.md). P2P latency
# is ~14 µs with P2P disabled vs 0.36-0.45 µs enabled (rtx6kpro hardware/pcie-bandwidth.md).
P2P_STAGED_LATENCY_US = 14.0
# GeForce parts: no P2P in the stock driver, so custom AR cannot initialise (vllm PR #52555 text).
NO_P2P_GPUS = frozenset({"rtx-3090", "rtx-4090", "rtx-5090"})


@dataclass(frozen=True)
class Fabric:
    """The all-reduce group: how many GPUs and how they are linked (from the GPU catalog)."""

    world_size: int
    kind: str  # catalog interconnect kind: "nvlink" | "pcie" | "infinity-fabric" | "nvlink-c2c"
    link: str  # NCCL latency class: "nvlink" (NVLink, Infinity Fabric) | "pcie"
    generation: int
    busbw_gbps: float
    busbw_source: str
    link_gbps_per_dir: float  # catalog per-direction bandwidth of one GPU's link
    pcie_topology: str | None  # for PCIe: "switch" | "cross-socket"
    is_full_nvlink: bool
    has_p2p: bool
    gpu_key: str

    def to_dict(self) -> dict:
        return asdict(self)


def default_pcie_topology(world_size: int) -> str:
    """Assumed when not given [E]: more than 4 x16 GPUs usually span two CPU sockets (the origin box,
    shared/docs/origin.md, is a dual-socket host); up to 4 usually sit under one socket/switch."""
    return "cross-socket" if world_size > 4 else "switch"


def fabric_for(gpu: GPU, world_size: int, pcie_topology: str | None = None) -> Fabric:
    """The all-reduce fabric of ``world_size`` GPUs of this kind (PCIe when beyond the NVLink domain)."""
    ic = gpu.interconnect
    if ic.kind == "pcie" or world_size > ic.max_nvlink_domain:
        kind, gen = "pcie", ic.pcie_generation
        link_gbps = 64.0 * 2.0 ** (gen - 5)  # x16 per direction: Gen5 64, Gen4 32 GB/s
    else:
        kind, gen, link_gbps = ic.kind, ic.generation, ic.bandwidth_gbps_per_dir
    link = "pcie" if kind == "pcie" else "nvlink"  # Infinity Fabric uses NCCL's NVLink-class latencies [E]
    if (kind, gen) in BUSBW_GBPS:
        busbw, src = BUSBW_GBPS[(kind, gen)]
    else:  # Infinity Fabric and anything uncatalogued: 82 % of the line rate (370/450 on H100) [E]
        busbw = 0.82 * link_gbps
        src = "[E] 0.82 x catalog per-direction link bandwidth (NCCL 370 of 450 GB/s on H100)"
    topo = (pcie_topology or default_pcie_topology(world_size)) if link == "pcie" else None
    return Fabric(world_size=world_size, kind=kind, link=link, generation=gen, busbw_gbps=busbw, busbw_source=src,
                  link_gbps_per_dir=link_gbps, pcie_topology=topo,
                  is_full_nvlink=link == "nvlink" and ic.is_full_nvlink,
                  has_p2p=gpu.key not in NO_P2P_GPUS, gpu_key=gpu.key)


@dataclass(frozen=True)
class AllReduceEstimate:
    """One all-reduce of ``payload_bytes`` over ``world_size`` GPUs."""

    payload_bytes: int
    world_size: int
    latency_us: float
    communicator: str  # "nccl" | "custom" | "measured" | "none"
    algorithm: str  # "ring/LL", "one-shot", ...
    alpha_us: float
    transfer_us: float
    host_term_us: float
    source: str
    estimated: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def _bus_factor(n: int) -> float:
    return 2 * (n - 1) / n  # all-reduce: 2(n-1)/n of S crosses each link (nccl-tests PERFORMANCE.md)


def nccl_protocol_times_us(fabric: Fabric, payload_bytes: int) -> dict[str, float]:
    """NCCL's modelled ring time per enabled protocol (µs), without the host term.

    LL128 is only enabled when the intra-node path is NVLink (tuning.cc ``typeIntra <= PATH_NVB``)."""
    n = fabric.world_size
    out = {}
    for proto in PROTOCOLS:
        if proto == "LL128" and fabric.link != "nvlink":
            continue
        lat = NCCL_BASE_LAT_RING_US[proto] + 2 * (n - 1) * NCCL_HW_LAT_RING_US[fabric.link][proto]
        bw = fabric.busbw_gbps * NCCL_PROTO_BW_FACTOR[proto]  # GB/s == bytes/ns; /1e3 -> bytes/µs
        out[proto] = lat + payload_bytes * _bus_factor(n) / (bw * 1e3)
    return out


def pcie_host_term_us(fabric: Fabric) -> float:
    """Measured minus NCCL-modelled latency at the calibration point of this PCIe topology [E fit]."""
    if fabric.link != "pcie" or fabric.pcie_topology is None:
        return 0.0
    n_cal, bytes_cal, measured, _src = PCIE_CALIBRATION[fabric.pcie_topology]
    cal = Fabric(n_cal, "pcie", "pcie", 5, BUSBW_GBPS[("pcie", 5)][0], "", 64.0, fabric.pcie_topology, False, True, "")
    return measured - min(nccl_protocol_times_us(cal, bytes_cal).values())


def nccl_allreduce(fabric: Fabric, payload_bytes: int) -> AllReduceEstimate:
    """NCCL ring all-reduce with NCCL's protocol choice (the fastest modelled protocol)."""
    n = fabric.world_size
    if n <= 1:
        return AllReduceEstimate(payload_bytes, n, 0.0, "none", "-", 0.0, 0.0, 0.0, "single GPU: no all-reduce")
    times = nccl_protocol_times_us(fabric, payload_bytes)
    proto = min(times, key=times.get)
    alpha = NCCL_BASE_LAT_RING_US[proto] + 2 * (n - 1) * NCCL_HW_LAT_RING_US[fabric.link][proto]
    host = pcie_host_term_us(fabric)
    src = f"{NCCL_SOURCE}; busbw {fabric.busbw_gbps:.1f} GB/s {fabric.busbw_source}"
    if fabric.pcie_topology:
        src += f"; PCIe host term fitted to {PCIE_CALIBRATION[fabric.pcie_topology][3]}"
    return AllReduceEstimate(payload_bytes, n, times[proto] + host, "nccl", f"ring/{proto}", alpha,
                             times[proto] - alpha, host, src)


def custom_algorithm(world_size: int, payload_bytes: int, is_full_nvlink: bool) -> str:
    """vLLM ``csrc/custom_all_reduce.cuh`` kernel choice (same in SGLang)."""
    if world_size == 2:
        return "one-shot"
    if is_full_nvlink and ((world_size <= 4 and payload_bytes < 512 * 1024) or
                           (world_size <= 8 and payload_bytes < 256 * 1024)):
        return "one-shot"
    if not is_full_nvlink:
        # The stock kernel launches nothing for ws > 2 without full NVLink; the PCIe kernels people
        # force on (rtx6kpro pcie-oneshot-allreduce.md, sglang-V100 PR #2) are one-shot.
        return "one-shot"
    return "two-shot"


def custom_allreduce(fabric: Fabric, payload_bytes: int) -> AllReduceEstimate:
    """Custom all-reduce kernel time [E].

    one-shot: each rank pulls (n-1)*S from its peers; two-shot: reduce-scatter + all-gather,
    2(n-1)/n*S, with a second barrier (1.5 x alpha [E]).
    PCIe cross-socket (no ForceP2P): every peer access is staged through system memory; modelled as
    (n-1) staged peer reads plus two barrier round trips, each at the P2P-disabled latency, in series
    [E hypothesis: lands at ~3x NCCL for a 14 KB payload; shared/specs/perf.md §4.4 infers 165-375 µs].
    """
    n = fabric.world_size
    algo = custom_algorithm(n, payload_bytes, fabric.is_full_nvlink)
    nb = min(n, 8) if n % 2 == 0 else min(n + 1, 8)
    if fabric.link == "nvlink":
        alpha = CUSTOM_NVLINK_ALPHA_US.get(nb, 14.0)
        bw = 0.8 * fabric.link_gbps_per_dir
        src = f"{CUSTOM_AR_SOURCE}; alpha from 8x A100 custom AR (sglang PR #2688); pull bw 0.8 x NVLink per-dir [E]"
        host = 0.0
    else:
        alpha = CUSTOM_PCIE_ALPHA_US.get(nb, 7.5)
        bw = CUSTOM_PCIE_PULL_GBPS_GEN5 * (2.0 ** (fabric.generation - 5))
        src = (f"{CUSTOM_AR_SOURCE}; PCIe pull fit {CUSTOM_PCIE_PULL_GBPS_GEN5:.1f} GB/s (Gen5) and alpha "
               "to 8x/4x RTX PRO 6000 custom AR (rtx6kpro models/kimi-k25.md, pcie-oneshot-allreduce.md)")
        host = 0.0
        if fabric.pcie_topology == "cross-socket":
            host = ((n - 1) + 2) * P2P_STAGED_LATENCY_US
            src += ("; cross-socket: (n-1) peer reads + 2 barriers staged through system memory at "
                    f"{P2P_STAGED_LATENCY_US} µs each (P2P-disabled latency, rtx6kpro pcie-bandwidth.md) [E hypothesis]")
    if algo == "one-shot":
        moved = (n - 1) * payload_bytes
    else:
        moved = int(_bus_factor(n) * payload_bytes)
        alpha *= 1.5
    transfer = moved / (bw * 1e3)
    return AllReduceEstimate(payload_bytes, n, alpha + transfer + host, "custom", algo, alpha, transfer, host, src)


@dataclass(frozen=True)
class CommunicatorChoice:
    """Which all-reduce the engine runs and why."""

    requested: str  # "auto" | "nccl" | "custom"
    used: str  # "nccl" | "custom" | "none"
    engine_allows_custom: bool
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"requested": self.requested, "used": self.used,
                "engine_allows_custom": self.engine_allows_custom, "notes": list(self.notes)}


def choose_communicator(gpu: GPU, fabric: Fabric, requested: str) -> CommunicatorChoice:
    """``auto`` does what SGLang/vLLM do: custom AR when ``custom_all_reduce_enabled`` (world size in
    {2,4,6,8}, and not more than two PCIe-only GPUs) and P2P works; NCCL otherwise."""
    n = fabric.world_size
    if n <= 1:
        return CommunicatorChoice(requested, "none", False, ())
    allowed = custom_all_reduce_enabled(gpu, n) and fabric.has_p2p and (n == 2 or fabric.is_full_nvlink)
    notes: list[str] = []
    if not allowed:
        if not fabric.has_p2p:
            notes.append(f"{gpu.key}: no GPU peer-to-peer access in the stock driver, so the custom "
                         "all-reduce cannot initialise (P2P check fails; vllm PR #52555)")
        elif n > 2 and not fabric.is_full_nvlink:
            notes.append("SGLang and vLLM disable custom all-reduce on more than two PCIe-only GPUs "
                         "('not supported on more than two PCIe-only GPUs', custom_all_reduce.py)")
        elif n not in (2, 4, 6, 8):
            notes.append(f"custom all-reduce supports world sizes 2, 4, 6, 8, not {n}")
    if requested == "nccl":
        return CommunicatorChoice(requested, "nccl", allowed, tuple(notes))
    if requested == "custom":
        if not fabric.has_p2p:
            notes.append("forced custom all-reduce is impossible here: modelled with NCCL instead")
            return CommunicatorChoice(requested, "nccl", allowed, tuple(notes))
        if not allowed:
            notes.append("forcing it means bypassing both the init-time and the per-call gate "
                         "(vllm issue #56128, PR #39633); modelled as forced")
        return CommunicatorChoice(requested, "custom", allowed, tuple(notes))
    return CommunicatorChoice(requested, "custom" if allowed else "nccl", allowed, tuple(notes))


def allreduce(fabric: Fabric, payload_bytes: int, communicator: str,
              latency_us_override: float | None = None) -> AllReduceEstimate:
    """One all-reduce as the step model uses it: a measured latency wins over any model; the custom
    kernel falls back to NCCL above its 8 MiB buffer (``should_custom_ar``)."""
    n = fabric.world_size
    if n <= 1:
        return nccl_allreduce(fabric, payload_bytes)
    if latency_us_override is not None:
        return AllReduceEstimate(payload_bytes, n, float(latency_us_override), "measured", "-",
                                 float(latency_us_override), 0.0, 0.0, "given on the command line (measured)",
                                 estimated=False)
    if communicator == "custom" and payload_bytes <= CUSTOM_AR_MAX_BYTES:
        return custom_allreduce(fabric, payload_bytes)
    return nccl_allreduce(fabric, payload_bytes)


def allreduce_count(num_layers: int, world_size: int) -> int:
    """Megatron-style TP: 2 per layer (after attention o_proj, after MLP/MoE) + 1 for the
    vocab-parallel embedding (shared/specs/perf.md §2.5). 0 without TP."""
    return 2 * num_layers + 1 if world_size > 1 else 0


# All-reduces a model's attention adds per layer under TP, on top of the two of ``allreduce_count``: norms
# over the full (TP-sharded) q/k width need the global sum of squares (fp32, one value per token and norm).
# MiniMax-M2 (``use_qk_norm``, ``qk_norm_type: per_layer``): SGLang fuses q and k into one all-reduce
# (``MiniMaxM2RMSNormTP.forward_qk``, sglang 0.5.10 ``srt/models/minimax_m2.py``); vLLM runs one per norm
# (``q_norm``/``k_norm`` = ``MiniMaxText01RMSNormTP``, vllm 0.12.0 ``models/minimax_m2.py``,
# ``layers/mamba/linear_attn.py``). Payload: 4 bytes per token per norm.
NORM_ALLREDUCES_PER_LAYER = {("minimax_m2", "sglang"): 1, ("minimax_m2", "vllm"): 2}
NORM_ALLREDUCE_BYTES_PER_TOKEN = 4


def norm_allreduce_count(model_type: str, num_layers: int, world_size: int, engine: str) -> int:
    """The extra per-layer norm all-reduces of ``NORM_ALLREDUCES_PER_LAYER`` over the stack; 0 without TP."""
    if world_size <= 1:
        return 0
    return NORM_ALLREDUCES_PER_LAYER.get((model_type, engine), 0) * num_layers
