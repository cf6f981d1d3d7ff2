"""Exact step-time components for a small dense model and a small MoE (hand arithmetic below)."""
from __future__ import annotations

import pytest

from kvscope.hardware.gpus import get_gpu
from kvscope.perf.allreduce import fabric_for
from kvscope.perf.decode import Hardware, StepSettings, decode_step, forward_flops
from kvscope.perf.traffic import expected_distinct_experts, kv_traffic, weight_traffic

HW = Hardware("test", mem_bandwidth_gbps=1000.0, tflops=100.0, tflops_dtype="bf16", source="test")
SETTINGS = StepSettings(bandwidth_efficiency=0.5, flops_efficiency=0.5, fixed_overhead_s=1e-3,
                        communicator="nccl", allreduce_latency_us=10.0)


def test_dense_tp2_components(dense_spec):
    # hidden 1024, 2 layers, 8 heads x 128, 2 KV heads, intermediate 4096, vocab 1000, bf16, TP 2
    w = weight_traffic(dense_spec, tp=2)
    attn_layer = (1024 * 1024 * 2 // 2      # q_proj, split over 2 ranks
                  + 256 * 1024 * 2 // 2     # k_proj: 2 KV heads -> 1 per rank
                  + 256 * 1024 * 2 // 2     # v_proj
                  + 1024 * 1024 * 2 // 2)   # o_proj
    assert w.attn_bytes == 2 * attn_layer == 5_242_880
    assert w.dense_mlp_bytes == 2 * (3 * 4096 * 1024 * 2 // 2) == 25_165_824
    assert w.other_bytes == (2 * 2 * 1024 * 2      # input + post-attention norms, 2 layers
                             + 1024 * 2            # final norm
                             + 1000 * 1024 * 2 // 2)  # lm_head, vocab-parallel
    assert w.other_bytes == 1_034_240
    kv = kv_traffic(dense_spec, 1000, attn_tp=2)
    assert kv.bytes_per_seq == 1000 * 2 * 1 * (128 + 128) * 2 == 1_024_000  # ctx x layers x heads/rank x (K+V) x 2 B
    fabric = fabric_for(get_gpu("h100-sxm"), 2)
    d = decode_step(dense_spec, w, kv, HW, fabric, SETTINGS, batch=1)
    assert d.weight_bytes_per_gpu_per_step == 31_442_944
    assert d.kv_bytes_per_gpu_per_step == 1_024_000
    assert d.memory_time_s == pytest.approx(32_466_944 / 500e9)
    assert d.allreduce_count == 5  # 2 x 2 layers + 1
    assert d.allreduce.payload_bytes == 1024 * 2
    assert d.allreduce_time_s == pytest.approx(50e-6)
    assert d.step_time_s == pytest.approx(32_466_944 / 500e9 + 50e-6 + 1e-3)
    assert d.decode_tokens_per_s == pytest.approx(1 / d.step_time_s)
    # FLOPs: 2 x dense params on this rank + attention (4 heads x (2x128 + 2x128) x 1000 ctx x 2 layers)
    assert w.dense_numel == 2 * (1024 * 1024 // 2 * 2 + 256 * 1024 // 2 * 2) + 2 * 3 * 4096 * 1024 // 2 \
        + 2 * 2 * 1024 + 1024 + 1000 * 1024 // 2
    assert forward_flops(dense_spec, w, 1, 1000, 2) == 2 * w.dense_numel + 4 * 512 * 1000 * 2
    # batch 8: weights once, KV per sequence
    d8 = decode_step(dense_spec, w, kv, HW, fabric, SETTINGS, batch=8)
    assert d8.weight_bytes_per_gpu_per_step == 31_442_944
    assert d8.kv_bytes_per_gpu_per_step == 8 * 1_024_000
    assert d8.decode_tokens_per_s == pytest.approx(8 / d8.step_time_s)


def test_moe_expert_growth(moe_spec):
    # hidden 512, 2 MoE layers of 8 experts (top-2, width 256), 4 heads x 128, TP 1
    w = weight_traffic(moe_spec, tp=1)
    per_expert = 3 * 512 * 256 * 2  # gate, up, down x bf16
    assert w.expert_bytes_per_expert == per_expert == 786_432
    assert (w.num_moe_layers, w.num_experts, w.num_experts_per_tok) == (2, 8, 2)
    assert w.attn_bytes == 2 * 4 * 512 * 512 * 2 == 4_194_304
    # + q_norm/k_norm (head_dim 128 each, 2 layers): Qwen3Attention's per-head RMSNorms, counted by
    # model/weights.py since the weights-vs-logs pass (vllm/sglang models/qwen3_moe.py)
    assert w.other_bytes == (2 * 8 * 512 * 2 + 2 * 2 * 512 * 2 + 512 * 2 + 1000 * 512 * 2
                             + 2 * 2 * 128 * 2) == 1_046_528
    kv = kv_traffic(moe_spec, 0, attn_tp=1)
    d1 = decode_step(moe_spec, w, kv, HW, fabric_for(get_gpu("h100-sxm"), 1), SETTINGS, batch=1)
    assert d1.experts_touched_per_layer == 2.0  # 8 x (1 - (1 - 2/8)^1)
    assert d1.expert_weight_bytes == 2 * 2 * per_expert
    assert d1.allreduce_count == 0 and d1.allreduce_time_s == 0.0
    assert d1.step_time_s == pytest.approx((4_194_304 + 1_046_528 + 4 * per_expert) / 500e9 + 1e-3)
    d4 = decode_step(moe_spec, w, kv, HW, fabric_for(get_gpu("h100-sxm"), 1), SETTINGS, batch=4)
    assert d4.experts_touched_per_layer == 8 * (1 - 0.75 ** 4) == 5.46875
    assert d4.expert_weight_bytes == 8_601_600  # 2 layers x 5.46875 x 786,432


@pytest.mark.parametrize("tokens,expected", [(1, 8.0), (2, 15.8), (4, 31.0), (8, 59.5), (16, 109.8), (64, 284.2)])
def test_distinct_experts_kimi(tokens, expected):
    # shared/specs/perf.md §3.1: Kimi K2.5 (E=384, top-8)
    assert expected_distinct_experts(384, 8, tokens) == pytest.approx(expected, abs=0.05)


def test_kimi_bytes_per_gpu_match_spec(kimi):
    # shared/specs/perf.md §3.3: 3.16 GB attention, 1.49 GB experts, 6.17 GB total at 2,048 context
    w = weight_traffic(kimi, tp=8)
    kv = kv_traffic(kimi, 2048, attn_tp=8)
    assert kv.bytes_per_seq == 2048 * 61 * 576 * 2  # replicated MLA latent, bf16
    d = decode_step(kimi, w, kv, HW, fabric_for(get_gpu("rtx-pro-6000"), 8), SETTINGS, batch=1)
    assert d.attn_weight_bytes / 1e9 == pytest.approx(3.16, abs=0.005)
    assert d.expert_weight_bytes / 1e9 == pytest.approx(1.49, abs=0.005)
    assert d.bytes_per_gpu_per_step / 1e9 == pytest.approx(6.17, abs=0.01)


def test_gqa_kv_replicated_beyond_heads():
    from kvscope.model.spec import ModelSpec
    spec = ModelSpec.from_hf_config({"model_type": "qwen3", "hidden_size": 512, "num_hidden_layers": 1,
                                     "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
                                     "intermediate_size": 1024, "vocab_size": 100,
                                     "max_position_embeddings": 4096}, "t")
    kv = kv_traffic(spec, 100, attn_tp=8)
    assert kv.replicated and kv.bytes_per_seq == 100 * 1 * 1 * 128 * 2
