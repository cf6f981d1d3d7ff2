"""Memory gone before the engine's baseline measurement: CUDA context and communicators.

These are estimates (the engines measure them, they do not compute them). Each is a named,
bounded figure: ``estimate_bytes`` within [``low_bytes``, ``high_bytes``], with its source.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import GiB, MiB
from .gpus import GPU


@dataclass(frozen=True)
class Overhead:
    name: str
    estimate_bytes: int
    low_bytes: int
    high_bytes: int
    source: str


def cuda_context(gpu: GPU) -> Overhead:
    """CUDA context + torch/cuBLAS handles per process per GPU: 300-700 MB reported
    (pytorch#20532, #107667, #28113; shared/specs/perf.md §1.2). ROCm contexts are larger."""
    if gpu.vendor == "amd":
        return Overhead("cuda_context", int(1.0 * GiB), int(0.5 * GiB), int(4.0 * GiB),
                        "ROCm context + HIP runtime; SGLang on MI355X logged 3.81 GB at init (shared/logs)")
    return Overhead("cuda_context", 512 * MiB, 300 * MiB, 1024 * MiB,
                    "pytorch#20532/#107667: ~300-400 MB with lazy loading, up to 700 MB")


def communicators(gpu: GPU, world_size: int, custom_all_reduce: bool) -> Overhead:
    """NCCL (PyNccl) communicator buffers plus custom all-reduce IPC buffers, before the baseline.

    NCCL: ~0.15 GiB per peer on PCIe (estimated from the origin case, 95.59 GiB total vs ~94 GiB
    free at TP 8, and the 4x L4 QwQ log, 22.49 vs 21.63 GiB at TP 4, minus the context);
    NVLink parts also map NVLS/P2P buffers (bounded high at 2 GiB).
    Custom AR: ``3 x 8 MiB + meta`` local allocations (custom_all_reduce.py ``_MAX_CAR_SIZE = 8192*1024``,
    sglang @ v0.5.23 and vllm) when it is enabled.
    """
    if world_size <= 1:
        return Overhead("communicators", 0, 0, 0, "single GPU: no NCCL communicator")
    peers = world_size - 1
    est = int(0.15 * GiB) * peers
    high = max(est * 2, 2 * GiB)
    if custom_all_reduce:
        est += 3 * 8 * MiB + 1 * MiB
    return Overhead("communicators", est, est // 4, high,
                    "estimated: NCCL buffers ~0.15 GiB/peer (fit to shared/logs origin + L4 cases) "
                    "+ custom all-reduce 3 x 8 MiB (custom_all_reduce.py)")


def custom_all_reduce_enabled(gpu: GPU, world_size: int) -> bool:
    """``can_use_custom_all_reduce_with_nvlink`` (sglang custom_all_reduce_utils.py @ v0.5.23; vLLM same rule):
    world size in {2,4,6,8}, and ``world_size > 2 and not full_nvlink`` disables it."""
    if world_size not in (2, 4, 6, 8):
        return False
    if world_size > 2 and not gpu.interconnect.is_full_nvlink:
        return False
    return True
