"""SGLang's memory profile: THE one home of the budget algebra.

    rest = available − pre × (1 − mem_fraction_static) [− mm reservation] [− mamba state]
    max_total_num_tokens = int(rest × 2^30) // cell

``profile`` (the engine's formula, per release), and its inversions: ``fraction_for`` (the fraction
that leaves a given budget), ``min_viable_fraction`` (the fraction that holds one page of KV) and
``tokens_per_fraction_step``. Sources: ``profile_max_num_token`` (model_runner.py <= 0.5.6, mixin
0.5.7-0.5.13), ``_profile_available_bytes`` + ``DefaultPoolConfigurator`` (0.5.14+;
kv_cache_configurator.py 0.5.18+), ``utils/common.py::get_available_gpu_memory``. Conformance-tested
(tests/conformance/test_sglang_memory.py, test_sglang_pools.py::test_profile_mm_reservation_and_mamba).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Sequence

from .mamba import MambaCarve, handle_max_mamba_cache
from .release import SGLangRelease

GIB = 1 << 30

def available_gib(free_bytes: Sequence[int], distributed: bool) -> float:
    """``get_available_gpu_memory`` (utils/common.py @ v0.5.23): MIN over ranks of device free
    bytes, all-reduced as a float32 tensor when distributed, returned as bytes / 2**30."""
    free = min(free_bytes)
    if distributed:
        free = struct.unpack("f", struct.pack("f", float(free)))[0]
    return free / (1 << 30)



@dataclass(frozen=True)
class Profile:
    """The sizing decision: named inputs and outputs (GiB floats as SGLang computes them)."""

    pre_model_load_gib: float
    available_gpu_gib: float
    mem_fraction_static: float
    slack_gib: float
    mm_reservation_gib: float
    mamba_state_gib: float
    rest_memory_gib: float
    rest_memory_bytes: int
    cell_bytes: int
    profiled_tokens: int  # before page rounding / caps (may be negative in the classic path)
    error: str | None  # the ValueError (>=0.5.14) when rest <= 0


def mm_reservation_gib(rel: SGLangRelease, is_multimodal: bool, mm_feature_transport: str | None = None,
                       vlm_cache_mb: int = 100, feature_cache_mb: int = 1024) -> float:
    """``mm_runtime_reservation_gb`` (kv_cache_configurator.py @ v0.5.23, new in 0.5.18):
    SGLANG_VLM_CACHE_SIZE_MB (100) [+ SGLANG_MM_FEATURE_CACHE_MB (1024) for cuda_ipc/cuda_vmm], / 1024."""
    if not is_multimodal or not rel.mm_reservation:
        return 0.0
    mb = vlm_cache_mb + (feature_cache_mb if mm_feature_transport in ("cuda_ipc", "cuda_vmm") else 0)
    return mb / 1024


def value_error_text(mfs: float, available_gib_: float, pre_gib: float) -> str:
    """The ValueError of ``_profile_available_bytes`` (mixin @ v0.5.14; kv_cache_configurator.py @ v0.5.23)."""
    minimum = 1 - available_gib_ / pre_gib
    suggested = math.ceil(minimum * 1000) / 1000
    return (f"ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={mfs}. Raise --mem-fraction-static above {suggested:.3f} "
            f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, "
            f"draft weights are now counted.")


def profile(rel: SGLangRelease, *, pre_model_load_gib: float, available_gpu_gib: float, mem_fraction_static: float,
            cell_bytes: int, mm_reservation: float = 0.0, mamba_per_req_bytes: int = 0,
            mamba_ratio: float = 0.9, max_mamba_cache_size: int | None = None, disable_radix_cache: bool = False,
            max_running_requests: int | None = None, attn_dp_size: int = 1,
            speculative_num_draft_tokens: int | None = None, mamba_is_gdn: bool = True,
            ) -> tuple[Profile, MambaCarve | None]:
    """``profile_max_num_token`` (<0.5.14) / ``_profile_available_bytes`` + ``DefaultPoolConfigurator`` (>=0.5.14).

    rest = available − pre × (1 − mfs) [− mm reservation (>=0.5.18)] [− mamba state];
    classic: tokens = int(rest × 2^30) // cell (no clamp: may be negative);
    current: rest <= 0 raises ValueError; else tokens = int(rest × 2^30) // cell.
    """
    slack = pre_model_load_gib * (1 - mem_fraction_static)
    rest = available_gpu_gib - slack - mm_reservation
    carve = None
    mamba_gib = 0.0
    if mamba_per_req_bytes:
        carve = handle_max_mamba_cache(rel, rest, mamba_per_req_bytes, ratio=mamba_ratio,
                                       max_mamba_cache_size=max_mamba_cache_size,
                                       disable_radix_cache=disable_radix_cache,
                                       max_running_requests=max_running_requests, attn_dp_size=attn_dp_size,
                                       speculative_num_draft_tokens=speculative_num_draft_tokens,
                                       is_gdn=mamba_is_gdn)
        if carve.error is not None:
            return Profile(pre_model_load_gib, available_gpu_gib, mem_fraction_static, slack, mm_reservation, 0.0,
                           carve.rest_gib, 0, cell_bytes, 0, carve.error), carve
        mamba_gib = rest - carve.rest_gib
        rest = carve.rest_gib
    error = None
    if rel.no_kv_value_error and rest <= 0:
        error = value_error_text(mem_fraction_static, available_gpu_gib, pre_model_load_gib)
        tokens = 0
        rest_bytes = 0
    else:
        rest_bytes = int(rest * (1 << 30))
        tokens = rest_bytes // cell_bytes if cell_bytes else 0
    return Profile(pre_model_load_gib, available_gpu_gib, mem_fraction_static, slack, mm_reservation, mamba_gib,
                   rest, rest_bytes, cell_bytes, tokens, error), carve


def tokens_per_fraction_step(pre_model_load_gib: float, cell_bytes: int, step: float = 0.01) -> int:
    """KV tokens one ``step`` of mem_fraction_static buys: pre × step GiB / cell."""
    return int(pre_model_load_gib * step * (1 << 30)) // cell_bytes if cell_bytes else 0


def min_viable_fraction(*, pre_model_load_gib: float, available_gpu_gib: float, reserve_gib: float,
                        need_bytes: int) -> float:
    """Smallest mem_fraction_static whose budget holds ``need_bytes`` (e.g. one page of KV):
    available − pre (1 − f) − reserve ≥ need  ⇔  f ≥ 1 − (available − reserve − need) / pre."""
    return fraction_for(pre_model_load_gib=pre_model_load_gib, available_gpu_gib=available_gpu_gib,
                        budget_gib=need_bytes / GIB, reserve_gib=reserve_gib)


def kv_budget_gib(*, pre_model_load_gib: float, available_gpu_gib: float, mem_fraction_static: float,
                  reserve_gib: float = 0.0) -> float:
    """The budget before the cell division: ``available − pre × (1 − f) − reserve`` (GiB)."""
    return available_gpu_gib - pre_model_load_gib * (1 - mem_fraction_static) - reserve_gib


def fraction_for(*, pre_model_load_gib: float, available_gpu_gib: float, budget_gib: float,
                 reserve_gib: float = 0.0) -> float:
    """The ``mem_fraction_static`` whose profile leaves ``budget_gib`` (the inversion of
    :func:`kv_budget_gib`): ``f = 1 − (available − reserve − budget) / pre``. With the printed KV size
    as the budget it is the effective fraction a log implies; with one page of KV, the minimum."""
    return 1 - (available_gpu_gib - reserve_gib - budget_gib) / pre_model_load_gib
