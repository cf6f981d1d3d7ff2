"""Decode attention kernels whose grid, not the GPU's bandwidth, bounds the KV read at small batch [E].

vLLM's MLA backend on NVIDIA GPUs other than SM90 (FlashAttention-MLA, FlashMLA) and SM100 (CUTLASS MLA,
FlashInfer MLA) is ``TRITON_MLA`` (vllm 0.12.0 ``platforms/cuda.py`` ``_get_backend_priorities``;
``FlashMLA Dense is only supported on Hopper``): A100, L40S/RTX 4090, RTX PRO 6000/RTX 5090. Its decode
launches the grid ``(batch, cdiv(heads, min(BLOCK_H=16, kv_group_num)), num_kv_splits=4)``
(``v1/attention/backends/mla/triton_mla.py``: ``num_kv_splits = ... 4``;
``attention/ops/triton_decode_attention.py`` ``_decode_grouped_att_m_fwd``). One sequence with 8 heads
per rank is 4 CTAs streaming the whole latent cache of every layer: at 150K tokens that, not HBM, is the
decode step. The read then runs at ``min(eta x BW, CTAs x split_kv_cta_gbps)`` (perf/params.py).
"""

from __future__ import annotations

import math

from ..model.spec import ModelSpec

TRITON_MLA_KV_SPLITS = 4
TRITON_MLA_BLOCK_H = 16
TRITON_MLA_SMS = ("sm80", "sm86", "sm87", "sm89", "sm120", "sm121")  # NVIDIA archs without FlashMLA/CUTLASS MLA


def split_kv_ctas(spec: ModelSpec, gpu_sm: str, engine: str, batch: int, attn_tp: int) -> int | None:
    """CTAs of the decode-attention grid when it is fixed and small (vLLM TRITON_MLA), else None."""
    if engine != "vllm" or not spec.is_mla or gpu_sm not in TRITON_MLA_SMS:
        return None
    heads = max(1, spec.num_attention_heads // max(1, attn_tp))
    return batch * math.ceil(heads / min(TRITON_MLA_BLOCK_H, heads)) * TRITON_MLA_KV_SPLITS
