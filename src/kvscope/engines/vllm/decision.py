"""The typed records of a vLLM plan: the per-rank sizing decision and the plan-wide extra figures.

Field names are the documented JSON keys, in their JSON order (``Record.to_dict``). Byte figures are
integers; ``requested_memory_bytes`` is an int as well (vLLM's float ``total x util`` before 0.14 is
truncated for the record, as it always was). One DP engine is planned (DP ranks are separate engines
with the same numbers); ``decision`` is the same for the TP ranks of one PP stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...record import Record


@dataclass(frozen=True)
class VllmDecision(Record):
    """One rank's sizing decision (``RankTimeline.decision`` of a vLLM plan; one PP stage's worker)."""

    requested_memory_bytes: int  # request_memory(): ceil(total x gpu_memory_utilization) (0.14+), bytes
    gpu_memory_utilization: float  # the fraction after vLLM's default (0.9, or 0.92 from 0.20)
    initial_free_bytes: int  # free memory at init_snapshot (after CUDA context + NCCL), bytes
    weights_bytes: int  # "Model loading took": this stage's weights, bytes
    activation_peak_bytes: int  # torch_peak_increase of the profile run, bytes
    activation_peak_bounds: tuple[int, int]  # (low, high) bounds of that estimate, bytes
    non_torch_bytes: int  # non_torch_increase since init_snapshot, bytes
    cudagraph_estimate_bytes: int  # profile_cudagraph_memory's estimate, bytes (0 with --enforce-eager)
    cudagraph_applied_bytes: int  # the part subtracted from the budget (0 before 0.20), bytes
    non_kv_cache_memory_bytes: int  # weights + activation peak + non-torch (+ unreleased), bytes
    available_kv_cache_bytes: int  # this stage's available KV memory as given to the planner, bytes
    formula: str  # determine_available_memory's formula for this release
    pp_layers: tuple[int, int]  # [first, last) decoder layers of this PP stage
    bytes_per_block: int  # bytes of one block over this worker's KV cache groups
    num_gpu_blocks: int  # blocks per worker (min over the DP engine's workers)
    kv_cache_tokens: int  # "GPU KV cache size: N tokens"
    max_concurrency: float  # "Maximum concurrency for L tokens per request: X" (unrounded)
    needed_memory_bytes: int  # KV one max_model_len request needs (the admission check's figure), bytes
    error: str | None  # the admission check's (or auto-fit's) error text; None when it passes
    sources: Mapping[str, str]  # figure name -> where it came from (estimate formula or "measured")


@dataclass(frozen=True)
class VllmKVCacheGroup(Record):
    """One KV cache group of the first worker, as ``extra.kv_cache_groups`` lists it."""

    kind: str  # full | mla | sliding_window | chunked_local | mamba (DeepSeek-V4: its packed kinds)
    num_layers: int  # layers in the group
    page_size_bytes: int  # bytes of one block of one layer (the packed sum for DeepSeek-V4)
    block_size: int  # tokens per block of this group


@dataclass(frozen=True)
class VllmPlanExtra(Record):
    """The plan-wide figures of a vLLM plan (``Timeline.extra``; top-level JSON keys)."""

    num_gpu_blocks: int  # num_gpu_blocks after the min over workers and the override
    available_kv_cache_bytes: int  # min over workers of the available KV memory, bytes
    max_concurrency: float  # "Maximum concurrency" rounded to 4 places
    max_model_len: int  # after _get_and_verify_max_len and auto-fit
    gpu_memory_utilization: float  # the fraction after vLLM's default
    requested_memory_bytes: int  # request_memory()'s budget, bytes
    block_size: int  # attention block size after the backend and hybrid alignment
    attention_backend: str | None  # vLLM's backend name (None: not modelled for this release / GPU)
    block_size_source: str  # why this block size (the engine rule, or "flag")
    bytes_per_block: int  # first worker's bytes per block
    kv_cache_groups: tuple[VllmKVCacheGroup, ...]  # first worker's groups
    max_num_batched_tokens: int  # after vLLM's defaults (the profile run's token count)
    kv_cache_dtype: str  # after the MLA backend's canonicalisation (e.g. fp8_ds_mla)
    tensor_parallel_size: int  # TP size
    pipeline_parallel_size: int  # PP size
    data_parallel_size: int  # DP size (engines planned: one)
    estimated_max_model_len: int | None = None  # the admission error's estimate; left out of the JSON when None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.estimated_max_model_len is None:
            del out["estimated_max_model_len"]
        return out
