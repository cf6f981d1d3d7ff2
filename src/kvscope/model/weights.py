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


# DeepSeek-V4 checkpoint (config ``expert_dtype: fp4``): routed experts are MXFP4 -- two e2m1 values
# per byte plus one e8m0 scale byte per 32 values; every other quantized linear is fp8 e4m3 with one
# e8m0 scale byte per 128 x 128 block ("FP4 checkpoints store FP8 linear scales as e8m0fnu",
# vllm/models/deepseek_v4/quant_config.py @ v0.33.0). Expert-dtype fp8 checkpoints (V4-Flash-Base)
# keep float32 block scales.
DSV4_FP4_GROUP = 32


def _dsv4_linear(rows: int, cols: int, s: ModelSpec, kind: str) -> int:
    """Stored bytes of one DeepSeek-V4 linear: ``fp4`` experts, ``fp8`` block-quantized, ``bf16``."""
    v4 = s.dsv4
    assert v4 is not None
    n = rows * cols
    if kind == "fp4":
        return n // 2 + rows * (-(-cols // DSV4_FP4_GROUP))
    if kind == "fp8":
        scale = 1 if v4.expert_dtype == "fp4" else 4
        return n + (-(-rows // 128)) * (-(-cols // 128)) * scale
    return n * s.dtype_bytes


def _dsv4_layer_groups(s: ModelSpec, i: int, ratio: int) -> Iterable[TensorGroup]:
    """One DeepSeek-V4 decoder layer's parameters, by the shapes and parallel linears of
    vllm/models/deepseek_v4/{attention,compressor}.py and nvidia/model.py @ v0.33.0:
    ``fused_wqa_wkv`` (wq_a + wkv) replicated, ``wq_b`` / ``wo_a`` column-parallel, ``wo_b``
    row-parallel, compressor and indexer replicated (compressor linears unquantized), routed experts
    split over TP/EP, the shared expert TP-split, router, hash table, norms and hyper-connection
    (mHC) mixers replicated (fp32)."""
    v4 = s.dsv4
    assert v4 is not None and s.moe is not None
    h, hd, nh = s.hidden_size, v4.head_dim, s.num_attention_heads
    e = s.dtype_bytes
    fp8 = "fp8" if s.quant.is_quantized else "bf16"
    lin = lambda r, c, k: (r * c, _dsv4_linear(r, c, s, k))  # noqa: E731
    for name, (numel, nbytes), shard in (
        ("attn", lin(v4.q_lora_rank + hd, h, fp8), REPLICATED),  # wq_a + wkv
        ("attn", lin(nh * hd, v4.q_lora_rank, fp8), ATTN_TP),  # wq_b
        ("attn", lin(v4.o_groups * v4.o_lora_rank, nh * hd // v4.o_groups, fp8), ATTN_TP),  # wo_a
        ("attn", lin(h, v4.o_groups * v4.o_lora_rank, fp8), ATTN_TP),  # wo_b
    ):
        yield TensorGroup(name, i, numel, nbytes, shard)
    yield TensorGroup("attn", i, nh, nh * 4, ATTN_TP)  # attn_sink (fp32)
    yield TensorGroup("norm", i, v4.q_lora_rank + hd + 2 * h, (v4.q_lora_rank + hd + 2 * h) * e, REPLICATED)
    if ratio > 1:  # compressor: wkv + wgate (coff * head_dim each), ape (fp32), norm
        coff = 2 if ratio == 4 else 1
        n = 2 * coff * hd * h
        yield TensorGroup("compressor", i, n, n * e, REPLICATED)
        yield TensorGroup("compressor", i, ratio * coff * hd + hd, ratio * coff * hd * 4 + hd * e, REPLICATED)
    if ratio == 4:  # lightning indexer: wq_b (fp8), weights_proj (bf16), its own compressor (head 128)
        ih, inh = v4.index_head_dim, v4.index_n_heads
        numel, nbytes = lin(inh * ih, v4.q_lora_rank, fp8)
        yield TensorGroup("indexer", i, numel, nbytes, REPLICATED)
        yield TensorGroup("indexer", i, inh * h, inh * h * e, REPLICATED)
        n = 2 * 2 * ih * h
        yield TensorGroup("indexer", i, n + 4 * 2 * ih + ih, n * e + 4 * 2 * ih * 4 + ih * e, REPLICATED)
    moe = s.moe
    inter = moe.moe_intermediate_size
    kind = "fp4" if v4.expert_dtype == "fp4" else fp8
    per_expert = sum(_dsv4_linear(r, c, s, kind) for r, c in _mlp_mats(h, inter, True))
    yield TensorGroup("experts", i, moe.num_experts * 3 * h * inter, moe.num_experts * per_expert, TP)
    if moe.shared_intermediate_size:
        for r, c in _mlp_mats(h, moe.shared_intermediate_size, True):
            yield TensorGroup("shared_experts", i, r * c, _dsv4_linear(r, c, s, fp8), TP)
    yield TensorGroup("router", i, moe.num_experts * h, moe.num_experts * h * e, REPLICATED)
    if i < v4.num_hash_layers:  # tid2eid: (vocab, top-k) int64 hash routing table
        n = s.vocab_size * moe.num_experts_per_tok
        yield TensorGroup("router", i, n, n * 8, REPLICATED)
    else:  # e_score_correction_bias (fp32)
        yield TensorGroup("router", i, moe.num_experts, moe.num_experts * 4, REPLICATED)
    mix = (2 + v4.hc_mult) * v4.hc_mult
    n = 2 * (mix * v4.hc_mult * h + mix + 3)  # hc_attn_* and hc_ffn_* (fn, base, scale), fp32
    yield TensorGroup("norm", i, n, n * 4, REPLICATED)


def _dsv4_tensor_groups(s: ModelSpec, include_mtp: bool) -> tuple[TensorGroup, ...]:
    """DeepSeek-V4: embed / lm_head (bf16, vocab-parallel), final norm + mHC head, decoder layers;
    MTP layers (SWA-only attention, e_proj / h_proj fp8, enorm / hnorm, their own mHC head) share
    the target's embedding and head (vllm/models/deepseek_v4/nvidia/mtp.py @ v0.33.0)."""
    v4 = s.dsv4
    assert v4 is not None
    e, h = s.dtype_bytes, s.hidden_size
    hc = v4.hc_mult * v4.hc_mult * h + v4.hc_mult + 1  # hc_head_fn, _base, _scale (fp32)
    out: list[TensorGroup] = [TensorGroup("embed", None, s.vocab_size * h, s.vocab_size * h * e, VOCAB)]
    for i, ratio in enumerate(v4.compress_ratios):
        out.extend(_dsv4_layer_groups(s, i, ratio))
    out.append(TensorGroup("norm", None, h + hc, h * e + hc * 4, REPLICATED))
    out.append(TensorGroup("lm_head", None, s.vocab_size * h, s.vocab_size * h * e, VOCAB))
    if include_mtp:
        fp8 = "fp8" if s.quant.is_quantized else "bf16"
        for j in range(s.num_nextn_predict_layers):
            idx = s.num_hidden_layers + j
            for g in _dsv4_layer_groups(s, idx, 0):
                out.append(TensorGroup("mtp", idx, g.numel, g.bytes, g.shard))
            n = 2 * h * h
            out.append(TensorGroup("mtp", idx, n, 2 * _dsv4_linear(h, h, s, fp8), REPLICATED))
            out.append(TensorGroup("mtp", idx, 3 * h + hc, 3 * h * e + hc * 4, REPLICATED))
    return tuple(out)


def tensor_groups(s: ModelSpec, include_mtp: bool = False, include_vision: bool = True) -> tuple[TensorGroup, ...]:
    """Every weight of the model, grouped by kind and layer (estimated from the spec)."""
    if s.dsv4 is not None:
        return _dsv4_tensor_groups(s, include_mtp)
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
