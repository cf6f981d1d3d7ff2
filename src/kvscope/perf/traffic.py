"""Bytes one GPU reads per forward: weights by kind (from ``model.weights``) and the KV cache.

Weights: every non-expert weight this rank holds is read once per forward (attention, dense MLP,
shared experts, router, norms, lm_head); routed experts only when some token in the forward was
routed to them. Embedding lookups read B rows (ignored); the vision tower and MTP layers are not
part of a text decode step. Sharding follows ``model.weights`` (SGLang/vLLM layer classes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..model.spec import FULL, LINEAR, MAMBA, SLIDING, ModelSpec
from ..model.weights import ATTN_TP, KV_HEADS, REPLICATED, TensorGroup, tensor_groups

_ATTN = ("attn", "indexer", "mamba")
_DENSE = ("mlp_dense", "shared_experts")
_OTHER = ("router", "norm", "lm_head")
_SKIP = ("embed", "vision", "mtp")


def rank_share(g: TensorGroup, spec: ModelSpec, tp: int, attn_tp: int) -> tuple[int, int]:
    """(bytes, numel) of one tensor group held by one rank (same rule as ``model.weights``)."""
    if g.shard == REPLICATED:
        return g.bytes, g.numel
    if g.shard == ATTN_TP:
        return -(-g.bytes // attn_tp), -(-g.numel // attn_tp)
    if g.shard == KV_HEADS:
        per_rank = max(1, spec.num_key_value_heads // attn_tp)
        return g.bytes * per_rank // spec.num_key_value_heads, g.numel * per_rank // spec.num_key_value_heads
    return -(-g.bytes // tp), -(-g.numel // tp)  # TP, VOCAB


@dataclass(frozen=True)
class WeightTraffic:
    """Weights one rank reads per forward, split so routed experts can scale with the batch."""

    attn_bytes: int  # attention projections (+ DSA indexer, linear-attention/mamba mixers)
    dense_mlp_bytes: int  # dense MLPs + shared experts
    other_bytes: int  # router gates, norms, lm_head
    expert_bytes_per_expert: int  # one routed expert of one MoE layer, this rank's shard
    num_moe_layers: int
    num_experts: int  # routed experts per MoE layer (0 for dense models)
    num_experts_per_tok: int
    dense_numel: int  # parameters of this rank used by every token (attention, dense MLP, shared, lm_head)
    expert_numel_per_expert: int  # one routed expert of one MoE layer, this rank's shard
    all_expert_bytes: int  # every routed expert this rank holds
    tp_shards: int = 1  # ranks one routed expert is split over (the TP size)
    estimated: bool = True
    source: str = "model.weights tensor groups (parameter shapes x quantization), sharded per rank"

    @property
    def always_read_bytes(self) -> int:
        return self.attn_bytes + self.dense_mlp_bytes + self.other_bytes

    def to_dict(self) -> dict:
        return asdict(self)


def weight_traffic(spec: ModelSpec, tp: int, attn_tp: int | None = None) -> WeightTraffic:
    attn_tp = attn_tp or tp
    by = {"attn": 0, "dense": 0, "other": 0, "experts": 0}
    dense_numel = expert_numel = 0
    moe_layers = set()
    for g in tensor_groups(spec, include_mtp=False, include_vision=False):
        if g.name in _SKIP:
            continue
        b, n = rank_share(g, spec, tp, attn_tp)
        if g.name == "experts":
            by["experts"] += b
            expert_numel += n
            moe_layers.add(g.layer)
            continue
        by["attn" if g.name in _ATTN else "dense" if g.name in _DENSE else "other"] += b
        dense_numel += n
    moe = spec.moe
    n_moe = len(moe_layers)
    per_expert = by["experts"] // (moe.num_experts * n_moe) if moe and n_moe else 0
    per_expert_numel = expert_numel // (moe.num_experts * n_moe) if moe and n_moe else 0
    return WeightTraffic(attn_bytes=by["attn"], dense_mlp_bytes=by["dense"], other_bytes=by["other"],
                         expert_bytes_per_expert=per_expert, num_moe_layers=n_moe,
                         num_experts=moe.num_experts if moe and n_moe else 0,
                         num_experts_per_tok=moe.num_experts_per_tok if moe and n_moe else 0,
                         dense_numel=dense_numel, expert_numel_per_expert=per_expert_numel,
                         all_expert_bytes=by["experts"], tp_shards=tp)


def expected_distinct_experts(num_experts: int, top_k: int, num_tokens: int) -> float:
    """Expected distinct routed experts touched in one MoE layer by ``num_tokens`` tokens,
    ``E * (1 - (1 - k/E)^B)`` [E: independent uniform routing; real routing is correlated, so fewer]
    (shared/specs/perf.md §3.1). Kimi K2.5 (384, top-8): 8.0, 15.8, 31.0, 59.5 for B = 1, 2, 4, 8."""
    if num_experts <= 0 or num_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def expert_read_bytes(w: WeightTraffic, num_tokens: int) -> int:
    """Routed-expert bytes this rank reads in one forward of ``num_tokens`` tokens (TP-sharded experts)."""
    e = expected_distinct_experts(w.num_experts, w.num_experts_per_tok, num_tokens)
    return int(round(w.num_moe_layers * e * w.expert_bytes_per_expert))


def expert_read_bytes_ep(w: WeightTraffic, num_tokens: int, ep: int = 1) -> int:
    """Routed-expert bytes the slowest rank reads in one forward.

    ``ep == 1``: experts TP-sharded, every rank reads its shard of each distinct expert (above).
    ``ep > 1``: each rank holds ``E/ep`` whole experts (SGLang ``--ep-size``, vLLM
    ``--enable-expert-parallel``; shards of the ``tp/ep`` remaining TP ways stay TP-split); a rank's count
    of touched experts is ~Binomial(E/ep, q) with ``q = 1-(1-k/E)^T``, and the step waits for the busiest
    rank: mean + sqrt(2 ln ep * var) [E: normal approximation of the maximum of ``ep`` draws; independent
    routing] (shared/specs/perf.md §3.1: at B=1 with 8 of 384 experts over 8 ranks the max is 2-3)."""
    if ep <= 1 or w.num_experts <= 0 or num_tokens <= 0:
        return expert_read_bytes(w, num_tokens)
    e, k = w.num_experts, w.num_experts_per_tok
    q = 1.0 - (1.0 - k / e) ** num_tokens
    n = e / ep
    mean, var = n * q, n * q * (1.0 - q)
    busiest = min(n, mean + math.sqrt(2.0 * math.log(ep) * var))
    whole_expert = w.expert_bytes_per_expert * w.tp_shards  # undo the TP split of one expert
    per_rank_expert = whole_expert * ep / max(1, w.tp_shards)  # tp/ep TP ways remain inside an EP group
    return int(round(w.num_moe_layers * busiest * per_rank_expert))


# --- KV cache ----------------------------------------------------------------------------------


def kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str = "auto") -> int:
    """``--kv-cache-dtype``: auto = the model dtype, or fp8 when the checkpoint declares an FP8 KV cache
    (sglang ``configure_kv_cache_dtype``)."""
    if kv_cache_dtype == "auto":
        return 1 if spec.quant.kv_cache_quant_algo == "FP8" else spec.dtype_bytes
    if kv_cache_dtype.startswith("fp8"):
        return 1
    if kv_cache_dtype in ("bf16", "bfloat16", "fp16", "float16", "half"):
        return 2
    if kv_cache_dtype in ("fp32", "float32"):
        return 4
    return spec.dtype_bytes


@dataclass(frozen=True)
class KVTraffic:
    """KV bytes one rank reads per decode step for one sequence at ``context_tokens``."""

    context_tokens: int
    bytes_per_seq: int
    full_layer_bytes_per_token: int  # per rank, summed over full-attention layers
    sliding_layer_bytes_per_token: int  # per rank, summed over sliding layers (read up to the window)
    state_bytes_per_seq: int  # linear-attention / mamba recurrent state per sequence, per rank
    replicated: bool  # MLA latent (or too few KV heads): every rank reads the whole KV
    dtype_bytes: int
    note: str
    estimated: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def kv_traffic(spec: ModelSpec, context_tokens: int, attn_tp: int, kv_cache_dtype: str = "auto") -> KVTraffic:
    """MLA: ``kv_lora_rank + qk_rope_head_dim`` per layer, replicated on every TP rank; GQA: K and V of
    this rank's KV heads (replicated below one head per rank); sliding layers read ``min(ctx, window)``
    tokens; DSA attends ``index_topk`` tokens but its indexer reads keys for the whole context
    (shared/specs/perf.md §3.1)."""
    e = kv_dtype_bytes(spec, kv_cache_dtype)
    notes = []
    if spec.is_mla:
        per_layer = spec.mla_kv_dim * e
        replicated = True
        notes.append("MLA latent replicated on every TP rank")
    else:
        heads = max(1, spec.num_key_value_heads // attn_tp)
        replicated = spec.num_key_value_heads < attn_tp
        per_layer = heads * (spec.head_dim + spec.v_head_dim) * e
        if replicated:
            notes.append(f"{spec.num_key_value_heads} KV heads < TP {attn_tp}: KV heads replicated")
    full = spec.layer_types.count(FULL) * per_layer
    sliding = spec.layer_types.count(SLIDING) * per_layer
    ctx_full = context_tokens
    extra = 0
    if spec.has_dsa_indexer and spec.index_topk:
        ctx_full = min(context_tokens, spec.index_topk)
        # indexer keys: index_head_dim fp8 + a float32 scale per token per layer [E]
        extra = spec.layer_types.count(FULL) * (spec.index_head_dim + 4) * context_tokens
        notes.append(f"DSA: attention reads top-{spec.index_topk} tokens, indexer keys the whole context")
    window = spec.sliding_window or context_tokens
    state = 0
    if spec.mamba is not None:
        m = spec.mamba
        layers = sum(1 for t in spec.layer_types if t in (LINEAR, MAMBA))
        conv = m.conv_dim * (m.conv_kernel - 1) * spec.dtype_bytes
        ssm = m.num_heads * m.head_dim * m.state_size * 4  # float32 SSM state [E]
        state = layers * (conv + ssm) // attn_tp
        notes.append("recurrent state read once per step (float32 SSM state assumed)")
    total = full * ctx_full + sliding * min(context_tokens, window) + extra + state
    return KVTraffic(context_tokens=context_tokens, bytes_per_seq=total, full_layer_bytes_per_token=full,
                     sliding_layer_bytes_per_token=sliding, state_bytes_per_seq=state, replicated=replicated,
                     dtype_bytes=e, note="; ".join(notes))


def attention_flops_per_token(spec: ModelSpec, context_tokens: int, attn_tp: int, absorbed: bool = True) -> int:
    """Score + value FLOPs of one query token against ``context_tokens`` on one rank [E]:
    MHA/GQA ``4 * ctx * heads * head_dim`` per layer. MLA decode runs absorbed (queries projected into the
    512-d latent: ``2 * ctx * heads * (kv_lora + rope) + 2 * ctx * heads * kv_lora``); MLA prefill runs as
    plain MHA over the up-projected K/V (``absorbed=False``: ``2 * ctx * heads * (nope + rope) + 2 * ctx *
    heads * v``), 3.4x fewer FLOPs per context token for DeepSeek/Kimi shapes (sglang/vllm MLA backends:
    absorbed ``forward_absorb`` for decode, ``forward_normal`` / MHA for prefill)."""
    heads = max(1, spec.num_attention_heads // attn_tp)
    if spec.is_mla and absorbed:
        per_ctx = 2 * heads * spec.mla_kv_dim + 2 * heads * (spec.kv_lora_rank or 0)
    else:
        per_ctx = 2 * heads * spec.head_dim + 2 * heads * spec.v_head_dim
    window = spec.sliding_window or context_tokens
    ctx_full = min(context_tokens, spec.index_topk) if spec.index_topk else context_tokens
    return (spec.layer_types.count(FULL) * per_ctx * ctx_full
            + spec.layer_types.count(SLIDING) * per_ctx * min(context_tokens, window))


def mla_prefix_expansion_flops(spec: ModelSpec, prefix_tokens: int, attn_tp: int) -> int:
    """Non-absorbed MLA prefill re-expands the cached latent of the prefix (``kv_b_proj``: kv_lora ->
    heads x (nope + v)) for every chunk: ``2 * kv_lora * heads * (nope + v)`` per prefix token per layer [E]."""
    if not spec.is_mla or prefix_tokens <= 0:
        return 0
    heads = max(1, spec.num_attention_heads // attn_tp)
    nope = spec.head_dim - (spec.qk_rope_head_dim or 0)
    per_tok = 2 * (spec.kv_lora_rank or 0) * heads * (nope + spec.v_head_dim)
    return spec.layer_types.count(FULL) * per_tok * prefix_tokens
