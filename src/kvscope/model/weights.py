"""Weight bytes: the whole checkpoint and the share each GPU rank holds.

Computed from the ModelSpec and its quantization (an estimate: marked ``estimated=True``), or
exact from safetensors headers when a local checkpoint is given (``model/safetensors.py``).

Sharding follows SGLang's (and vLLM's) layer classes: attention q/o split by heads over the
attention-TP group, k/v split by KV heads and replicated when there are fewer KV heads than
ranks; MLA ``q_a_proj`` / ``kv_a_proj_with_mqa`` are ``ReplicatedLinear`` (sglang
``models/deepseek_v2.py``), ``q_b_proj`` / ``kv_b_proj`` column-parallel, ``o_proj`` row-parallel;
dense MLPs and experts split over TP (experts over EP x MoE-TP, which together span the TP
group); embeddings and lm_head vocab-parallel (the vocabulary padded to a multiple of 64 first);
norms and routers replicated; PP stages own a contiguous slice of layers (embedding on the first,
lm_head on the last).

With ``engine=`` ("vllm" | "sglang") the per-rank figure also carries what that engine allocates
beyond its checkpoint share while loading (``WeightsEstimate.extras``): the RoPE cos/sin cache,
SGLang's MLA ``w_kc``/``w_vc`` copies, SGLang's CUDA caching-allocator rounding (its "mem usage"
is a ``mem_get_info`` difference) and vLLM's MXFP4 expert layouts. Each rule cites its engine
file; tests/model/test_weights_vs_logs.py checks them against real startup logs.
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

# VocabParallelEmbedding / ParallelLMHead pad the vocabulary to a multiple of 64 and then divide it
# by the TP size: ``pad_vocab_size(vocab, DEFAULT_VOCAB_PADDING_SIZE=64)`` and
# ``num_embeddings_per_partition = divide(num_embeddings_padded, tp_size)``
# (vllm/model_executor/layers/vocab_parallel_embedding.py @ v0.19.0,
# sglang/srt/layers/vocab_parallel_embedding.py @ v0.5.9; SGLang multiplies the padding by the TP
# size only on CPU).
VOCAB_PADDING_SIZE = 64

# Small parameters the checkpoint carries besides the big matrices.
# q/k/v biases: Qwen2 family ``QKVParallelLinear(..., bias=True)`` (vllm & sglang models/qwen2.py);
# config ``attention_bias`` elsewhere (GPT-OSS, GLM-4.5, Llama variants).
QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
# o_proj bias when ``attention_bias``: vllm models/gpt_oss.py (o_proj bias=True), models/llama.py
# (``bias_o_proj = attention_bias``); GLM-4.5's o_proj has none (models/glm4_moe.py).
O_BIAS_TYPES = frozenset({"gpt_oss", "llama"})
# per-head RMSNorm of q and k (``q_norm`` / ``k_norm``, head_dim each): models/qwen3*.py, gemma3.py
QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "qwen3_next", "qwen3_vl_text", "qwen3_vl_moe_text",
                           "qwen3_5_text", "qwen3_5_moe_text", "gemma3", "gemma3_text"})

ENGINES = ("vllm", "sglang")
DEVICES = ("cuda", "rocm")


@dataclass(frozen=True)
class TensorGroup:
    """The weights of one kind in one layer (element count and bytes)."""

    name: str  # embed | lm_head | attn | indexer | mlp_dense | experts | shared_experts | router | norm | mamba | vision | mtp
    layer: int | None  # decoder layer index (None for embed/lm_head/vision; num_hidden_layers+i for MTP)
    numel: int
    bytes: int  # as stored (quantization applied)
    shard: str


@dataclass(frozen=True)
class WeightsEstimate:
    """The weights of a checkpoint: total, per rank and per PP stage, by group."""

    total_bytes: int  # whole checkpoint (without duplication)
    per_rank_bytes: int  # the largest rank's share
    groups: tuple[TensorGroup, ...]
    estimated: bool
    source: str
    per_stage_bytes: tuple[int, ...] = ()  # one TP rank's share, per PP stage
    # engine allocations beyond the checkpoint share, (name, bytes), of the largest stage; included
    # in per_rank_bytes / per_stage_bytes (empty without ``engine=``)
    extras: tuple[tuple[str, int], ...] = ()

    def bytes_of(self, name: str) -> int:
        return sum(g.bytes for g in self.groups if g.name == name)


def _linear_bytes(rows: int, cols: int, q: QuantSpec, quantized: bool, dtype_bytes: int) -> int:
    """Stored bytes of one ``rows x cols`` linear weight."""
    n = rows * cols
    if not quantized or not q.is_quantized:
        return n * dtype_bytes
    if q.weight_bits == 8:
        if q.per_tensor:  # one float32 scale for the whole weight (vLLM online fp8)
            return n + 4
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


def _attn_small_groups(s: ModelSpec, i: int) -> Iterable[TensorGroup]:
    """q/k/v(/o) biases, GPT-OSS attention sinks, q_norm/k_norm of one (non-MLA) attention layer."""
    e, h = s.dtype_bytes, s.hidden_size
    if s.model_type in QKV_BIAS_TYPES or s.attention_bias:
        nq, nkv = s.num_attention_heads * s.head_dim, s.num_key_value_heads * (s.head_dim + s.v_head_dim)
        yield TensorGroup("attn", i, nq, nq * e, ATTN_TP)
        yield TensorGroup("attn", i, nkv, nkv * e, KV_HEADS)
    if s.attention_bias and s.model_type in O_BIAS_TYPES:  # RowParallelLinear keeps the whole bias per rank
        yield TensorGroup("attn", i, h, h * e, REPLICATED)
    if s.model_type == "gpt_oss":  # sinks: one per head, split with the heads (vllm models/gpt_oss.py)
        yield TensorGroup("attn", i, s.num_attention_heads, s.num_attention_heads * e, ATTN_TP)
    if s.model_type in QK_NORM_TYPES:
        yield TensorGroup("norm", i, 2 * s.head_dim, 2 * s.head_dim * e, REPLICATED)


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
        if not s.is_mla:
            yield from _attn_small_groups(s, i)
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
        if s.model_type == "gpt_oss":
            # expert biases (bf16 in the checkpoint): gate_up (E, 2I) column-parallel; down (E, H)
            # full on every rank (FusedMoE ``w2_bias``, vllm quantization/mxfp4.py @ v0.19.0)
            n13, n2 = moe.num_experts * 2 * moe.moe_intermediate_size, moe.num_experts * h
            yield TensorGroup("experts", i, n13, n13 * e, TP)
            yield TensorGroup("experts", i, n2, n2 * e, REPLICATED)
        router = moe.num_experts * h + (moe.num_experts if moe.has_gate_bias or s.model_type == "gpt_oss" else 0)
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


def pad_vocab_size(vocab_size: int, pad_to: int = VOCAB_PADDING_SIZE) -> int:
    """``pad_vocab_size`` of vllm/sglang ``layers/vocab_parallel_embedding.py`` (v0.19.0 / v0.5.9)."""
    return -(-vocab_size // pad_to) * pad_to


def vocab_rows_per_rank(vocab_size: int, tp: int) -> int:
    """Rows of the embedding / lm_head a rank allocates: ``divide(pad_vocab_size(vocab), tp)``
    (``VocabParallelEmbedding.num_embeddings_per_partition``; ceil where 64 x k is not a multiple
    of TP, where the engines would refuse to start)."""
    return -(-pad_vocab_size(vocab_size) // tp)


def _shard_bytes(g: TensorGroup, s: ModelSpec, tp: int, attn_tp: int) -> int:
    if g.shard == REPLICATED:
        return g.bytes
    if g.shard == ATTN_TP:
        return -(-g.bytes // attn_tp)
    if g.shard == KV_HEADS:
        heads_per_rank = max(1, s.num_key_value_heads // attn_tp)
        return g.bytes * heads_per_rank // s.num_key_value_heads
    if g.shard == VOCAB:
        # SGLang with DP attention builds the embedding over the attention-TP group
        # (``VocabParallelEmbedding(..., use_attn_tp_group=is_dp_attention_enabled())``,
        # sglang/srt/models/{deepseek_v2,qwen2,gpt_oss}.py @ v0.5.9); lm_head stays on the TP group
        # (``use_attn_tp_group=enable_dp_lm_head``, off by default). attn_tp == tp elsewhere.
        group = attn_tp if g.name == "embed" else tp
        return vocab_rows_per_rank(s.vocab_size, group) * (g.bytes // s.vocab_size)
    return -(-g.bytes // tp)  # TP


# --- engine allocations beyond the checkpoint share ------------------------------------------

def rope_caches(s: ModelSpec) -> tuple[tuple[int, int], ...]:
    """(positions, rotary_dim) of each RoPE ``cos_sin_cache`` buffer a rank holds.

    ``get_rope`` memoises one RotaryEmbedding per distinct parameter set (``_ROPE_DICT``), so every
    layer shares one cache -- Gemma 3 has two: its sliding layers use ``rope_local_base_freq``
    without scaling, its global layers the config's ``rope_scaling`` (vllm models/gemma3.py). Rows:
    ``max_position`` for the default / llama3 / mrope kinds, ``original_max_position_embeddings *
    factor`` for YaRN and DeepSeek-YaRN, ``max_position * factor`` for linear / dynamic-NTK
    scaling, ``max_position + original_max_position_embeddings`` for Phi-3 LongRoPE
    (phi3_long_rope_scaled_rope.py); width ``rotary_dim`` (cos and sin halves): ``head_dim * partial_rotary_factor``, or
    ``qk_rope_head_dim`` for MLA (vllm/model_executor/layers/rotary_embedding/{__init__,base,
    yarn_scaling_rope,deepseek_scaling_rope,linear_scaling_rope}.py @ v0.19.0; the same in
    sglang/srt/layers/rotary_embedding.py @ v0.5.9). Nemotron-H attention is NoPE; DeepSeek-V4
    is left out (its own path)."""
    if s.dsv4 is not None or s.model_type == "nemotron_h" or not any(t in (FULL, SLIDING) for t in s.layer_types):
        return ()
    cfg = dict(s.length_config)
    rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(rp, dict):
        rp = {}
    kind = str(rp.get("rope_type") or rp.get("type") or "default")
    factor = float(rp.get("factor") or 1.0)
    positions = s.max_position_embeddings
    if kind in ("yarn", "deepseek_yarn"):
        positions = int(int(rp.get("original_max_position_embeddings") or positions) * factor)
    elif kind in ("linear", "dynamic"):
        positions = int(positions * factor)
    elif kind in ("longrope", "su"):  # Phi-3 LongRoPE: short (original) + long caches, concatenated
        positions += int(cfg.get("original_max_position_embeddings") or rp.get("original_max_position_embeddings") or 0)
    partial = cfg.get("partial_rotary_factor") or rp.get("partial_rotary_factor") or 1.0
    rotary_dim = (s.qk_rope_head_dim or 0) if s.is_mla else int(s.head_dim * float(partial))
    if s.model_type in ("gemma3", "gemma3_text"):
        return ((positions, rotary_dim), (s.max_position_embeddings, rotary_dim))
    return ((positions, rotary_dim),)


def rope_cache_bytes(s: ModelSpec, engine: str, device: str = "cuda") -> int:
    """Bytes of the RoPE cos/sin cache(s) on one rank.

    SGLang keeps the cache in float32 on CUDA ("cache needs to be in FP32 for numerical
    stability": ``if not _is_cuda: cache = cache.to(dtype)``, sglang/srt/layers/rotary_embedding.py
    @ v0.4.6.post5 and v0.5.9), the model dtype elsewhere (ROCm). vLLM casts it to the model dtype
    (``cache.to(dtype)`` unless ``use_flashinfer``, base.py @ v0.19.0); DeepSeek-YaRN (MLA models)
    sets ``use_flashinfer`` on CUDA, which keeps float32 (deepseek_scaling_rope.py @ v0.19.0)."""
    if engine == "sglang":
        nbytes = 4 if device == "cuda" else s.dtype_bytes
    else:
        # MiniCPM3 is MLA-shaped but uses LongRoPE (phi3_long_rope_scaled_rope.py: the model dtype)
        nbytes = 4 if (device == "cuda" and s.is_mla and s.model_type != "minicpm3") else s.dtype_bytes
    return sum(positions * rotary_dim for positions, rotary_dim in rope_caches(s)) * nbytes


def sglang_mla_absorbed_bytes(s: ModelSpec, attn_tp: int, device: str = "cuda") -> int:
    """One MLA layer's ``w_kc`` + ``w_vc``: SGLang splits ``kv_b_proj`` into them after loading and
    keeps both (``w_kc.transpose(1, 2).contiguous()``, ``w_vc.contiguous()``;
    sglang/srt/models/deepseek_common/deepseek_weight_loader.py @ v0.5.9). An fp8 128x128-block
    kv_b_proj is dequantized to bf16 on CUDA (``block_quant_dequant``), requantized per tensor
    (1 byte) elsewhere; an unquantized one is copied in the model dtype."""
    if not s.is_mla:
        return 0
    heads = -(-s.num_attention_heads // attn_tp)
    numel = heads * ((s.qk_nope_head_dim or 0) + s.v_head_dim) * (s.kv_lora_rank or 0)
    q = s.quant
    if _is_quantized(q, "attn") and q.weight_bits == 8:
        nbytes = 2 if (device == "cuda" and q.block_size == (128, 128)) else 1
    elif _is_quantized(q, "attn"):
        nbytes = 2  # int4/fp4 kv_b_proj: dequantized (sglang channel/int8 paths -> bf16)
    else:
        nbytes = s.dtype_bytes
    return numel * nbytes


def sglang_wna16_moe_index_bytes(s: ModelSpec, tp: int, ep: int = 1) -> int:
    """One MoE layer's int32 act-order index buffers that SGLang's compressed-tensors WNA16 MoE keeps
    on ROCm: ``create_weights`` registers ``w13_weight_g_idx`` / ``w13_g_idx_sort_indices``
    (E, H) and ``w2_weight_g_idx`` / ``w2_g_idx_sort_indices`` (E, I/tp), all int32, plus
    ``w{13,2}_weight_shape`` (E, 2) float32. The CUDA (Marlin) path replaces the four index tensors
    by empty (E, 0) ones after loading when there is no act-order; the ROCm
    ``CompressedTensorsWNA16TritonMoE.process_weights_after_loading`` only re-lays the packed
    weights and scales and leaves them allocated
    (sglang/srt/layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16_moe.py
    @ v0.5.9)."""
    if s.moe is None:
        return 0
    moe_tp = max(1, tp // max(1, ep))
    experts = s.moe.num_experts // max(1, ep)
    inter = -(-s.moe.moe_intermediate_size // moe_tp)
    return experts * (2 * s.hidden_size + 2 * inter) * 4 + 2 * experts * 2 * 4


# PyTorch CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp): a request of at least
# kMinLargeAlloc (10 MiB) gets its own cudaMalloc segment rounded up to kRoundLarge (2 MiB);
# requests of 1-10 MiB share 20 MiB segments, smaller ones 2 MiB segments.
MIN_LARGE_ALLOC = 10 * 2**20
ROUND_LARGE = 2 * 2**20


def segment_rounding_bytes(sizes: Iterable[int]) -> int:
    """Bytes a ``mem_get_info`` difference sees beyond the tensors themselves: the 2 MiB rounding of
    every tensor of at least 10 MiB (each gets its own segment while the model is built; the
    packing slack of the 1-10 MiB pools is left out)."""
    return sum(-(-n // ROUND_LARGE) * ROUND_LARGE - n for n in sizes if n >= MIN_LARGE_ALLOC)


def _data_bytes(rows: int, cols: int, s: ModelSpec, module: str) -> int:
    """Bytes of a linear's weight tensor alone (its scales are separate, small tensors)."""
    q = s.quant
    if _is_quantized(q, module):
        return rows * cols * q.weight_bits // 8
    return rows * cols * s.dtype_bytes


def sglang_rank_tensor_sizes(s: ModelSpec, layers: Iterable[int], tp: int, attn_tp: int,
                             first: bool, last: bool) -> list[int]:
    """Byte sizes of the large per-rank tensors SGLang allocates for ``layers``, as its layers fuse
    them: ``qkv_proj`` (QKVParallelLinear), ``o_proj``, ``gate_up_proj`` (MergedColumnParallelLinear),
    ``down_proj``, the FusedMoE ``w13_weight`` (E, 2I/tp, H) and ``w2_weight`` (E, H, I/tp), the
    vocab-parallel embedding and lm_head (sglang/srt/models/{llama,qwen2,qwen3,qwen3_moe}.py,
    layers/moe/fused_moe_triton/layer.py @ v0.5.9). MLA, mamba and vision tensors are left out."""
    h, e = s.hidden_size, s.dtype_bytes
    out: list[int] = []
    if first:
        out.append(vocab_rows_per_rank(s.vocab_size, attn_tp) * h * e)
    if last and not s.tie_word_embeddings:
        out.append(vocab_rows_per_rank(s.vocab_size, tp) * h * e)
    gated = s.model_type not in ("nemotron_h",)
    for i in layers:
        if s.layer_types[i] in (FULL, SLIDING) and not s.is_mla:
            qh = -(-s.num_attention_heads // attn_tp)
            kvh = max(1, s.num_key_value_heads // attn_tp)
            out.append(_data_bytes((qh + kvh) * s.head_dim + kvh * s.v_head_dim, h, s, "attn"))
            out.append(_data_bytes(h, qh * s.v_head_dim, s, "attn"))
        ffn = s.ffn_types[i]
        if ffn == "dense":
            inter = -(-s.intermediate_size // tp)
            out.append(_data_bytes((2 if gated else 1) * inter, h, s, "mlp_dense"))
            out.append(_data_bytes(h, inter, s, "mlp_dense"))
        elif ffn == "moe" and s.moe is not None:
            m = s.moe
            inter = -(-m.moe_intermediate_size // tp)
            out.append(_data_bytes(m.num_experts * (2 if gated else 1) * inter, h, s, "experts"))
            out.append(_data_bytes(m.num_experts * h, inter, s, "experts"))
            if m.shared_intermediate_size:
                sh = -(-m.shared_intermediate_size // tp)
                out.append(_data_bytes(2 * sh, h, s, "shared_experts"))
                out.append(_data_bytes(h, sh, s, "shared_experts"))
    return out


# vLLM MXFP4 (GPT-OSS) expert layouts, by MoE backend.
MXFP4_BACKENDS = ("marlin", "triton_hopper", "triton_hopper_noprepad", "flashinfer_trtllm",
                  "flashinfer_cutlass", "rocm", "checkpoint")


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def vllm_mxfp4_moe_layer_bytes(s: ModelSpec, tp: int, backend: str, ep: int = 1) -> int:
    """Bytes one rank allocates for one MXFP4 MoE layer's experts (weights, e8m0 scales, biases).

    ``FusedMoE`` asks the quant method to round the sizes up (``maybe_roundup_sizes`` ->
    ``mxfp4_round_up_hidden_size_and_intermediate_size``, fused_moe/oracle/mxfp4.py @ v0.19.0):
    Marlin: intermediate to 128, hidden to 256 (same rule in quantization/mxfp4.py @ v0.10.1.1);
    FlashInfer TRT-LLM and ROCm: both to 256; FlashInfer CUTLASS: both to 128; Triton:
    intermediate to 64. Parameters: ``w13_weight`` (E, 2I, H/2) u8, ``w13_weight_scale``
    (E, 2I, H/32) u8, ``w2_weight`` (E, H, I/2), ``w2_weight_scale`` (E, H, I/32), biases bf16
    (E, 2I), (E, H).

    Triton on Hopper (``_swizzle_mxfp4``, quantization/utils/mxfp4_utils.py @ v0.19.0) then
    replaces the weights by swizzled copies (``HopperMXValueLayout.swizzle_data``: the (N, K/2)
    bytes padded to multiples of 16 x 32, and from v0.17 both first to multiples of 64 -- the
    "Pre-pad both matrix dims" step absent from v0.16.0's bundled triton_kernels), adds swizzled
    scales (``HopperMXScaleLayout``: N padded to 2*num_warps*2*8 = 256 with num_warps 8, K/32 to
    2) while the original ``w13_weight_scale`` / ``w2_weight_scale`` parameters stay registered,
    and casts both biases to float32 (``w13_bias.to(torch.float32)``). The other backends'
    shuffles keep the padded sizes."""
    assert s.moe is not None
    m = s.moe
    moe_tp = max(1, tp // max(1, ep))
    E = m.num_experts // max(1, ep)
    H = s.hidden_size
    I = -(-m.moe_intermediate_size // moe_tp)
    if backend == "marlin":
        I, H = _round_up(I, 128), _round_up(H, 256)
    elif backend in ("flashinfer_trtllm", "rocm"):
        I, H = _round_up(I, 256), _round_up(H, 256)
    elif backend == "flashinfer_cutlass":
        I, H = _round_up(I, 128), _round_up(H, 128)
    elif backend in ("triton_hopper", "triton_hopper_noprepad"):
        I = _round_up(I, 64)
    elif backend != "checkpoint":
        raise ValueError(f"unknown MXFP4 backend {backend!r}; one of {', '.join(MXFP4_BACKENDS)}")
    plain_scales = 2 * I * (H // 32) + H * (I // 32)
    if backend not in ("triton_hopper", "triton_hopper_noprepad"):
        return E * (2 * I * H // 2 + H * I // 2 + plain_scales + (2 * I + H) * 2)

    def value(n: int, kbytes: int) -> int:  # swizzled (N, K/2) u8 value tensor
        if backend == "triton_hopper":
            n, kbytes = _round_up(n, 64), _round_up(kbytes, 64)
        return _round_up(n, 16) * _round_up(kbytes, 32)

    def scale(n: int, kgroups: int) -> int:  # swizzled (N, K/32) u8 scale tensor
        return _round_up(n, 256) * _round_up(kgroups, 2)

    w = value(2 * I, H // 2) + value(H, I // 2)
    swizzled_scales = scale(2 * I, H // 32) + scale(H, I // 32)
    return E * (w + swizzled_scales + plain_scales + (2 * I + H) * 4)


def pp_layer_range(num_layers: int, pp_rank: int, pp: int) -> tuple[int, int]:
    """Layers [start, end) of one PP stage: ``get_pp_indices`` (sglang/vllm ``distributed/utils.py``):
    even split, the remainder going to the last stages (vLLM) — here: the first ``L % pp`` stages
    get one fewer [approximation shared by both engines' default partition]."""
    base, rem = divmod(num_layers, pp)
    sizes = [base + (1 if r >= pp - rem else 0) for r in range(pp)]
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


_ESTIMATES: dict[tuple, tuple[ModelSpec, WeightsEstimate]] = {}  # bounded: cleared past _ESTIMATES_MAX
_ESTIMATES_MAX = 512


def weights_per_rank(s: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, attn_tp: int | None = None,
                     include_mtp: bool = False, include_vision: bool = True, engine: str | None = None,
                     device: str = "cuda", mxfp4_backend: str | None = None,
                     vision_tp: bool = False) -> WeightsEstimate:
    """:func:`estimate_weights_per_rank`, remembered per model object and layout: a plan's fix checks,
    ``kvscope fit`` and ``kvscope sweep`` ask for the same layout again and again (the estimate is a
    pure function of the frozen spec and these arguments; the spec is held, so its id is not reused)."""
    key = (id(s), tp, pp, ep, attn_tp, include_mtp, include_vision, engine, device, mxfp4_backend, vision_tp)
    hit = _ESTIMATES.get(key)
    if hit is not None and hit[0] is s:
        return hit[1]
    est = estimate_weights_per_rank(s, tp=tp, pp=pp, ep=ep, attn_tp=attn_tp, include_mtp=include_mtp,
                                    include_vision=include_vision, engine=engine, device=device,
                                    mxfp4_backend=mxfp4_backend, vision_tp=vision_tp)
    if len(_ESTIMATES) >= _ESTIMATES_MAX:
        _ESTIMATES.clear()
    _ESTIMATES[key] = (s, est)
    return est


def estimate_weights_per_rank(s: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, attn_tp: int | None = None,
                              include_mtp: bool = False, include_vision: bool = True, engine: str | None = None,
                              device: str = "cuda", mxfp4_backend: str | None = None,
                              vision_tp: bool = False) -> WeightsEstimate:
    """Bytes each rank holds; the max over PP stages (every TP rank of a stage holds the same share).

    ``vision_tp``: the engine builds the vision tower's linears TP-sharded (Column/RowParallelLinear,
    e.g. vLLM's mllama4.py); otherwise the tower is counted whole on every rank of the first stage.

    ``engine`` ("vllm" | "sglang"): add what that engine allocates while loading beyond the
    checkpoint share (``extras``): the RoPE cache (both), SGLang's MLA ``w_kc``/``w_vc`` copies and
    its allocator rounding, vLLM's MXFP4 expert layout for ``mxfp4_backend`` (see
    ``engines/vllm/backend.py::mxfp4_moe_backend``; ``None`` keeps the checkpoint layout). ``device``: "cuda" | "rocm"."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, not {device!r}")
    attn_tp = attn_tp or tp
    groups = tensor_groups(s, include_mtp=include_mtp, include_vision=include_vision)
    total = sum(g.bytes for g in groups)
    stages = []
    stage_extras: list[tuple[tuple[str, int], ...]] = []
    for stage in range(pp):
        lo, hi = pp_layer_range(s.num_hidden_layers, stage, pp)
        share = 0
        expert_share: dict[int, int] = {}
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
            b = _shard_bytes(g, s, tp, attn_tp)
            if g.name == "vision" and vision_tp:
                b = -(-g.bytes // tp)
            share += b
            if g.name == "experts" and g.layer is not None:
                expert_share[g.layer] = expert_share.get(g.layer, 0) + b
        extras = _engine_extras(s, range(lo, hi), expert_share, tp=tp, ep=ep, attn_tp=attn_tp,
                                first=stage == 0, last=stage == pp - 1, engine=engine, device=device,
                                mxfp4_backend=mxfp4_backend) if engine else ()
        stages.append(share + sum(b for _, b in extras))
        stage_extras.append(extras)
    worst = max(range(pp), key=lambda r: stages[r])
    source = "estimated from config.json (parameter shapes x quantization)"
    if engine:
        source += f" + {engine} load-time allocations"
    return WeightsEstimate(total_bytes=total, per_rank_bytes=stages[worst], groups=groups, estimated=True,
                           source=source, per_stage_bytes=tuple(stages), extras=stage_extras[worst])


def _engine_extras(s: ModelSpec, layers: range, expert_share: dict[int, int], *, tp: int, ep: int, attn_tp: int,
                   first: bool, last: bool, engine: str, device: str,
                   mxfp4_backend: str | None) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    rope = rope_cache_bytes(s, engine, device)
    if rope:
        out.append(("rope_cos_sin_cache", rope))
    if engine == "sglang":
        mla = sum(sglang_mla_absorbed_bytes(s, attn_tp, device) for i in layers
                  if s.layer_types[i] in (FULL, SLIDING))
        if mla:
            out.append(("mla_w_kc_w_vc", mla))
        q = s.quant
        if (device == "rocm" and q.method == "compressed-tensors" and q.weight_bits < 8
                and _is_quantized(q, "experts")):
            idx = sum(sglang_wna16_moe_index_bytes(s, tp, ep) for i in layers if s.ffn_types[i] == "moe")
            if idx:
                out.append(("wna16_moe_g_idx_buffers", idx))
        if s.dsv4 is None:  # the same caching allocator on ROCm (hipMalloc)
            rounding = segment_rounding_bytes(sglang_rank_tensor_sizes(s, layers, tp, attn_tp, first, last))
            if rounding:
                out.append(("allocator_2mib_rounding", rounding))
    if engine == "vllm" and mxfp4_backend and s.quant.method == "mxfp4" and s.moe is not None:
        delta = sum(vllm_mxfp4_moe_layer_bytes(s, tp, mxfp4_backend, ep) - expert_share.get(i, 0)
                    for i in layers if s.ffn_types[i] == "moe")
        out.append((f"mxfp4_{mxfp4_backend}_layout", delta))
    return tuple(out)
