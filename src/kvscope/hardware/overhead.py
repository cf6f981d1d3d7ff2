"""Memory gone before the engine's baseline measurement: CUDA context and communicators.

These are **estimates** (the engines measure them, they do not compute them). Each is a named,
bounded figure: ``estimate_bytes`` within [``low_bytes``, ``high_bytes``], with its source.
Accuracy against real startup logs: docs/overheads-accuracy.md (data: tests/hardware/overhead_logs.jsonl).

Where the figures come from
- CUDA context = a local-memory reserve the driver makes when the context is created
  (``SMs x max resident threads per SM x cudaLimitStackSize``, default stack 1 KiB per thread)
  plus a fixed part (driver/runtime state, lazily loaded module images, torch), the fixed part
  fitted on one training log (SGLang H200 TP8, sglang#11716) and checked on held-out logs.
- Communicators = what ``init_distributed_environment`` + ``initialize_model_parallel`` leave
  allocated (SGLang prints it as "Init torch distributed ends. mem usage="): a fixed part present
  even at world size 1 (measured 0.09 GB, SGLang TP1 on B200), NCCL connection buffers, and the
  custom all-reduce IPC buffers (exact bytes from the engine source).
  NCCL buffers are per *channel* and per ring/tree *neighbour*, not per peer: a ring or chain
  connects each rank to 2-3 neighbours whatever the world size, and the channel count is set by
  the fabric (NVLink/NVSwitch: up to 32 channels; PCIe: ~2). So the NCCL part is modelled per
  fabric class and independent of TP (H100 TP2 in vLLM and H200 TP8 in SGLang use 1.4-1.9 GiB
  alike; a per-peer rule predicts a 7x difference).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import GiB, KiB, MiB
from .gpus import GPU


@dataclass(frozen=True)
class Overhead:
    """An estimated memory overhead (bytes) with its bounds and source."""

    name: str
    estimate_bytes: int
    low_bytes: int
    high_bytes: int
    source: str


# ---------------------------------------------------------------------------------------------
# CUDA context

# cudaLimitStackSize default: 1 KiB per thread (CUDA Runtime API, cudaDeviceSetLimit). The driver
# reserves local memory for every thread that can be resident: SMs x max threads per SM x stack.
CUDA_DEFAULT_STACK_BYTES = 1 * KiB

# (SM count, max resident threads per SM) from NVIDIA datasheets / CUDA programming guide
# (compute capability table: 2048 threads/SM for 7.0, 8.0, 9.0, 10.x; 1536 for 8.6, 8.9, 12.0;
# 1024 for 7.5). Values marked (est.) are not confirmed by a datasheet.
SM_TABLE: dict[str, tuple[int, int]] = {
    "h100-sxm": (132, 2048), "h100-pcie": (114, 2048), "h100-nvl": (132, 2048), "h800": (132, 2048),
    "h200": (132, 2048), "h20": (78, 2048),
    "a100-40g": (108, 2048), "a100-80g": (108, 2048), "a100-pcie-80g": (108, 2048), "a800": (108, 2048),
    "v100": (80, 2048), "t4": (40, 1024),
    "l40s": (142, 1536), "l40": (142, 1536), "l20": (92, 1536), "l4": (58, 1536),
    "a10g": (80, 1536), "a10": (72, 1536), "a40": (84, 1536), "rtx-a6000": (84, 1536),
    "rtx-6000-ada": (142, 1536), "rtx-3090": (82, 1536), "rtx-4090": (128, 1536),
    "rtx-5090": (170, 1536), "rtx-pro-6000": (188, 1536),
    "rtx-pro-5000": (110, 1536), "rtx-pro-5000-72g": (110, 1536),  # (est.)
    "b200": (148, 2048), "gb200": (148, 2048), "b300": (148, 2048),  # b300 (est.)
}

# Fixed part of the context, fitted on the training log only (sglang#11716, H200 TP8, all 8 ranks):
# context = CUDA total 139.72 GiB (vllm#23192, H200) - "Load weight begin. avail mem" (137.29 GB)
# - "Init torch distributed ends. mem usage" (2.01 GB) = 0.42 GiB; minus the local-memory reserve
# 132 x 2048 x 1 KiB = 0.258 GiB -> 0.162 GiB. Estimated. Held-out errors: docs/overheads-accuracy.md.
CUDA_CONTEXT_FIXED_BYTES_EST = int(0.162 * GiB)
# Unknown SM layout: the previous flat figure (pytorch#20532/#107667: ~300-700 MB per process).
_CUDA_CONTEXT_FALLBACK_BYTES_EST = 512 * MiB


def cuda_local_memory_reserve_bytes(sms: int, max_threads_per_sm: int,
                                    stack_bytes: int = CUDA_DEFAULT_STACK_BYTES) -> int:
    """Local memory the driver reserves at context creation: ``SMs x threads/SM x stack``."""
    return sms * max_threads_per_sm * stack_bytes


def cuda_context(gpu: GPU) -> Overhead:
    """CUDA context + torch runtime state per process per GPU (estimated).

    NVIDIA with a known SM layout: ``CUDA_CONTEXT_FIXED_BYTES_EST`` + the local-memory reserve
    (H100/H200: 0.42 GiB, L4: 0.25 GiB, B200: 0.45 GiB). ROCm contexts are larger (HIP runtime,
    code objects): 1.0 GiB, unchanged (no log separates it from the communicators)."""
    if gpu.vendor == "amd":
        return Overhead("cuda_context", int(1.0 * GiB), int(0.5 * GiB), int(4.0 * GiB),
                        "estimated: ROCm context + HIP runtime ~1 GiB (no log isolates it)")
    layout = SM_TABLE.get(gpu.key)
    if layout is None:
        return Overhead("cuda_context", _CUDA_CONTEXT_FALLBACK_BYTES_EST, 300 * MiB, 1024 * MiB,
                        "estimated: ~0.5 GiB (pytorch#20532/#107667: ~300-700 MB); SM layout unknown")
    sms, threads = layout
    reserve = cuda_local_memory_reserve_bytes(sms, threads)
    est = CUDA_CONTEXT_FIXED_BYTES_EST + reserve
    return Overhead("cuda_context", est, est - 128 * MiB, est + 256 * MiB,
                    f"estimated: {CUDA_CONTEXT_FIXED_BYTES_EST / GiB:.3f} GiB fixed (fit: sglang#11716 H200) + "
                    f"local-memory reserve {sms} SMs x {threads} threads x 1 KiB stack = {reserve / GiB:.3f} GiB")


# ---------------------------------------------------------------------------------------------
# Communicators

# Present at world size 1 too: torch.distributed + the engine's groups with no peer. SGLang on B200
# at TP1 printed "Init torch distributed ends. elapsed=0.27 s, mem usage=0.09 GB" (SGLang's
# clean-startup reference log, tests/doctor/real_logs/sglang-skill-clean-startup-qwen3-8b-b200.log).
DIST_INIT_FIXED_BYTES_EST = int(0.09 * GiB)

# NCCL per-connection buffer sizes (NCCL src/include/device.h, defaults since NCCL 2.12):
# SIMPLE  DEFAULT_BUFFSIZE      = 1 << 22                                  = 4,194,304 B
# LL128   DEFAULT_LL128_BUFFSIZE = 120 elems x 640 threads x 8 steps x 8 B  = 4,915,200 B
# LL      DEFAULT_LL_BUFFSIZE    = 8 lines x 512 threads x 8 steps x 16 B   =   524,288 B
NCCL_SIMPLE_BUFFSIZE = 1 << 22
NCCL_LL128_BUFFSIZE = 120 * 640 * 8 * 8
NCCL_LL_BUFFSIZE = 8 * 512 * 8 * 16


def nccl_connection_bytes() -> int:
    """Device buffers of one NCCL connection (one channel, one neighbour, all three protocols)."""
    return NCCL_SIMPLE_BUFFSIZE + NCCL_LL128_BUFFSIZE + NCCL_LL_BUFFSIZE


# NCCL buffers connected while the TP communicators are created (PyNccl's warm-up all-reduce and
# the torch device groups), per fabric class; independent of world size (ring/tree neighbours).
# Fitted on the training logs only:
#   NVLink/NVSwitch: sglang#11716 H200 TP8, median rank "mem usage=2.01 GB" - 0.09 fixed
#                    - 26 MiB custom all-reduce = 1.895 GiB (~211 connections of 9.19 MiB).
#   PCIe:            shared/logs sgl-qwq32b-4xl4-tp4 (custom AR off) "mem usage=0.13 GB" - 0.09
#                    = 0.04 GiB (~4-5 connections: ~2 PCIe channels x ring/tree neighbours).
NCCL_INIT_BYTES_EST = {"nvlink": int(1.895 * GiB), "pcie": int(0.04 * GiB)}

# Custom all-reduce (sglang/srt/distributed/device_communicators/custom_all_reduce.py @ v0.5.3 /
# v0.5.23; vllm/distributed/device_communicators/custom_all_reduce.py @ v0.19.0):
# ``_MAX_CAR_SIZE = 8192 * 1024`` (ROCm: 2x), meta = ``meta_size() + max_size`` and buffer =
# ``max_size`` via cudaMalloc (2 MiB pages), ``rank_data`` 8 MiB (SGLang <= 0.5.x, vLLM; SGLang
# 0.5.23: ``max_size``) from torch.
CAR_MAX_SIZE_CUDA = 8192 * 1024
CAR_MAX_SIZE_ROCM = 2 * 8192 * 1024
CAR_RANK_DATA_BYTES = 8 * 1024 * 1024
_CUDA_MALLOC_GRANULARITY = 2 * MiB

# vLLM @ v0.19.0 vllm/distributed/device_communicators/all_reduce_utils.py: with torch symmetric
# memory enabled (VLLM_ALLREDUCE_USE_SYMM_MEM=1, the default from v0.11.0; 0 in v0.10.2 envs.py) the custom all-reduce is capped by
# CUSTOM_ALL_REDUCE_MAX_SIZES and a symmetric-memory buffer of SYMM_MEM_ALL_REDUCE_MAX_SIZES is made.
VLLM_CUSTOM_ALL_REDUCE_MAX_SIZES = {
    "sm90": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
    "sm100": {2: 2 * MiB, 4: 2 * MiB, 6: 1 * MiB, 8: 1 * MiB},
    "sm103": {2: 4 * MiB, 4: 4 * MiB, 6: 8 * MiB, 8: 4 * MiB},
}
VLLM_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {
    "sm90": {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB},
    "sm100": {2: 8 * MiB, 4: 32 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    "sm103": {2: 4 * MiB, 4: 32 * MiB, 6: 32 * MiB, 8: 64 * MiB},
}


def _pages(n: int) -> int:
    return -(-n // _CUDA_MALLOC_GRANULARITY) * _CUDA_MALLOC_GRANULARITY


def custom_all_reduce_bytes(max_size: int, rank_data_bytes: int = CAR_RANK_DATA_BYTES) -> int:
    """Local device memory of one ``CustomAllreduce``: meta (``meta_size() + max_size``, a few KiB
    of signal flags rounded up to a 2 MiB page) + IPC buffer (``max_size``) + ``rank_data``.
    8 MiB (CUDA): 10 + 8 + 8 = 26 MiB. Peers' buffers are mapped, not allocated, here."""
    return _pages(max_size + 1) + _pages(max_size) + rank_data_bytes


def vllm_allreduce_buffers_bytes(sm: str, world_size: int) -> int:
    """vLLM @ v0.19.0 custom all-reduce (capped with symmetric memory on) + symmetric-memory buffer."""
    car_max = min(CAR_MAX_SIZE_CUDA, VLLM_CUSTOM_ALL_REDUCE_MAX_SIZES.get(sm, {}).get(world_size, CAR_MAX_SIZE_CUDA))
    symm = VLLM_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(sm, {}).get(world_size, 0)
    return custom_all_reduce_bytes(car_max) + symm


def fabric_class(gpu: GPU) -> str:
    """"nvlink" (all pairs on NVLink/NVSwitch or Infinity Fabric) or "pcie" (incl. bridged pairs)."""
    return "nvlink" if gpu.interconnect.is_full_nvlink else "pcie"


def communicators(gpu: GPU, world_size: int, custom_all_reduce: bool, engine: str = "sglang") -> Overhead:
    """NCCL communicator buffers + custom all-reduce IPC buffers allocated during distributed init
    (before the engine's baseline). Estimated.

    ``DIST_INIT_FIXED_BYTES_EST`` (always) + ``NCCL_INIT_BYTES_EST[fabric]`` (world > 1, independent
    of the world size) + the custom all-reduce bytes (:func:`custom_all_reduce_bytes`; vLLM also its
    symmetric-memory buffer, :func:`vllm_allreduce_buffers_bytes`). Held-out errors:
    docs/overheads-accuracy.md (-48 % ROCm MI355X, +24 % vLLM H100 TP2 init, +5..+11 % SGLang H200)."""
    fixed = DIST_INIT_FIXED_BYTES_EST
    if world_size <= 1:
        return Overhead("communicators", fixed, 0, 2 * fixed,
                        "estimated: 0.09 GB torch.distributed at world size 1 (SGLang TP1 log), no NCCL peer")
    fab = fabric_class(gpu)
    nccl = NCCL_INIT_BYTES_EST[fab]
    car = 0
    if custom_all_reduce:
        if engine == "vllm" and gpu.vendor == "nvidia":
            car = vllm_allreduce_buffers_bytes(gpu.sm, world_size)
        else:
            car = custom_all_reduce_bytes(CAR_MAX_SIZE_ROCM if gpu.vendor == "amd" else CAR_MAX_SIZE_CUDA)
    est = fixed + nccl + car
    # Bounds: NCCL's footprint depends on its version and environment (sglang#3888, NCCL 2.21 era,
    # 2 nodes: 0.13-0.18 GiB above the fixed part at TP16; sglang#11716: 1.9 GiB at TP8), so the low
    # bound keeps no NCCL part and the high one adds 0.5 GiB (ROCm: 2 GiB more, RCCL + quick all-reduce).
    low = fixed + car
    high = fixed + car + int(nccl * 1.6) + int(0.5 * GiB) + (int(2.0 * GiB) if gpu.vendor == "amd" else 0)
    return Overhead("communicators", est, low, high,
                    f"estimated: {fixed / GiB:.2f} GiB fixed + NCCL {nccl / GiB:.2f} GiB ({fab}, per TP group, "
                    f"fit on sglang#11716 / L4 TP4 logs) + custom all-reduce {car / MiB:.0f} MiB (engine source)")


def custom_all_reduce_enabled(gpu: GPU, world_size: int) -> bool:
    """``can_use_custom_all_reduce_with_nvlink`` (sglang custom_all_reduce_utils.py @ v0.5.23; vLLM same rule):
    world size in {2,4,6,8}, and ``world_size > 2 and not full_nvlink`` disables it."""
    if world_size not in (2, 4, 6, 8):
        return False
    if world_size > 2 and not gpu.interconnect.is_full_nvlink:
        return False
    return True
