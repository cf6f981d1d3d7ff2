"""Weight bytes: the whole checkpoint and the share each GPU rank holds.

Computed from the ModelSpec and its quantization (an estimate: marked ``estimated=True``), or
exact from safetensors headers when a local checkpoint is given (``model/safetensors.py``).

Sharding follows SGLang's (and vLLM's) layer classes: attention q/o split by heads over the
attention-TP group, k/v split by KV heads and replicated when there are fewer KV heads than
ranks; MLA ``q_a_proj`` / ``kv_a_proj_with_mqa`` are ``ReplicatedLinear`` (sglang
``models/deepseek_v2.py``), ``q_b_proj`` / ``kv_b_proj`` column-parallel, ``o_proj`` row-parallel;
dense MLPs and experts split over TP (experts over EP x MoE-TP, which together span the TP
group); embeddings and lm_head vocab-parallel; norms and routers replicated; PP stages own a
contiguous slice of layers (embedding on the first, lm_head on the last).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .quant import QuantSpec
from .spec import FULL, LINEAR, MAMBA, SLIDING, ModelSpec

# shard rules
REPLICATED = "replicated"
TP = "tp"  # split evenly over the TP group
ATTN_TP = "attn_tp"  # split over the attention-TP group (tp / dp with DP attention)
KV_HEADS = "kv_heads"  # split by KV heads over attention TP, replicated below one head per rank
VOCAB = "vocab"  # vocab-parallel over TP


@dataclass(frozen=True)
class TensorGroup:
    name: str  # embed | lm_head | attn | indexer | mlp_dense | experts | shared_experts | router | norm | mamba | vision | mtp
    layer: int | None  # decoder layer index (None for embed/lm_head/vision; num_hidden_layers+i for MTP)
    numel: int
    bytes: int  # as stored (quantization applied)
    shard: str


@dataclass(frozen=True)
class WeightsEstimate:
    total_bytes: int  # whole checkpoint (without duplication)
    per_rank_bytes: int  # the largest rank's share
    groups: tuple[TensorGroup, ...]
    estimated: bool
    source: str
    per_stage_bytes: tuple[int, ...] = ()  # one TP rank's share, per PP stage

    def bytes_of(self, name: str) -> int:
        return sum(g.bytes for g in self.groups if g.name == name)


def _linear_bytes(rows: int, cols: int, q: QuantSpec, quantized: bool, dtype_bytes: int) -> int:
    """Stored bytes of one ``rows x cols`` linear weight."""
    n = rows * cols
    if not quantized or not q.is_quantized:
        return n * dtype_bytes
    if q.weight_bits == 8:
        if q.block_size:  # fp8 block scales: float32 per (128 x 128) block
            br, bc = q.block_size
            return n + (-(-rows // br)) * (-(-cols // bc)) * 4
        return n + rows * 4  # per-channel scale
    data = n * q.weight_bits // 8
    if q.group_size:
        groups = rows * (-(-cols // q.group_size))
        data += groups * q.scale_bytes
        if q.zero_point:
            data += groups * q.weight_bits // 8
    return data


def _mlp_mats(hidden: int, inter: int, gated: bool) -> tuple[tuple[int, int], ...]:
    if gated:  # gate, up: (inter x hidden); down: (hidden x inter)
        return ((inter, hidden), (inter, hidden), (hidden, inter))
    return ((inter, hidden), (hidden, inter))


def _attn_mats(s: ModelSpec) -> tuple[tuple[str, int, int, str], ...]:
    """(name, rows, cols, shard) of one attention block."""
    h = s.hidden_size
    if s.is_mla:
        nope, rope = s.qk_nope_head_dim or 0, s.qk_rope_head_dim or 0
        out = []
        if s.q_lora_rank:
            out += [("q_a_proj", s.q_lora_rank, h, REPLICATED),
                    ("q_b_proj", s.num_attention_heads * (nope + rope), s.q_lora_rank, ATTN_TP)]
        else:
            out += [("q_proj", s.num_attention_heads * (nope + rope), h, ATTN_TP)]
        out += [("kv_a_proj_with_mqa", (s.kv_lora_rank or 0) + rope, h, REPLICATED),
                ("kv_b_proj", s.num_attention_heads * (nope + s.v_head_dim), s.kv_lora_rank or 0, ATTN_TP),
                ("o_proj", h, s.num_attention_heads * s.v_head_dim, ATTN_TP)]
        return tuple(out)
    return (("q_proj", s.num_attention_heads * s.head_dim, h, ATTN_TP),
            ("k_proj", s.num_key_value_heads * s.head_dim, h, KV_HEADS),
            ("v_proj", s.num_key_value_heads * s.v_head_dim, h, KV_HEADS),
            ("o_proj", h, s.num_attention_heads * s.v_head_dim, ATTN_TP))


def _is_quantized(q: QuantSpec, module: str) -> bool:
    """Whether a linear of kind ``module`` (attn | experts | shared_experts | mlp_dense | mamba) is quantized."""
    if not q.is_quantized:
        return False
    if q.experts_only:
        return module == "experts"
    return True


def _layer_groups(s: ModelSpec, i: int, layer_kind: str, ffn_kind: str, gated: bool) -> Iterable[TensorGroup]:
    q, e, h = s.quant, s.dtype_bytes, s.hidden_size
    # Gemma 2/3 have four norms per layer (input, post-attention, pre- and post-feedforward).
    norms = 4 if s.model_type in ("gemma2", "gemma3", "gemma3_text") else 2
    yield TensorGroup("norm", i, norms * h, norms * h * e, REPLICATED)
    if layer_kind in (FULL, SLIDING):
        for _name, rows, cols, shard in _attn_mats(s):
            yield TensorGroup("attn", i, rows * cols, _linear_bytes(rows, cols, q, _is_quantized(q, "attn"), e), shard)
        if s.is_mla:  # kv_a_layernorm (+ q_a_layernorm)
            n = (s.kv_lora_rank or 0) + (s.q_lora_rank or 0)
            yield TensorGroup("norm", i, n, n * e, REPLICATED)
        if s.has_dsa_indexer:
            ih, nh = s.index_head_dim or 0, s.index_n_heads or 0
            mats = ((nh * ih, s.q_lora_rank or h), (ih, h), (nh, h))
            for rows, cols in mats:
                yield TensorGroup("indexer", i, rows * cols, _linear_bytes(rows, cols, q, _is_quantized(q, "attn"), e),
                                  REPLICATED)
    elif layer_kind in (LINEAR, MAMBA) and s.mamba is not None:
        m = s.mamba
        if m.kind == "gdn":
            vdim = m.num_heads * m.state_size
            in_rows = m.conv_dim + vdim + 2 * m.num_heads  # qkvz + ba
            out_cols = vdim
        else:
            inter = m.num_heads * m.head_dim
            in_rows = 2 * inter + 2 * m.n_groups * m.state_size + m.num_heads
            out_cols = inter
        mq = _is_quantized(q, "mamba")
        yield TensorGroup("mamba", i, in_rows * h, _linear_bytes(in_rows, h, q, mq, e), TP)
        yield TensorGroup("mamba", i, h * out_cols, _linear_bytes(h, out_cols, q, mq, e), TP)
        small = m.conv_dim * m.conv_kernel + 3 * m.num_heads + out_cols
        yield TensorGroup("mamba", i, small, small * e, TP)
    if ffn_kind == "dense":
        for rows, cols in _mlp_mats(h, s.intermediate_size, gated):
            yield TensorGroup("mlp_dense", i, rows * cols, _linear_bytes(rows, cols, q, _is_quantized(q, "mlp_dense"), e), TP)
    elif ffn_kind == "moe" and s.moe is not None:
        moe = s.moe
        per_expert = sum(_linear_bytes(r, c, q, _is_quantized(q, "experts"), e)
                         for r, c in _mlp_mats(h, moe.moe_intermediate_size, gated))
        numel = moe.num_experts * 3 * h * moe.moe_intermediate_size
        yield TensorGroup("experts", i, numel, per_expert * moe.num_experts, TP)
        if moe.shared_intermediate_size:
            for r, c in _mlp_mats(h, moe.shared_intermediate_size, gated):
                yield TensorGroup("shared_experts", i, r * c,
                                  _linear_bytes(r, c, q, _is_quantized(q, "shared_experts"), e), TP)
        router = moe.num_experts * h + (moe.num_experts if moe.has_gate_bias else 0)
        # routers are kept in the model dtype (DeepSeek keeps gate.weight bf16; bias float32)
        yield TensorGroup("router", i, router, router * e, REPLICATED)


def tensor_groups(s: ModelSpec, include_mtp: bool = False, include_vision: bool = True) -> tuple[TensorGroup, ...]:
    """Every weight of the model, grouped by kind and layer (estimated from the spec)."""
    e, h = s.dtype_bytes, s.hidden_size
    gated = s.model_type not in ("nemotron_h",)  # Nemotron-H MLPs are relu2 (up, down)
    out: list[TensorGroup] = [TensorGroup("embed", None, s.vocab_size * h, s.vocab_size * h * e, VOCAB)]
    for i, (kind, ffn) in enumerate(zip(s.layer_types, s.ffn_types)):
        out.extend(_layer_groups(s, i, kind, ffn, gated))
    out.append(TensorGroup("norm", None, h, h * e, REPLICATED))
    if not s.tie_word_embeddings:
        out.append(TensorGroup("lm_head", None, s.vocab_size * h, s.vocab_size * h * e, VOCAB))
    if include_mtp:
        for j in range(s.num_nextn_predict_layers):
            idx = s.num_hidden_layers + j
            ffn = "moe" if s.moe is not None else "dense"
            for g in _layer_groups(s, idx, FULL, ffn, gated):
                out.append(TensorGroup("mtp", idx, g.numel, g.bytes, g.shard))
            eh = 2 * h * h + 3 * h  # eh_proj + enorm/hnorm/shared_head.norm
            out.append(TensorGroup("mtp", idx, eh, eh * e, REPLICATED))
            # DeepSeek-V3 / GLM-4.5 checkpoints store the MTP layer's own embed_tokens and
            # shared_head.head (the HF parameter counts include them: 684.5B vs 682.6B for V3).
            out.append(TensorGroup("mtp", idx, 2 * s.vocab_size * h, 2 * s.vocab_size * h * e, VOCAB))
    if include_vision and s.vision is not None:
        v = s.vision
        per_layer = 4 * v.hidden_size * v.hidden_size + 2 * v.hidden_size * v.intermediate_size
        n = v.num_layers * per_layer
        out.append(TensorGroup("vision", None, n, n * e, REPLICATED))
    return tuple(out)


def _shard_bytes(g: TensorGroup, s: ModelSpec, tp: int, attn_tp: int) -> int:
    if g.shard == REPLICATED:
        return g.bytes
    if g.shard == ATTN_TP:
        return -(-g.bytes // attn_tp)
    if g.shard == KV_HEADS:
        heads_per_rank = max(1, s.num_key_value_heads // attn_tp)
        return g.bytes * heads_per_rank // s.num_key_value_heads
    return -(-g.bytes // tp)  # TP, VOCAB


def pp_layer_range(num_layers: int, pp_rank: int, pp: int) -> tuple[int, int]:
    """Layers [start, end) of one PP stage: ``get_pp_indices`` (sglang/vllm ``distributed/utils.py``):
    even split, the remainder going to the last stages (vLLM) — here: the first ``L % pp`` stages
    get one fewer [approximation shared by both engines' default partition]."""
    base, rem = divmod(num_layers, pp)
    sizes = [base + (1 if r >= pp - rem else 0) for r in range(pp)]
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


def weights_per_rank(s: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, attn_tp: int | None = None,
                     include_mtp: bool = False, include_vision: bool = True) -> WeightsEstimate:
    """Bytes each rank holds; the max over PP stages (every TP rank of a stage holds the same share)."""
    del ep  # experts split over EP x MoE-TP = TP in both engines: the per-rank share is the same
    attn_tp = attn_tp or tp
    groups = tensor_groups(s, include_mtp=include_mtp, include_vision=include_vision)
    total = sum(g.bytes for g in groups)
    stages = []
    for stage in range(pp):
        lo, hi = pp_layer_range(s.num_hidden_layers, stage, pp)
        share = 0
        for g in groups:
            if g.layer is not None and g.layer < s.num_hidden_layers and not lo <= g.layer < hi:
                continue
            if g.name == "embed" and stage != 0 and pp > 1:
                continue
            if g.name in ("lm_head", "mtp") and stage != pp - 1:
                continue
            if g.name == "vision" and stage != 0:
                continue
            if g.layer is None and g.name == "norm" and stage != pp - 1:
                continue
            share += _shard_bytes(g, s, tp, attn_tp)
        stages.append(share)
    return WeightsEstimate(total_bytes=total, per_rank_bytes=max(stages), groups=groups, estimated=True,
                           source="estimated from config.json (parameter shapes x quantization)",
                           per_stage_bytes=tuple(stages))
