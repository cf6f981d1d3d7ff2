"""Exact checkpoint bytes one vLLM rank loads, from the safetensors headers (tensor names, shapes, bytes).

Each tensor is placed by the vLLM layer class that loads it (vllm @ 0.33.0):

- vocabulary (``embed_tokens``, ``lm_head``, ...): ``VocabParallelEmbedding`` / ``ParallelLMHead`` pad the
  rows to a multiple of 64 (``DEFAULT_VOCAB_PADDING_SIZE``) and give each TP rank
  ``divide(padded, tp)`` rows (``layers/vocab_parallel_embedding.py``);
- replicated: norms, MoE routers (``GateLinear`` / ``ReplicatedLinear``) and ``e_score_correction_bias``,
  MLA ``q_a_proj`` / ``kv_a_proj_with_mqa`` and the DSA indexer (``ReplicatedLinear``, ``models/deepseek_v2.py``),
  Qwen2-MoE ``shared_expert_gate`` (``torch.nn.Linear``), per-tensor scales (one element), the bias of a
  row-parallel layer (``RowParallelLinear`` keeps the whole bias on every rank, ``layers/linear.py``);
- k/v projections: ``QKVParallelLinear`` gives each rank ``total_num_kv_heads / tp`` KV heads, or one
  (replicated, ``num_kv_head_replicas = tp / kv``) when there are fewer KV heads than ranks; a fused
  ``qkv_proj`` holds its q rows over TP and its KV rows the same way (``layers/linear.py``);
- routed experts: ``FusedMoEParallelConfig.make`` flattens TP across DP (``tp_size = dp x tp``); without
  expert parallelism every expert is split over those ranks, with it each rank owns whole experts,
  ``global // ep_size`` (+1 for the first ``global % ep_size`` ranks: ``expert_map_manager.py``);
  the down-projection bias (``w2_bias``, one row of ``hidden`` per expert) is not split by TP
  (``layers/fused_moe/config.py``, ``expert_map_manager.py``, ``layers/fused_moe/layer.py``);
- everything else (column / row parallel linears, shared experts): split over TP;
- skipped as vLLM's ``load_weights`` skips them: ``rotary_emb.inv_freq``, a stored ``lm_head`` under
  ``tie_word_embeddings`` (``models/llama.py``), MTP layers (``model.layers.{n >= num_hidden_layers}`` and
  ``mtp.*``, ``get_spec_layer_idx_from_weight_name`` in ``models/deepseek_v2.py``) unless MTP speculation loads them.

Vision / audio towers are counted whole on every rank unless ``vision_tp`` (as ``model/weights.py``).
Bytes are the header's, split as above (an unquantized checkpoint's float tensors in the served dtype): what a quantization kernel does at load
(Marlin repacking, GPTQ scales repeated on every rank for act-order row-parallel layers, dropped ``g_idx``)
is not modelled. Pipeline parallelism is not handled here (pp = 1).
"""

from __future__ import annotations

import re
from typing import Iterable

from .safetensors import TensorInfo
from .spec import ModelSpec
from .weights import pad_vocab_size

_VOCAB = re.compile(r"(^|\.)(embed_tokens|lm_head|wte|word_embeddings|embed_in|embed_out|tok_embeddings)\.")
_REPLICATED = re.compile(r"(norm|\.gate\.(weight|bias)$|e_score_correction_bias|kv_a_proj_with_mqa|q_a_proj|"
                         r"\.indexer\.|\.router\.|shared_expert_gate|ln_f\.|layernorm)")
_ROW = re.compile(r"\.(o_proj|down_proj|dense_4h_to_h|out_proj|wo|w2|c_proj|dense)\.")
_QKV_FUSED = re.compile(r"\.(qkv_proj|query_key_value|Wqkv|c_attn)\.")
_KV = re.compile(r"\.(k_proj|v_proj)\.")
_EXPERT = re.compile(r"\.experts\.(\d+\.)?")
_EXPERT_W2_BIAS = re.compile(r"\.experts\.(\d+\.(down_proj|w2)\.bias$|down_proj_bias$)")
_VISION = re.compile(r"(^|\.)(vision_tower|visual|vision_model|multi_modal_projector|mm_projector|audio_tower|"
                     r"vision_embed_tokens|audio_model)\.")
_LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")


def _skipped(t: TensorInfo, spec: ModelSpec, include_mtp: bool) -> bool:
    if "rotary_emb.inv_freq" in t.name:
        return True
    if spec.tie_word_embeddings and re.search(r"(^|\.)lm_head\.", t.name):
        return True
    if t.name.startswith("mtp.") or ".mtp." in t.name:
        return not include_mtp
    m = _LAYER.search(t.name)
    return (m is not None and int(m.group(2)) >= spec.num_hidden_layers and not include_mtp
            and not _VISION.search(t.name))


_FLOAT = frozenset({"F32", "F16", "BF16"})


def _as_served(t: TensorInfo, spec: ModelSpec) -> TensorInfo:
    """An unquantized checkpoint's float tensors as vLLM allocates them: parameters are created in the
    model dtype and the loader casts into them (``default_weight_loader``; a float32 checkpoint is served
    in bfloat16 under ``--dtype auto``, ``config/model.py``). A quantized checkpoint keeps the header's
    bytes (its scales are created in their own dtype)."""
    if spec.quant.is_quantized or t.dtype not in _FLOAT:
        return t
    numel = 1
    for d in t.shape:
        numel *= d
    return TensorInfo(t.name, t.dtype, t.shape, numel * spec.dtype_bytes)


def _kv_share(nbytes: int, kv_heads: int, tp: int) -> int:
    return nbytes // kv_heads * max(1, kv_heads // tp) if kv_heads else -(-nbytes // tp)


def _fused_qkv_share(t: TensorInfo, spec: ModelSpec, tp: int) -> int:
    q, kv, hd = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    rows = (q + 2 * kv) * hd
    if not t.shape or t.shape[0] != rows or t.nbytes % rows:
        return -(-t.nbytes // tp)
    per_row = t.nbytes // rows
    return (q // tp + 2 * max(1, kv // tp)) * hd * per_row


def _expert_share(t: TensorInfo, spec: ModelSpec, moe_ranks: int, ep: bool) -> int:
    if ep:  # whole experts; rank 0 holds the most: ceil(E / ep_size)
        experts = spec.moe.num_experts if spec.moe is not None else 0
        local = -(-experts // moe_ranks) if experts else 1
        if _EXPERT.search(t.name).group(1):  # one expert's tensor: rank 0 holds experts [0, local)
            idx = int(re.search(r"\.experts\.(\d+)\.", t.name).group(1))
            return t.nbytes if idx < local else 0
        return t.nbytes * local // experts if experts else -(-t.nbytes // moe_ranks)
    if _EXPERT_W2_BIAS.search(t.name):
        return t.nbytes
    return -(-t.nbytes // moe_ranks)


def _tensor_share(t: TensorInfo, spec: ModelSpec, tp: int, moe_ranks: int, ep: bool, vision_tp: bool) -> int:
    if _VISION.search(t.name):
        return -(-t.nbytes // tp) if vision_tp else t.nbytes
    if _VOCAB.search(t.name) and t.shape:
        rows = t.shape[0]
        return -(-pad_vocab_size(rows) // tp) * (t.nbytes // rows)
    if _EXPERT.search(t.name) and spec.moe is not None:
        return _expert_share(t, spec, moe_ranks, ep)
    numel = 1
    for d in t.shape:
        numel *= d
    if numel <= 1 or _REPLICATED.search(t.name) or (t.name.endswith(".bias") and _ROW.search(t.name)):
        return t.nbytes
    if _KV.search(t.name):
        return _kv_share(t.nbytes, spec.num_key_value_heads, tp)
    if _QKV_FUSED.search(t.name) and spec.num_key_value_heads:
        return _fused_qkv_share(t, spec, tp)
    return -(-t.nbytes // tp)


def vllm_rank_bytes(tensors: Iterable[TensorInfo], spec: ModelSpec, *, tp: int = 1, dp: int = 1,
                    enable_expert_parallel: bool = False, include_mtp: bool = False,
                    vision_tp: bool = False) -> tuple[int, int]:
    """(checkpoint bytes of the routed experts on rank 0, checkpoint bytes rank 0 loads) under vLLM's
    sharding (module docstring). Rank 0 is the largest rank (it holds the extra expert under EP)."""
    moe_ranks = max(1, tp * dp)
    ep = enable_expert_parallel and moe_ranks > 1
    experts = total = 0
    for t in tensors:
        if _skipped(t, spec, include_mtp):
            continue
        t = _as_served(t, spec)
        b = _tensor_share(t, spec, tp, moe_ranks, ep, vision_tp)
        total += b
        if _EXPERT.search(t.name) and spec.moe is not None and not _VISION.search(t.name):
            experts += b
    return experts, total
