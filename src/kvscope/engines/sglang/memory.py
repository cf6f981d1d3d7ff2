"""SGLang's KV-cache sizing: cell size, the profile formula, page rounding, request limits, errors.

Pure functions, version by version. Sources (released wheels):
``model_executor/model_runner.py`` (<=0.5.6), ``model_executor/model_runner_kv_cache_mixin.py``
(0.5.7-0.5.17), ``model_executor/pool_configurator.py`` (0.5.11+),
``mem_cache/kv_cache_configurator.py`` (0.5.18+), ``mem_cache/allocation_sizing.py`` (0.5.18+),
``configs/mamba_utils.py``, ``utils/common.py::get_available_gpu_memory``.

Conformance-tested against those files for 0.4.6.post5, 0.5.6, 0.5.9, 0.5.13, 0.5.14, 0.5.18 and
0.5.23 (tests/conformance/test_sglang_memory.py, test_sglang_pools.py; docs/conformance.md):
``cell_size``, ``profile``, ``mm_reservation_gib``, ``handle_max_mamba_cache``,
``mamba_state_bytes_per_req``, ``request_pools`` (with ``max_num_reqs`` and the ``req_to_token``
helpers), ``hybrid_swa_pools`` and the error texts. A version gate sits at the first release read
that has the change (the pinned wheels plus the 0.5.10-0.5.12, 0.5.15 and 0.5.20 sources); changes
between two read releases are gated at the later one.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Sequence

from packaging.version import Version

from ...errors import FlagError
from ...model.spec import ModelSpec
from .args import at_least

GIB = 1 << 30


# --------------------------------------------------------------------------------------------
# Measuring


def available_gib(free_bytes: Sequence[int], distributed: bool) -> float:
    """``get_available_gpu_memory`` (utils/common.py @ v0.5.23): MIN over ranks of device free
    bytes, all-reduced as a float32 tensor when distributed, returned as bytes / 2**30."""
    free = min(free_bytes)
    if distributed:
        free = struct.unpack("f", struct.pack("f", float(free)))[0]
    return free / (1 << 30)


# --------------------------------------------------------------------------------------------
# KV dtype and cell size

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


def mla_kv_cache_dim(spec: ModelSpec, v: Version, kv_flag: str, e: int, dsa_raw_layout: bool = False,
                     buffer: bool = False) -> int:
    """``calculate_mla_kv_cache_dim`` (kv_cache_configurator.py @ v0.5.18/0.5.23): ``kv_lora + rope``, or for
    DSA models with a float8_e4m3fn KV and a scaled-layout backend (not trtllm, not tilelang+tilelang, not
    HIP raw): ``kv_lora + kv_lora//128*4 + rope*2``. Before 0.5.18 the cell used ``kv_lora + rope``
    (the override sized only the pool buffers: mixin ``get_cell_size_per_token`` @ v0.5.9,
    ``_compute_cell_size`` @ v0.5.13/0.5.14) — ``buffer=True`` gives that buffer width (from 0.5.7; the
    mixin's ``calculate_mla_kv_cache_dim`` @ v0.5.9 l.212; a 0.5.8 GLM-5 log prints it)."""
    dim = spec.kv_lora_rank + spec.qk_rope_head_dim
    since = "0.5.7" if buffer else "0.5.18"
    if (at_least(v, since) and spec.has_dsa_indexer and not dsa_raw_layout and _is_e4m3(kv_flag, e)):
        return spec.kv_lora_rank + spec.kv_lora_rank // DSA_QUANT_BLOCK * 4 + spec.qk_rope_head_dim * DSA_ROPE_BYTES
    return dim


def dsa_indexer_bytes(spec: ModelSpec, v: Version, num_layers: int) -> int:
    """The DSA indexer's uint8 K + fp32 scale per 128 per token: ``(index_head_dim + index_head_dim//128*4)
    * layers`` (``ceil_div(…, index_kpool=1)`` @ v0.5.23; ``_compute_dsa_indexer_cell_size`` @ v0.5.18;
    inline @ v0.5.6 … v0.5.14). Every layer computes its own top-k (no ``index_topk_freq`` skipping)."""
    if not spec.has_dsa_indexer:
        return 0
    d = spec.index_head_dim
    return (d + d // DSA_QUANT_BLOCK * 4) * num_layers


def _per_layer_bytes(spec: ModelSpec, v: Version, attn_tp: int, e: int, kv_flag: str) -> tuple[int, str]:
    """Bytes per token per attention layer on one rank (the one-layer cell; used for SWA pool geometry,
    buffers and reports)."""
    if spec.is_mla:
        dim = mla_kv_cache_dim(spec, v, kv_flag, e)
        text = f"MLA ({spec.kv_lora_rank}+{spec.qk_rope_head_dim}) x {e} B, replicated on every rank"
        if dim != spec.kv_lora_rank + spec.qk_rope_head_dim:
            text = f"DSA fp8 latent {dim} B (scales + bf16 rope), replicated on every rank"
        if spec.has_dsa_indexer:
            text += f" + DSA indexer {dsa_indexer_bytes(spec, v, 1)} B"
        return _engine_cell(spec, v, attn_tp, e, kv_flag, 1), text
    n = max(1, spec.num_key_value_heads // attn_tp)
    text = f"{n} KV head(s)/rank x ({spec.head_dim}+{spec.v_head_dim}) x {e} B"
    return _engine_cell(spec, v, attn_tp, e, kv_flag, 1, workspace=False), text


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


def _engine_cell(spec: ModelSpec, v: Version, attn_tp: int, e: int, kv_flag: str, layers: int,
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
        cell = mla_kv_cache_dim(spec, v, kv_flag, e, buffer=buffer) * layers * e
        if fp4:
            cell = cell // 2 + ((spec.kv_lora_rank + spec.qk_rope_head_dim) // 16) * layers * e
        return cell + dsa_indexer_bytes(spec, v, layers)
    n = max(1, spec.num_key_value_heads // attn_tp)
    if not at_least(v, "0.5.7"):
        # model_runner.py @ v0.4.6.post5 / @ v0.5.6 (l.1417-1423): v_head_dim ignored.
        cell = n * spec.head_dim * layers * 2 * e
    else:
        cell = n * (spec.head_dim + spec.v_head_dim) * layers * e
    if fp4 and at_least(v, "0.5.21"):  # conformance: 0.5.20 without, 0.5.21 with
        backends = attention_backends or ("flashinfer", "flashinfer")
        return fp4_recipe_cell_bytes(kv_flag, n, spec.head_dim, layers, e, backends, sm100, workspace)
    if fp4:
        cell = cell // 2 + (n * spec.head_dim * layers * 2 * e) // 16
        if at_least(v, "0.5.18") and workspace:
            cell += n * spec.head_dim * 2 * e  # one FP8 dequant workspace shared across layers
    elif kv_flag == "mxfp8" and at_least(v, "0.5.18"):
        cell += n * (spec.head_dim + spec.v_head_dim) * layers // 32
    return cell


def draft_cell_bytes(spec: ModelSpec, v: Version, target_cell: int, num_layers: int, draft_layers: int) -> int:
    """What EAGLE/STANDALONE adds to the target cell when the draft is in the budget (>=0.5.14;
    ``DefaultPoolConfigurator.__init__``): 0.5.14-0.5.17 ``int(cell * (1 + d/L)) - cell``; 0.5.18+ for
    DSA targets ``int((cell - indexer(L)) * d / L) + indexer(d)``, else ``int(cell * (1 + d/L)) - cell``
    (0.5.18-0.5.20) / ``int(cell * d / L)`` (after 0.5.20). "Assumes draft and target share the same
    per-layer KV size" (the engine's comment)."""
    if not at_least(v, "0.5.14") or draft_layers <= 0 or num_layers <= 0:
        return 0
    if at_least(v, "0.5.18") and spec.is_mla and spec.has_dsa_indexer:
        target_kv = target_cell - dsa_indexer_bytes(spec, v, num_layers)
        return int(target_kv * draft_layers / num_layers) + dsa_indexer_bytes(spec, v, draft_layers)
    if at_least(v, "0.5.22"):  # conformance: 0.5.21 still the (1 + d/n) form, 0.5.22 d/n
        return int(target_cell * draft_layers / int(num_layers))
    return int(target_cell * (1 + draft_layers / int(num_layers))) - target_cell


def cell_size(spec: ModelSpec, v: Version, *, attn_tp: int, kv_bytes: int, kv_flag: str = "auto",
              layer_ids: Sequence[int] | None = None, draft_layers: int = 0, draft_spec: ModelSpec | None = None,
              draft_in_budget: bool = False, attention_backends: tuple[str, str] | None = None,
              sm100: bool = True) -> CellSize:
    """``profile_max_num_token`` (<=0.5.6, inline) / ``get_cell_size_per_token`` (mixin @ v0.5.9) /
    ``DefaultPoolConfigurator._compute_cell_size`` + ``__init__`` (pool_configurator.py @ v0.5.13 … v0.5.23).

    ``layer_ids``: this PP stage's decoder layers. Linear-attention/mamba layers hold no KV.
    ``draft_in_budget`` (>=0.5.14, EAGLE/MTP/STANDALONE): :func:`draft_cell_bytes` is added.
    ``attention_backends`` (prefill, decode) and ``sm100`` select the FP4 MHA recipe's layouts after
    0.5.20 (:func:`fp4_recipe_cell_bytes`; FlashInfer for both when not given).
    """
    if spec.dsv4 is not None:  # DeepSeek-V4: DSV4PoolConfigurator coefficient (deepseek_v4.py)
        from .deepseek_v4 import cell_size as dsv4_cell_size
        return dsv4_cell_size(spec, speculative=bool(draft_layers))
    ids = range(spec.num_hidden_layers) if layer_ids is None else layer_ids
    kinds = [spec.layer_types[i] for i in ids]
    n_full = sum(1 for k in kinds if k == "full_attention")
    n_swa = sum(1 for k in kinds if k == "sliding_attention")
    kv_flag = kv_flag.lower()
    per, text = _per_layer_bytes(spec, v, attn_tp, kv_bytes, kv_flag)
    cell = _engine_cell(spec, v, attn_tp, kv_bytes, kv_flag, n_full + n_swa,
                        attention_backends=attention_backends, sm100=sm100)
    draft = 0
    if draft_in_budget and draft_layers and (n_full + n_swa):
        draft = draft_cell_bytes(spec, v, cell, n_full + n_swa, draft_layers)
        cell += draft
    formula = f"{text} x {n_full + n_swa} layers" + (f" + draft {draft} B" if draft else "")
    pool = _engine_cell(spec, v, attn_tp, kv_bytes, kv_flag, n_full + n_swa, buffer=True,
                        attention_backends=attention_backends, sm100=sm100)
    return CellSize(cell_bytes=cell, full_layer_bytes=per, num_full_layers=n_full, swa_layer_bytes=per if n_swa else 0,
                    num_swa_layers=n_swa, draft_bytes=draft, formula=formula, pool_bytes_per_token=pool)


# --------------------------------------------------------------------------------------------
# Mamba / linear-attention state


class MambaShapeError(FlagError):
    """SGLang's ``divide()`` assertion: a state dimension does not split evenly over the TP ranks."""

    def __init__(self, numerator: int, tp: int, what: str) -> None:
        self.engine_text = f"{numerator} is not divisible by {tp}"  # distributed/utils.py ensure_divisibility
        super().__init__(f"{what} ({numerator}) is not divisible by the attention TP size {tp}", field="--tp",
                         fix="SGLang asserts at startup; use a --tp that divides the mamba heads and conv width")


def _divide(numerator: int, tp: int, what: str) -> int:
    if numerator % tp:
        raise MambaShapeError(numerator, tp, what)
    return numerator // tp


def mamba_state_bytes_per_req(spec: ModelSpec, tp: int, conv_bytes: int = 2, ssm_bytes: int = 4) -> int:
    """``mamba_cache_per_req`` (configs/mamba_utils.py ``Mamba2StateShape.create`` +
    ``BaseLinearStateParams.mamba_cache_per_req``, the same arithmetic @ v0.5.6 … v0.5.23): per request,
    all state layers, one rank.

    The configs call ``create(intermediate, n_groups, num_heads, head_dim, state_size)`` with
    Mamba2 (configs/nemotron_h.py): ``heads*head_dim, n_groups, heads, head_dim, ssm_state_size``;
    GDN (configs/qwen3_next.py): ``v_heads*v_dim, k_heads, v_heads, v_dim, k_dim``. When ``n_groups % tp``
    the groups are replicated up to ``tp`` (``extra_groups_for_head_shards``); conv state
    ``(conv_dim/tp, kernel-1)`` with ``conv_dim = intermediate + 2*n_groups*state_size``, temporal
    ``(heads/tp, head_dim, state_size)``; ``divide`` asserts divisibility (raised here as
    :class:`MambaShapeError`). Conv state bfloat16 (SGLANG_MAMBA_CONV_DTYPE), SSM state float32
    (``mamba_ssm_dtype`` default)."""
    m = spec.mamba
    if m is None:
        return 0
    if m.kind == "gdn":  # MambaSpec(gdn): num_heads=v_heads, head_dim=k_dim, state_size=v_dim
        intermediate, heads, head_dim, state = m.num_heads * m.state_size, m.num_heads, m.state_size, m.head_dim
    else:
        intermediate, heads, head_dim, state = m.num_heads * m.head_dim, m.num_heads, m.head_dim, m.state_size
    groups = m.n_groups if m.n_groups % tp == 0 else tp  # n_groups += tp - n_groups
    conv_dim = intermediate + 2 * groups * state
    conv = _divide(conv_dim, tp, "mamba conv_dim") * (m.conv_kernel - 1)
    temporal = _divide(heads, tp, "mamba/linear-attention heads") * head_dim * state
    return (conv * conv_bytes + temporal * ssm_bytes) * spec.num_state_layers


def mamba_pp_stage_bytes(v: Version, per_req_bytes: int, state_layer_ids: Sequence[int], num_hidden_layers: int,
                         pp_size: int) -> int:
    """The per-request state the carve charges on every rank: from 0.5.18 the largest PP stage's share,
    ``int(per_req * max_stage_state_layers / all_state_layers)`` with ``get_pp_indices`` stages
    (``_handle_max_mamba_cache`` @ v0.5.18 l.1975, @ v0.5.23); before, the whole model's per request."""
    ids = list(state_layer_ids)
    if pp_size <= 1 or not ids or not at_least(v, "0.5.18"):
        return per_req_bytes
    from ...model.weights import pp_layer_range  # SGLang's get_pp_indices default partition
    most = max(sum(1 for i in ids if lo <= i < hi)
               for lo, hi in (pp_layer_range(num_hidden_layers, r, pp_size) for r in range(pp_size)))
    return int(per_req_bytes * (most / max(len(ids), 1)))


@dataclass(frozen=True)
class MambaCarve:
    rest_gib: float  # rest memory left for KV after the state pool
    max_mamba_cache_size: int
    per_req_bytes: int
    error: str | None = None  # RuntimeError "Not enough GPU memory for hybrid ..." (>=0.5.13)


def mamba_request_ratio(disable_radix_cache: bool) -> int:
    """``_calculate_mamba_ratio`` with the default ``no_buffer`` strategy and env: 1 without the radix
    cache, else ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` = 3 (mixin @ v0.5.13/0.5.14,
    kv_cache_configurator.py @ v0.5.18/0.5.23; model_runner.py @ v0.5.6)."""
    return 1 if disable_radix_cache else 3


def _mamba_oom_text(size: int, rest_gib: float, per_req_bytes: int) -> str:
    return (f"RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={size} (total_rest_memory={rest_gib:.2f} GB, "
            f"mamba_cache_per_req={per_req_bytes / (1 << 20):.2f} MB). Try: (1) reduce --max-running-requests, "
            f"(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
            f"(4) use GPUs with more memory.")


def handle_max_mamba_cache(v: Version, rest_gib: float, per_req_bytes: int, *, ratio: float = 0.9,
                           max_mamba_cache_size: int | None = None, disable_radix_cache: bool = False,
                           max_running_requests: int | None = None, attn_dp_size: int = 1,
                           speculative_num_draft_tokens: int | None = None, is_gdn: bool = True) -> MambaCarve:
    """Carve the mamba/linear-attention state pool out of ``rest`` (GiB floats, in the engine's order).

    ``ratio`` = ``--mamba-full-memory-ratio`` R; ``speculative_num_draft_tokens`` D is set iff a
    speculative algorithm is (SGLang then requires ``--max-running-requests``).

    * <0.5.9 (model_runner.py ``handle_max_mamba_cache`` @ v0.5.6 l.1450): radix cache off → size =
      user size, else ``--max-running-requests``, else 512; otherwise ``int(rest R/(1+R) 2^30 // per_req //
      (1+D))`` (a user size is overwritten); GDN models divide by attn-DP; state = size · per_req · (1+D).
    * 0.5.9-0.5.12 (mixin @ v0.5.9 l.151): spec first subtracts ``per_req · (running // dp) · D``;
      size = user // dp, else (radix off) running // dp, else ``int(rest R/(1+R) 2^30 // per_req)``.
    * 0.5.13-0.5.17 (mixin @ v0.5.13 l.82 = @ v0.5.14 l.122): spec solved jointly,
      ``K = int(B // (per_req (1 + D/ratio)))``, intermediate ``per_req · min(running // dp, K // ratio) · D``;
      RuntimeError when K <= 0.
    * 0.5.18+ (kv_cache_configurator.py ``_handle_max_mamba_cache`` @ v0.5.18 l.1970, @ v0.5.23 l.3229):
      the +1 padding slot on both buffers: ``K = int((B − per_req(1+D)) // (per_req(1+D/ratio)))`` or
      ``int((B − per_req) // per_req)``, intermediate ``per_req (capped+1) D``, state ``(K+1) per_req``;
      after 0.5.20 ``max(1, running // dp)``. (PP=1; no ReplaySSM, no fused draft state, no extra buffer.)
    """
    g = 1 << 30
    if per_req_bytes <= 0 and at_least(v, "0.5.9"):  # (0.5.6 handles a zero state in its own branch)
        return MambaCarve(rest_gib, 0, 0)
    dp = attn_dp_size
    D = speculative_num_draft_tokens
    spec = D is not None
    rest = rest_gib
    if not at_least(v, "0.5.9"):
        d = D or 0
        if disable_radix_cache or per_req_bytes == 0:
            size = max_mamba_cache_size if max_mamba_cache_size is not None else (
                max_running_requests if max_running_requests is not None else 512)
        else:
            raw = rest * ratio / (1 + ratio)
            size = int((raw * g) // per_req_bytes // (1 + d))
        if is_gdn:
            size = size // dp
        return MambaCarve(rest - size * per_req_bytes * (1 + d) / g, size, per_req_bytes)
    if not at_least(v, "0.5.13"):
        if spec:
            rest = rest - (per_req_bytes * (max_running_requests // dp) * D) / g
        if max_mamba_cache_size is not None:
            size = max_mamba_cache_size // dp
        elif disable_radix_cache and max_running_requests is not None:
            size = max_running_requests // dp
        else:
            raw = rest * ratio / (1 + ratio)
            size = int((raw * g) // per_req_bytes)
        return MambaCarve(rest - size * per_req_bytes / g, size, per_req_bytes)
    pad = 1 if at_least(v, "0.5.18") else 0
    one = (lambda n: max(1, n)) if at_least(v, "0.5.23") else (lambda n: n)
    mratio = mamba_request_ratio(disable_radix_cache)
    per = per_req_bytes
    if max_mamba_cache_size is not None:
        size = max_mamba_cache_size // dp
        if spec:
            capped = min(one(max_running_requests // dp), size // mratio)
            rest = rest - (per * (capped + pad) * D) / g
    elif disable_radix_cache and max_running_requests is not None:
        size = one(max_running_requests // dp) if pad else max_running_requests // dp
        if spec:
            rest = rest - (per * (size + pad) * D) / g
    else:
        budget_bytes = rest * ratio / (1 + ratio) * g
        if spec:
            if pad:
                size = int((budget_bytes - per * (1 + D)) // (per * (1 + D / mratio)))
            else:
                size = int(budget_bytes // (per * (1 + D / mratio)))
            capped = min(one(max_running_requests // dp), size // mratio)
            rest = rest - (per * (capped + pad) * D) / g
        else:
            size = int((budget_bytes - per) // per) if pad else int(budget_bytes // per)
    if size <= 0:
        return MambaCarve(rest, size, per, _mamba_oom_text(size, rest, per))
    return MambaCarve(rest - (size + pad) * per / g, size, per)


# --------------------------------------------------------------------------------------------
# Profile


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


def mm_reservation_gib(v: Version, is_multimodal: bool, mm_feature_transport: str | None = None,
                       vlm_cache_mb: int = 100, feature_cache_mb: int = 1024) -> float:
    """``mm_runtime_reservation_gb`` (kv_cache_configurator.py @ v0.5.23, new in 0.5.18):
    SGLANG_VLM_CACHE_SIZE_MB (100) [+ SGLANG_MM_FEATURE_CACHE_MB (1024) for cuda_ipc/cuda_vmm], / 1024."""
    if not is_multimodal or not at_least(v, "0.5.18"):
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


def runtime_error_text(v: Version, mfs: float) -> str:
    """The RuntimeError raised when ``max_total_num_tokens <= 0`` — its wording per version
    (model_runner.py @ v0.4.6.post5 / @ v0.5.6, mixin @ v0.5.9, pool_configurator.py @ v0.5.11+).
    Conformance-tested (tests/conformance/test_sglang_pools.py)."""
    base = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    if not at_least(v, "0.5.0"):
        return base
    if not at_least(v, "0.5.10"):
        return f"{base} Current value: self.server_args.mem_fraction_static={mfs}"
    # MemoryPoolConfig.__post_init__ (mixin @ v0.5.10 l.55, pool_configurator.py @ v0.5.13 l.51, @ v0.5.23
    # l.94) appends the value only when the config carries it; the configs built by calculate_pool_sizes /
    # calculate_pool_sizes_from_max_tokens never do (mem_fraction_static is set after), so the text ends here.
    return base


def profile(v: Version, *, pre_model_load_gib: float, available_gpu_gib: float, mem_fraction_static: float,
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
        carve = handle_max_mamba_cache(v, rest, mamba_per_req_bytes, ratio=mamba_ratio,
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
    if at_least(v, "0.5.14") and rest <= 0:
        error = value_error_text(mem_fraction_static, available_gpu_gib, pre_model_load_gib)
        tokens = 0
        rest_bytes = 0
    else:
        rest_bytes = int(rest * (1 << 30))
        tokens = rest_bytes // cell_bytes if cell_bytes else 0
    return Profile(pre_model_load_gib, available_gpu_gib, mem_fraction_static, slack, mm_reservation, mamba_gib,
                   rest, rest_bytes, cell_bytes, tokens, error), carve


# --------------------------------------------------------------------------------------------
# Pool sizing after the profile


@dataclass(frozen=True)
class PoolSizes:
    max_total_num_tokens: int  # full-attention pool tokens (SWA: full_layer_tokens)
    swa_tokens: int | None
    capped_by_user: bool


def round_to_page(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def apply_token_constraints(tokens: int, page_size: int, max_total_tokens: int | None) -> tuple[int, bool]:
    """``min(T, --max-total-tokens)`` then page rounding (the order of mixin @ v0.5.9 init_memory_pool;
    v0.5.23 rounds, caps and re-rounds — the same result)."""
    capped = max_total_tokens is not None and max_total_tokens < tokens
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return round_to_page(tokens, page_size), capped


def swa_split(v: Version, rest_bytes: int, cell: CellSize, page_size: int, ratio: float) -> tuple[int, int]:
    """Hybrid SWA pools (full_layer_tokens, swa_layer_tokens) from the budget, current code
    (``HybridSWAPoolConfigurator`` @ v0.5.13 … v0.5.23): see :func:`hybrid_swa_pools`."""
    p = hybrid_swa_pools(v if at_least(v, "0.5.11") else Version("0.5.11"), available_bytes=rest_bytes,
                         full_layer_bytes=cell.full_layer_bytes, num_full_layers=cell.num_full_layers,
                         swa_layer_bytes=cell.swa_layer_bytes or cell.full_layer_bytes,
                         num_swa_layers=cell.num_swa_layers, page_size=page_size, ratio=ratio,
                         draft_bytes=cell.draft_bytes)
    return p.full_tokens, p.swa_tokens


@dataclass(frozen=True)
class SWAPools:
    max_total_num_tokens: int  # = full_tokens (all-SWA: swa_tokens)
    full_tokens: int
    swa_tokens: int
    error: str | None = None


def hybrid_swa_pools(v: Version, *, available_bytes: int, full_layer_bytes: int, num_full_layers: int,
                     swa_layer_bytes: int, num_swa_layers: int, page_size: int, ratio: float,
                     max_total_tokens: int | None = None, sliding_window: int | None = None,
                     llama4_chunk_ratio: float | None = None, draft_bytes: int = 0,
                     mem_fraction_static: float = 0.0, disable_radix_cache: bool = False,
                     max_running_requests: int | None = None, chunked_prefill_size: int | None = None,
                     attn_dp_size: int = 1, swa_eviction_interval: int = 128,
                     speculative_algorithm: str | None = None, num_steps: int | None = None,
                     topk: int | None = None, num_draft_tokens: int | None = None,
                     draft_full_layers: int = 0) -> SWAPools:
    """The hybrid sliding-window split, per release. F/S = bytes per token per full/SWA layer,
    r = ``--swa-full-tokens-ratio``; ``available_bytes`` = the profile's ``int(rest × 2^30)``.

    * <0.5.9 (model_runner.py ``set_num_token_hybrid`` @ v0.5.6 l.1526): the profile divides by the
      plain cell F·(n_full+n_swa); after the cap and page rounding, T·L layer-tokens are re-split by
      *layer count*: ``full = int(T L / (r n_swa + n_full))``, ``swa = int(full r)``, no page rounding.
      Llama 4 (``llama4_chunk_ratio`` = attention_chunk_size / context_len = t):
      ``swa = 4 T t // (3t+1)``, ``full = 4T − 12 T t // (3t+1)``, both page-rounded.
    * 0.5.9 (mixin ``set_num_tokens_hybrid_swa`` @ v0.5.9 l.251): profile cell F n_full + S n_swa; after
      cap and page rounding ``full = int(T (F nf + S ns) / (F nf + r S ns))``, ``swa = int(full r)``
      (from the *unrounded* full), then both page-rounded.
    * 0.5.10 (mixin ``_resolve_hybrid_swa_tokens``): as 0.5.9, swa from the page-rounded full.
    * 0.5.11+ (pool_configurator.py ``HybridSWAPoolConfigurator`` @ v0.5.13 l.196, @ v0.5.23 l.656):
      ``max_total = int(bytes // (F nf + r S ns [+ draft]))``; ``full = max_total // page · page``;
      ``swa = int(full r) // page · page``; a ``--max-total-tokens`` cap re-solves from the capped full.
      All-SWA models: ``swa = int(bytes // (S ns)) // page · page``. From 0.5.18 (inline; a method @ v0.5.23)
      ``validate_swa_pool_size`` raises when ``sliding_window + page >= swa``.
    * 0.5.14+ with the radix cache off and ``--max-running-requests`` set (``SWAChunkCapPoolConfigurator``
      @ v0.5.14 l.339 / @ v0.5.18 l.598, ``SWARequestCapPoolConfigurator`` + ``compute_swa_request_cap``
      @ v0.5.23 l.924): the SWA pool is the worst case of the running requests,
      ``cap = (window + eviction_interval · D + page + decode) · (running // dp) + 2 · chunk + page`` with
      D = draft tokens (1 without speculative decoding) and decode = page, or ``2 · alloc_len_per_decode``
      with speculative decoding (overlap schedule),
      (``max(1, …)`` and ``chunk > 0`` required after 0.5.20), ``swa = ceil(cap / page) · page``, and the
      rest of the budget goes to the full pool: ``full = int((bytes − swa S ns) // (F nf)) // page · page``
      (RuntimeError when <= 0); a cap re-solve keeps swa ``min(swa, T)``. Overlap schedule on, not a PD
      decode node.
    * The EAGLE/STANDALONE draft (0.5.18+, ``draft_full_layers`` = ``eagle_draft_num_layers``) is priced
      at the full-layer width inside the same pools: ``F (nf + d) + r S ns`` (all-SWA: ``S ns + F d``;
      request cap: full cell ``F (nf + d)``). 0.5.14 adds no draft share for hybrid SWA models.
      (Banded MTP depths of Inkling and ``eagle_draft_swa_num_layers`` are not modelled.)
    """
    d = draft_full_layers if at_least(v, "0.5.18") else 0
    F, nf, S, ns = full_layer_bytes, num_full_layers, swa_layer_bytes, num_swa_layers

    def align(x: float) -> int:
        return int(x // page_size * page_size)

    if not at_least(v, "0.5.11"):
        profile_cell = F * (nf + ns) if not at_least(v, "0.5.9") else F * nf + S * ns
        tokens = available_bytes // profile_cell
        tokens, _ = apply_token_constraints(tokens, page_size, max_total_tokens)
        if not at_least(v, "0.5.9"):
            if llama4_chunk_ratio is not None:
                t = llama4_chunk_ratio
                swa = align(4 * tokens * t // (3 * t + 1))
                full = align(4 * tokens - 12 * tokens * t // (3 * t + 1))
            else:
                full = int(tokens * (nf + ns) / (ratio * ns + nf))
                swa = int(full * ratio)
        elif nf == 0:
            swa = round_to_page(tokens, page_size)
            return SWAPools(swa, 0, swa, None if swa > 0 else runtime_error_text(v, mem_fraction_static))
        else:
            total = tokens * (F * nf + S * ns)
            full_raw = int(total / (F * nf + ratio * S * ns))
            if at_least(v, "0.5.10"):
                full = round_to_page(full_raw, page_size)
                swa = round_to_page(int(full * ratio), page_size)
            else:
                full = round_to_page(full_raw, page_size)
                swa = round_to_page(int(full_raw * ratio), page_size)
        return SWAPools(full, full, swa, None if full > 0 else runtime_error_text(v, mem_fraction_static))

    def solve(max_total: int) -> SWAPools:
        if nf == 0:
            swa_ = round_to_page(max_total, page_size)
            return SWAPools(swa_, 0, swa_, None if swa_ > 0 else runtime_error_text(v, mem_fraction_static))
        full_ = round_to_page(max_total, page_size)
        swa_ = round_to_page(int(full_ * ratio), page_size)
        if at_least(v, "0.5.18") and sliding_window is not None and sliding_window + page_size >= swa_:
            return SWAPools(full_, full_, swa_, (
                f"ValueError: SWA pool ({swa_} tokens) cannot hold even one request: the prefill admission "
                f"floor is sliding_window_size ({sliding_window}) + page_size ({page_size}). Increase "
                f"--swa-full-tokens-ratio or the total KV budget."))
        return SWAPools(full_, full_, swa_, None if full_ > 0 else runtime_error_text(v, mem_fraction_static))

    if _swa_request_cap_applies(v, nf, sliding_window, disable_radix_cache, max_running_requests,
                                chunked_prefill_size):
        n = max_running_requests // attn_dp_size
        if at_least(v, "0.5.23"):
            n = max(1, n)
        algo = (speculative_algorithm or "").upper()
        decode = page_size if not algo else 2 * _alloc_len_per_decode(
            v, algo, num_steps=num_steps, topk=topk, num_draft_tokens=num_draft_tokens, page_size=page_size)
        per_request = sliding_window + swa_eviction_interval * (num_draft_tokens or 1) + page_size + decode
        cap = per_request * n + 2 * chunked_prefill_size + page_size
        swa = -(-cap // page_size) * page_size
        fixed = swa * S * ns
        full = int((available_bytes - fixed) // (F * (nf + d))) // page_size * page_size
        if full <= 0:
            return SWAPools(full, full, swa, (
                f"RuntimeError: SWA pool cap ({swa} tokens, {fixed / (1 << 30):.2f} GiB) leaves no room for the "
                f"full KV pool within the available {available_bytes / (1 << 30):.2f} GiB. Reduce "
                f"--max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static."))
        if max_total_tokens is not None and max_total_tokens < full:
            capped_full = round_to_page(max_total_tokens, page_size)
            return SWAPools(capped_full, capped_full, min(swa, max_total_tokens),
                            None if capped_full > 0 else runtime_error_text(v, mem_fraction_static))
        return SWAPools(full, full, swa)

    cell = S * ns + F * d if nf == 0 else F * (nf + d) + ratio * S * ns + draft_bytes
    first = solve(int(available_bytes // cell))
    if first.error is not None:
        return first
    if max_total_tokens is not None and max_total_tokens < first.max_total_num_tokens:
        return solve(max_total_tokens)
    return first


def _swa_request_cap_applies(v: Version, nf: int, sliding_window: int | None, disable_radix_cache: bool,
                             max_running_requests: int | None, chunked_prefill_size: int | None) -> bool:
    """``SWAChunkCapPoolConfigurator.is_applicable`` (@ v0.5.14/0.5.18) / ``SWARequestCapPoolConfigurator``
    (@ v0.5.23: also needs ``chunked_prefill_size > 0``)."""
    if not at_least(v, "0.5.14") or max_running_requests is None or not disable_radix_cache:
        return False
    if chunked_prefill_size is None or (at_least(v, "0.5.22") and chunked_prefill_size <= 0):  # 0.5.21 without
        return False
    return sliding_window is not None and nf > 0


def _attn_dp_requested(v: Version, max_running_requests: int, attn_dp_size: int) -> int:
    """``max_running_requests // attn_dp_size``; clamped to >= 1 after 0.5.20
    (``max(1, ...)`` in kv_cache_configurator.py ``resolve_max_num_reqs`` @ v0.5.23; absent @ v0.5.20)."""
    n = max_running_requests // attn_dp_size
    return max(1, n) if at_least(v, "0.5.23") else n


def max_num_reqs(v: Version, *, token_capacity: int, profiled_tokens: int, context_len: int,
                 max_running_requests: int | None, attn_dp_size: int, mamba_cap: int | None = None) -> tuple[int, int]:
    """(``ReqToTokenPool.size``, ``max_running_requests`` per DP worker).

    ``token_capacity`` is the final pool size (after the classic speculative headroom, the user cap
    and page rounding); ``profiled_tokens`` the profile's value before them.

    * <0.5.10 (model_runner.py ``init_memory_pool`` @ v0.4.6.post5 / @ v0.5.6, mixin @ v0.5.9):
      pool = user value, else ``min(max(int(profiled / context_len * 512), 2048), 4096)``;
      running = ``min(T // 2 if user is None else user // attn_dp, pool size)``
      (tp_worker.py @ v0.4.6.post5 l.119 / @ v0.5.6 l.289, model_runner.py @ v0.5.9 l.593).
      v0.4.6 builds ``ReqToTokenPool(size=max_num_reqs + 1)`` — hence logs printing 2049; v0.4.7+
      passes ``max_num_reqs`` (model_runner.py @ v0.4.7 l.926, conformance-run on 0.4.8.post1).
    * 0.5.10-0.5.13 (mixin ``_resolve_max_num_reqs`` @ v0.5.13 l.876), on the final capacity:
      estimated = ``max(min(int(T / context_len * 512), 4096), 2048)``;
      user → ``min(user // attn_dp, estimated)``, else ``min(estimated, T // 2)``; running = pool.
    * 0.5.14+ (mixin @ v0.5.14 l.981; kv_cache_configurator.py ``resolve_max_num_reqs`` @ v0.5.18
      l.1873, @ v0.5.23 l.3119): user → ``min(user // attn_dp, T // 2)`` (``max(1, …)`` after 0.5.20).
    Then the mamba cap ``max_mamba_cache_size // ratio`` (given as ``mamba_cap``).
    """
    if at_least(v, "0.5.10"):
        estimated = int(token_capacity / context_len * 512)
        estimated = max(min(estimated, 4096), 2048)
        if max_running_requests is not None:
            cap = token_capacity // 2 if at_least(v, "0.5.14") else estimated
            n = min(_attn_dp_requested(v, max_running_requests, attn_dp_size), cap)
        else:
            n = min(estimated, token_capacity // 2)
        if mamba_cap is not None:
            n = min(n, mamba_cap)
        return n, n
    pool = max_running_requests if max_running_requests is not None else min(
        max(int(profiled_tokens / context_len * 512), 2048), 4096)
    if mamba_cap is not None:
        pool = min(pool, mamba_cap)
    if not at_least(v, "0.4.7"):
        pool += 1  # ReqToTokenPool(size=max_num_reqs + 1): v0.4.6.post5 l.904; size=max_num_reqs from v0.4.7 l.926
    running = token_capacity // 2 if max_running_requests is None else max_running_requests // attn_dp_size
    return pool, min(running, pool)


def classic_spec_headroom_tokens(v: Version, speculative_algorithm: str | None, max_num_reqs_: int, *,
                                 num_steps: int, topk: int, num_draft_tokens: int) -> int:
    """Tokens the target adds to the shared KV pool for EAGLE/STANDALONE drafts before 0.5.9
    (``draft_runner_cache_size``, model_runner.py ``init_memory_pool`` @ v0.4.6.post5 l.866,
    @ v0.5.6): ``max_num_reqs * steps * topk + max_num_reqs * draft_tokens + 100``, added to the
    profiled tokens *before* the ``--max-total-tokens`` cap and page rounding. v0.4.6 does it for
    every algorithm it has (EAGLE, EAGLE3); v0.5.6 for ``is_eagle() or is_standalone()`` (not NGRAM).
    Gone in v0.5.9 (the draft reuses the target's count)."""
    algo = (speculative_algorithm or "").upper()
    if at_least(v, "0.5.9") or algo in ("", "NGRAM"):
        return 0
    return max_num_reqs_ * num_steps * topk + max_num_reqs_ * num_draft_tokens + 100


def _alloc_len_per_decode(v: Version, algo: str, *, num_steps: int | None, topk: int | None,
                          num_draft_tokens: int | None, page_size: int) -> int:
    """``get_alloc_len_per_decode`` (mem_cache/common.py @ v0.5.13/0.5.14; allocation_sizing.py @ v0.5.18+)."""
    steps = num_steps or 1
    k = topk or 1
    tokens = num_draft_tokens or 0  # set whenever an algorithm is (server_args resolves it)
    draft_kv = algo != "NGRAM" or not at_least(v, "0.5.14")  # has_draft_kv() (>=0.5.14)
    if page_size == 1 or k == 1 or not draft_kv:
        return max(steps * k, tokens)
    pages_per_topk = ((page_size - 1) + steps + page_size - 1) // page_size
    return max(pages_per_topk * page_size * k, tokens)


def req_to_token_extra_context_len(v: Version, *, speculative_algorithm: str | None = None,
                                   num_draft_tokens: int | None = None, num_steps: int | None = None,
                                   topk: int | None = None, page_size: int = 1) -> int:
    """Row headroom of ``req_to_token`` beyond ``context_len``.

    * <0.5.0: 4 (model_runner.py @ v0.4.6.post5 l.905).
    * 0.5.0-0.5.12: ``4 + speculative_num_draft_tokens`` (model_runner.py @ v0.5.6, mixin @ v0.5.9..0.5.12).
    * 0.5.13-0.5.17 (``get_req_to_token_extra_context_len``, mem_cache/common.py @ v0.5.13/0.5.14):
      with a speculative algorithm, page > 1 and topk > 1: ``max(extra, 2 * alloc_len_per_decode)``.
    * 0.5.18+ (mem_cache/allocation_sizing.py @ v0.5.18/0.5.23): with a speculative algorithm and
      page > 1: ``max(extra, 2 * alloc_len_per_decode + page - 1)``.
    """
    if not at_least(v, "0.5.0"):
        return 4
    extra = 4 + (num_draft_tokens or 0)
    algo = (speculative_algorithm or "").upper()
    if not algo or not at_least(v, "0.5.13"):
        return extra
    if at_least(v, "0.5.18"):
        if page_size > 1:
            extra = max(extra, 2 * _alloc_len_per_decode(v, algo, num_steps=num_steps, topk=topk,
                                                         num_draft_tokens=num_draft_tokens, page_size=page_size)
                        + page_size - 1)
        return extra
    if page_size > 1 and (topk or 1) > 1:
        extra = max(extra, 2 * _alloc_len_per_decode(v, algo, num_steps=num_steps, topk=topk,
                                                     num_draft_tokens=num_draft_tokens, page_size=page_size))
    return extra


def req_to_token_rows(v: Version, pool_size: int) -> int:
    """Rows of the int32 table: ``size + 1`` (padding row 0) from v0.5.12 (mem_cache/memory_pool.py
    ``ReqToTokenPool.__init__`` @ v0.5.12 l.145, @ v0.5.23 l.402); ``size`` before (v0.4.6 passes
    ``max_num_reqs + 1`` as the size)."""
    return pool_size + 1 if at_least(v, "0.5.12") else pool_size


def req_to_token_bytes(v: Version, pool_size: int, context_len: int, draft_tokens: int = 0, *,
                       extra_context_len: int | None = None) -> int:
    """``ReqToTokenPool``: int32 [rows x (context_len + extra)]. ``extra`` defaults to
    :func:`req_to_token_extra_context_len` with ``draft_tokens`` and no page/topk rule."""
    if extra_context_len is None:
        extra_context_len = req_to_token_extra_context_len(v, speculative_algorithm="EAGLE" if draft_tokens else None,
                                                           num_draft_tokens=draft_tokens or None)
    return req_to_token_rows(v, pool_size) * (context_len + extra_context_len) * 4


@dataclass(frozen=True)
class RequestPools:
    """What follows the profile: the final token pool, the request pool and the request limit."""

    max_total_num_tokens: int | None
    req_pool_size: int | None  # ReqToTokenPool.size
    req_rows: int | None
    req_row_len: int | None  # context_len + extra
    req_to_token_bytes: int | None
    max_running_requests: int | None  # per DP worker
    spec_headroom_tokens: int = 0  # classic (<0.5.9) draft_runner_cache_size headroom
    capped_by_user: bool = False
    error: str | None = None


def request_pools(v: Version, *, profiled_tokens: int, context_len: int, page_size: int = 1,
                  max_total_tokens: int | None = None, max_running_requests: int | None = None,
                  attn_dp_size: int = 1, speculative_algorithm: str | None = None,
                  num_steps: int | None = None, topk: int | None = None, num_draft_tokens: int | None = None,
                  mem_fraction_static: float = 0.88, mamba_cap: int | None = None,
                  max_mamba_cache_size: int | None = None, disable_radix_cache: bool = False) -> RequestPools:
    """The pool sizing after the profile, in the engine's order (no SWA, no PP).

    Classic (<0.5.10, ``init_memory_pool``): request estimate from the profiled T → speculative
    headroom (<0.5.9) → ``--max-total-tokens`` cap → page rounding → RuntimeError if <= 0 →
    ``ReqToTokenPool`` → ``max_running_requests``. Current (>=0.5.10, ``_resolve_memory_pool_config``):
    page rounding → cap → re-round (RuntimeError from ``MemoryPoolConfig`` if <= 0) →
    ``resolve_max_num_reqs`` on the final T → ``ReqToTokenPool``.

    Mamba-ish models: ``max_mamba_cache_size`` (the carve's result, per DP worker) caps the requests at
    ``size // ratio`` (:func:`mamba_request_ratio`; model_runner.py @ v0.5.6, mixin @ v0.5.9 l.355 which
    also caps at ``running // dp`` with speculative decoding and DP attention, ``_resolve_max_num_reqs``
    @ v0.5.13+ which raises when the result is <= 0). ``mamba_cap`` gives the cap directly instead.
    """
    if max_mamba_cache_size is not None and v >= Version("0.5.0"):
        ratio = mamba_request_ratio(disable_radix_cache)
        mamba_cap = max_mamba_cache_size // ratio
        if (not at_least(v, "0.5.10") and at_least(v, "0.5.9") and speculative_algorithm and attn_dp_size > 1):
            mamba_cap = min(mamba_cap, max_running_requests // attn_dp_size)
    tokens = profiled_tokens
    headroom = 0
    if not at_least(v, "0.5.10"):
        pool_reqs = max_running_requests if max_running_requests is not None else min(
            max(int(profiled_tokens / context_len * 512), 2048), 4096)
        if mamba_cap is not None:
            pool_reqs = min(pool_reqs, mamba_cap)
        if speculative_algorithm:
            headroom = classic_spec_headroom_tokens(v, speculative_algorithm, pool_reqs, num_steps=num_steps or 0,
                                                    topk=topk or 0, num_draft_tokens=num_draft_tokens or 0)
        tokens += headroom
    tokens, capped = apply_token_constraints(round_to_page(tokens, page_size) if at_least(v, "0.5.10") else tokens,
                                             page_size, max_total_tokens)
    if tokens <= 0:
        return RequestPools(None, None, None, None, None, None, headroom, capped,
                            runtime_error_text(v, mem_fraction_static))
    pool, running = max_num_reqs(v, token_capacity=tokens, profiled_tokens=profiled_tokens, context_len=context_len,
                                 max_running_requests=max_running_requests, attn_dp_size=attn_dp_size,
                                 mamba_cap=mamba_cap)
    if max_mamba_cache_size is not None and at_least(v, "0.5.13") and pool <= 0:
        return RequestPools(tokens, None, None, None, None, None, headroom, capped, (
            f"RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={max_mamba_cache_size}, mamba_ratio={mamba_request_ratio(disable_radix_cache)}, "
            f"resulting max_num_reqs={pool}. Try: (1) reduce --max-running-requests, (2) increase "
            f"--mem-fraction-static, or (3) use GPUs with more memory."))
    extra = req_to_token_extra_context_len(v, speculative_algorithm=speculative_algorithm,
                                           num_draft_tokens=num_draft_tokens, num_steps=num_steps, topk=topk,
                                           page_size=page_size)
    rows = req_to_token_rows(v, pool)
    return RequestPools(tokens, pool, rows, context_len + extra, rows * (context_len + extra) * 4, running,
                        headroom, capped)


def kv_buffer_bytes(tokens: int, page_size: int, per_token_bytes: int) -> int:
    """KV buffers hold ``size + page_size`` rows (one padded page): real bytes allocated."""
    return (tokens + page_size) * per_token_bytes


# c10/cuda/CUDACachingAllocator.cpp: kMinLargeAlloc = 10 MiB, kRoundLarge = 2 MiB. A request of at
# least 10 MiB gets its own segment rounded up to 2 MiB; what torch.cuda.mem_get_info sees.
TORCH_MIN_LARGE_ALLOC = 10 << 20
TORCH_ROUND_LARGE = 2 << 20


def torch_segment_bytes(nbytes: int) -> int:
    """Device bytes the caching allocator reserves for one large tensor (>= 10 MiB): rounded up to
    2 MiB. Smaller tensors share 2 / 20 MiB segments and are returned unchanged here."""
    if nbytes < TORCH_MIN_LARGE_ALLOC:
        return nbytes
    return -(-nbytes // TORCH_ROUND_LARGE) * TORCH_ROUND_LARGE


def kv_buffers_reserved_bytes(tokens: int, page_size: int, per_token_bytes: int, num_buffers: int) -> int:
    """Reserved device bytes of ``num_buffers`` equal per-layer KV buffers (MHA: K and V per layer,
    MLA: one per layer), each ``(tokens + page) x per_token_bytes / num_buffers`` rounded by the
    allocator. The printed K/V sizes are the unrounded ``kv_buffer_bytes``; "Memory pool end. avail
    mem" drops by the rounded figure (about num_buffers x 1 MiB more)."""
    if num_buffers <= 0 or per_token_bytes % num_buffers:
        return kv_buffer_bytes(tokens, page_size, per_token_bytes)
    one = kv_buffer_bytes(tokens, page_size, per_token_bytes // num_buffers)
    return torch_segment_bytes(one) * num_buffers


def tokens_per_fraction_step(pre_model_load_gib: float, cell_bytes: int, step: float = 0.01) -> int:
    """KV tokens one ``step`` of mem_fraction_static buys: pre × step GiB / cell."""
    return int(pre_model_load_gib * step * (1 << 30)) // cell_bytes if cell_bytes else 0


def min_viable_fraction(*, pre_model_load_gib: float, available_gpu_gib: float, reserve_gib: float,
                        need_bytes: int) -> float:
    """Smallest mem_fraction_static whose budget holds ``need_bytes`` (e.g. one page of KV):
    available − pre (1 − f) − reserve ≥ need  ⇔  f ≥ 1 − (available − reserve − need) / pre."""
    return 1 - (available_gpu_gib - reserve_gib - need_bytes / GIB) / pre_model_load_gib
