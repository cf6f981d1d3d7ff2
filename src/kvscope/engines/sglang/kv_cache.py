"""SGLang's KV cell: bytes per token of ``max_total_num_tokens`` on one rank (the KV dtype, MHA/MLA
cells, the DSA indexer, FP4 / mxfp8 scales, the EAGLE/MTP draft share).

``profile_max_num_token`` (model_runner.py <= 0.5.6, inline), ``get_cell_size_per_token``
(model_runner_kv_cache_mixin.py 0.5.7-0.5.17), ``DefaultPoolConfigurator._compute_cell_size``
(pool_configurator.py 0.5.13+, kv_cache_configurator.py 0.5.18+). Conformance-tested
(tests/conformance/test_sglang_memory.py, test_sglang_pools.py::test_cell_variants). DeepSeek-V4
has no cell: the plan dispatches to ``deepseek_v4.cell_size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ...errors import FlagError
from ...model.spec import ModelSpec
from .release import SGLangRelease

KV_DTYPES = {
    "auto": None, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "fp8": 1, "mxfp8": 1, "fp4_e2m1": 1, "nvfp4": 1, "fp4_mx_block16": 1, "float32": 4,
}


def kv_cache_dtype(spec: ModelSpec, kv_cache_dtype_flag: str) -> tuple[str, int]:
    """(dtype name, element bytes) — ``configure_kv_cache_dtype`` (mem_cache/kv_cache_dtype.py @ v0.5.23):
    ``auto`` is the model dtype unless the checkpoint's quant config declares an FP8 KV cache."""
    flag = kv_cache_dtype_flag.lower()
    if flag not in KV_DTYPES:
        raise FlagError(f"unknown --kv-cache-dtype {kv_cache_dtype_flag!r}", field="--kv-cache-dtype",
                        fix="use auto, bf16, fp8_e4m3, fp8_e5m2, mxfp8 or nvfp4")
    if flag == "auto":
        if (spec.quant.kv_cache_quant_algo or "").upper() == "FP8":
            return "float8_e4m3fn", 1
        return spec.dtype, spec.dtype_bytes
    names = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "fp8": "float8_e4m3fn",
             "mxfp8": "mxfp8", "fp4_e2m1": "float4_e2m1fn_x2", "nvfp4": "float4_e2m1fn_x2",
             "fp4_mx_block16": "float4_e2m1fn_x2", "bf16": "bfloat16", "fp16": "float16"}
    return names.get(flag, flag), KV_DTYPES[flag]


@dataclass(frozen=True)
class CellSize:
    """Bytes per token of ``max_total_num_tokens`` on one rank, and its parts."""

    cell_bytes: int  # what the profile divides by (for SWA: F*n_full + S*n_swa; see swa_*)
    full_layer_bytes: int  # per token per full-attention layer (incl. DSA indexer)
    num_full_layers: int
    swa_layer_bytes: int = 0
    num_swa_layers: int = 0
    draft_bytes: int = 0  # EAGLE/MTP draft KV share added to the target cell (>=0.5.14)
    formula: str = ""
    # Bytes per token the target's KV buffers really hold (no draft). Differs from the cell for DSA fp8
    # before 0.5.18: the pool is 656-wide, the profile divides by 576 (see mla_kv_cache_dim). 0 = the cell.
    pool_bytes_per_token: int = 0


FP4_FLAGS = ("fp4_e2m1", "nvfp4", "fp4_mx_block16")
DSA_QUANT_BLOCK = 128  # DSATokenToKVPool.quant_block_size (NSATokenToKVPool @ v0.5.6/0.5.9), memory_pool.py
DSA_ROPE_BYTES = 2  # DSATokenToKVPool.rope_storage_dtype = bfloat16


def _is_e4m3(kv_flag: str, e: int) -> bool:
    """``kv_cache_dtype == torch.float8_e4m3fn``: fp8_e4m3, mxfp8 (0.5.18+) and an ``auto`` FP8 checkpoint."""
    return kv_flag in ("fp8_e4m3", "fp8", "mxfp8") or (kv_flag == "auto" and e == 1)


def mla_kv_cache_dim(spec: ModelSpec, rel: SGLangRelease, kv_flag: str, e: int, dsa_raw_layout: bool = False,
                     buffer: bool = False) -> int:
    """``calculate_mla_kv_cache_dim`` (kv_cache_configurator.py @ v0.5.18/0.5.23): ``kv_lora + rope``, or for
    DSA models with a float8_e4m3fn KV and a scaled-layout backend (not trtllm, not tilelang+tilelang, not
    HIP raw): ``kv_lora + kv_lora//128*4 + rope*2``. Before 0.5.18 the cell used ``kv_lora + rope``
    (the override sized only the pool buffers: mixin ``get_cell_size_per_token`` @ v0.5.9,
    ``_compute_cell_size`` @ v0.5.13/0.5.14) — ``buffer=True`` gives that buffer width (from 0.5.7; the
    mixin's ``calculate_mla_kv_cache_dim`` @ v0.5.9 l.212; a 0.5.8 GLM-5 log prints it)."""
    dim = spec.kv_lora_rank + spec.qk_rope_head_dim
    scaled = rel.dsa_fp8_scaled_buffer if buffer else rel.dsa_fp8_scaled_cell
    if (scaled and spec.has_dsa_indexer and not dsa_raw_layout and _is_e4m3(kv_flag, e)):
        return spec.kv_lora_rank + spec.kv_lora_rank // DSA_QUANT_BLOCK * 4 + spec.qk_rope_head_dim * DSA_ROPE_BYTES
    return dim


def dsa_indexer_bytes(spec: ModelSpec, num_layers: int) -> int:
    """The DSA indexer's uint8 K + fp32 scale per 128 per token: ``(index_head_dim + index_head_dim//128*4)
    * layers`` (``ceil_div(…, index_kpool=1)`` @ v0.5.23; ``_compute_dsa_indexer_cell_size`` @ v0.5.18;
    inline @ v0.5.6 … v0.5.14). Every layer computes its own top-k (no ``index_topk_freq`` skipping)."""
    if not spec.has_dsa_indexer:
        return 0
    d = spec.index_head_dim
    return (d + d // DSA_QUANT_BLOCK * 4) * num_layers


def per_layer_bytes(spec: ModelSpec, rel: SGLangRelease, attn_tp: int, e: int, kv_flag: str) -> tuple[int, str]:
    """Bytes per token per attention layer on one rank (the one-layer cell; used for SWA pool geometry,
    buffers and reports)."""
    if spec.is_mla:
        dim = mla_kv_cache_dim(spec, rel, kv_flag, e)
        text = f"MLA ({spec.kv_lora_rank}+{spec.qk_rope_head_dim}) x {e} B, replicated on every rank"
        if dim != spec.kv_lora_rank + spec.qk_rope_head_dim:
            text = f"DSA fp8 latent {dim} B (scales + bf16 rope), replicated on every rank"
        if spec.has_dsa_indexer:
            text += f" + DSA indexer {dsa_indexer_bytes(spec, 1)} B"
        return engine_cell(spec, rel, attn_tp, e, kv_flag, 1), text
    n = max(1, spec.num_key_value_heads // attn_tp)
    text = f"{n} KV head(s)/rank x ({spec.head_dim}+{spec.v_head_dim}) x {e} B"
    return engine_cell(spec, rel, attn_tp, e, kv_flag, 1, workspace=False), text


def fp4_recipe_cell_bytes(kv_flag: str, n: int, head_dim: int, layers: int, e: int,
                          attention_backends: tuple[str, str], sm100: bool, workspace: bool = True) -> int:
    """FP4 MHA cell after 0.5.20: the recipe's ``compute_cell_size``
    (layers/quantization/fp4_kv_cache_quant_method.py @ v0.5.23), given the (prefill, decode) attention
    backends. Packed FP4 ``n*(head_dim//2)*L*2*e``, plus:

    * ``fp4_mx_block16``: one scale per 16 values, ``(n*head_dim//16)*L*2*e``;
    * ``nvfp4``: a FlashInfer prefill dequantizes into a shared FP8 workspace ``n*head_dim*2*e``
      and needs token-linear scales; ``trtllm_mha`` reads FP4 natively, with SM100's GenMHA scale
      layout (else the linear one). Each scale layout is ``n*(head_dim//16)*L*2*e``.
    """
    prefill, decode = attention_backends
    fp4 = n * (head_dim // 2) * layers * 2 * e
    if kv_flag == "fp4_mx_block16":
        return fp4 + (n * head_dim // 16) * layers * 2 * e
    dq = prefill == "flashinfer"
    native = prefill == "trtllm_mha" or decode == "trtllm_mha"
    layouts = int(dq or (native and not sm100)) + int(native and sm100)
    return fp4 + n * (head_dim // 16) * layers * 2 * e * layouts + (n * head_dim * 2 * e if dq and workspace else 0)


def engine_cell(spec: ModelSpec, rel: SGLangRelease, attn_tp: int, e: int, kv_flag: str, layers: int,
                 workspace: bool = True, buffer: bool = False,
                 attention_backends: tuple[str, str] | None = None, sm100: bool = True) -> int:
    """The cell over ``layers`` layers, with the engine's integer rounding on the total:

    * MLA: ``dim * L * e``; FP4: ``cell//2 + ((kv_lora+rope)//16) * L * e``; DSA: + indexer.
    * MHA (0.4.6/0.5.6 inline ``profile_max_num_token``): ``n * head_dim * L * 2 * e``;
      (0.5.7+): ``n * (head_dim + v_head_dim) * L * e``; FP4: ``cell//2 + (n*head_dim*L*2*e)//16``
      (+ ``n*head_dim*2*e`` shared dequant workspace from 0.5.18); mxfp8 (0.5.18+):
      ``+ n*(head_dim+v_head_dim)*L // 32``.
    """
    fp4 = kv_flag in FP4_FLAGS
    if spec.is_mla:
        cell = mla_kv_cache_dim(spec, rel, kv_flag, e, buffer=buffer) * layers * e
        if fp4:
            cell = cell // 2 + ((spec.kv_lora_rank + spec.qk_rope_head_dim) // 16) * layers * e
        return cell + dsa_indexer_bytes(spec, layers)
    n = max(1, spec.num_key_value_heads // attn_tp)
    if rel.mha_cell_v_head_dim:
        cell = n * (spec.head_dim + spec.v_head_dim) * layers * e
    else:
        cell = n * spec.head_dim * layers * 2 * e  # v_head_dim ignored
    if fp4 and rel.fp4_recipe_cell:
        backends = attention_backends or ("flashinfer", "flashinfer")
        return fp4_recipe_cell_bytes(kv_flag, n, spec.head_dim, layers, e, backends, sm100, workspace)
    if fp4:
        cell = cell // 2 + (n * spec.head_dim * layers * 2 * e) // 16
        if rel.fp4_dequant_workspace and workspace:
            cell += n * spec.head_dim * 2 * e  # one FP8 dequant workspace shared across layers
    elif kv_flag == "mxfp8" and rel.mxfp8_scales:
        cell += n * (spec.head_dim + spec.v_head_dim) * layers // 32
    return cell


def draft_cell_bytes(spec: ModelSpec, rel: SGLangRelease, target_cell: int, num_layers: int, draft_layers: int) -> int:
    """What EAGLE/STANDALONE adds to the target cell when the draft is in the budget (>=0.5.14;
    ``DefaultPoolConfigurator.__init__``): 0.5.14-0.5.17 ``int(cell * (1 + d/L)) - cell``; 0.5.18+ for
    DSA targets ``int((cell - indexer(L)) * d / L) + indexer(d)``, else ``int(cell * (1 + d/L)) - cell``
    (0.5.18-0.5.20) / ``int(cell * d / L)`` (after 0.5.20). "Assumes draft and target share the same
    per-layer KV size" (the engine's comment)."""
    if not rel.draft_in_budget or draft_layers <= 0 or num_layers <= 0:
        return 0
    if rel.draft_cell_dsa_indexer_split and spec.is_mla and spec.has_dsa_indexer:
        target_kv = target_cell - dsa_indexer_bytes(spec, num_layers)
        return int(target_kv * draft_layers / num_layers) + dsa_indexer_bytes(spec, draft_layers)
    if rel.draft_cell_share:
        return int(target_cell * draft_layers / int(num_layers))
    return int(target_cell * (1 + draft_layers / int(num_layers))) - target_cell


def cell_size(spec: ModelSpec, rel: SGLangRelease, *, attn_tp: int, kv_bytes: int, kv_flag: str = "auto",
              layer_ids: Sequence[int] | None = None, draft_layers: int = 0, draft_in_budget: bool = False,
              attention_backends: tuple[str, str] | None = None,
              sm100: bool = True) -> CellSize:
    """``profile_max_num_token`` (<=0.5.6, inline) / ``get_cell_size_per_token`` (mixin @ v0.5.9) /
    ``DefaultPoolConfigurator._compute_cell_size`` + ``__init__`` (pool_configurator.py @ v0.5.13 … v0.5.23).

    ``layer_ids``: this PP stage's decoder layers. Linear-attention/mamba layers hold no KV.
    ``draft_in_budget`` (>=0.5.14, EAGLE/MTP/STANDALONE): :func:`draft_cell_bytes` is added.
    ``attention_backends`` (prefill, decode) and ``sm100`` select the FP4 MHA recipe's layouts after
    0.5.20 (:func:`fp4_recipe_cell_bytes`; FlashInfer for both when not given).
    """
    ids = range(spec.num_hidden_layers) if layer_ids is None else layer_ids
    kinds = [spec.layer_types[i] for i in ids]
    n_full = sum(1 for k in kinds if k == "full_attention")
    n_swa = sum(1 for k in kinds if k == "sliding_attention")
    kv_flag = kv_flag.lower()
    per, text = per_layer_bytes(spec, rel, attn_tp, kv_bytes, kv_flag)
    cell = engine_cell(spec, rel, attn_tp, kv_bytes, kv_flag, n_full + n_swa,
                       attention_backends=attention_backends, sm100=sm100)
    if spec.is_mla and spec.has_dsa_indexer and not rel.dsa_indexer_in_profile:
        # 0.5.3 divides by the MLA cell alone; the pool still allocates the indexer (model_runner.py @ v0.5.3)
        cell -= dsa_indexer_bytes(spec, n_full + n_swa)
        text += " (indexer not in the 0.5.3 profile)"
    draft = 0
    if draft_in_budget and draft_layers and (n_full + n_swa):
        draft = draft_cell_bytes(spec, rel, cell, n_full + n_swa, draft_layers)
        cell += draft
    formula = f"{text} x {n_full + n_swa} layers" + (f" + draft {draft} B" if draft else "")
    pool = engine_cell(spec, rel, attn_tp, kv_bytes, kv_flag, n_full + n_swa, buffer=True,
                       attention_backends=attention_backends, sm100=sm100)
    return CellSize(cell_bytes=cell, full_layer_bytes=per, num_full_layers=n_full, swa_layer_bytes=per if n_swa else 0,
                    num_swa_layers=n_swa, draft_bytes=draft, formula=formula, pool_bytes_per_token=pool)
