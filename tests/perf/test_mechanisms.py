"""Mechanisms read from the engines' released code: MiniMax-M2's TP q/k-norm all-reduces (sglang 0.5.10 /
vllm 0.12.0 ``models/minimax_m2.py``) and vLLM TRITON_MLA's fixed split-KV grid (vllm 0.12.0
``v1/attention/backends/mla/triton_mla.py``, ``platforms/cuda.py``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kvscope.catalog import load_model_source
from kvscope.hardware.gpus import get_gpu
from kvscope.model.spec import ModelSpec
from kvscope.perf.allreduce import allreduce, fabric_for, norm_allreduce_count
from kvscope.perf.attention import split_kv_ctas
from kvscope.perf.decode import Hardware, StepSettings, decode_step
from kvscope.perf.params import params_for
from kvscope.perf.traffic import kv_traffic, weight_traffic


def _spec(ref: str) -> ModelSpec:
    src = load_model_source(ref)
    return ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)


@pytest.fixture(scope="module")
def minimax() -> ModelSpec:
    return _spec("MiniMaxAI/MiniMax-M2.5")  # 62 layers, use_qk_norm, qk_norm_type per_layer


def test_minimax_qk_norm_allreduces_per_engine(minimax):
    assert minimax.model_type == "minimax_m2" and minimax.num_hidden_layers == 62
    assert norm_allreduce_count("minimax_m2", 62, 2, "sglang") == 62    # q and k fused: forward_qk
    assert norm_allreduce_count("minimax_m2", 62, 2, "vllm") == 124     # q_norm, k_norm: one each
    assert norm_allreduce_count("minimax_m2", 62, 1, "sglang") == 0     # no TP, no all-reduce
    assert norm_allreduce_count("qwen3_moe", 48, 8, "vllm") == 0


def test_minimax_step_pays_the_norm_allreduces(minimax):
    gpu = get_gpu("h100-sxm")
    fabric = fabric_for(gpu, 2)
    w = weight_traffic(minimax, 2)
    kv = kv_traffic(minimax, 2048, 2)
    hw = Hardware("h100-sxm", gpu.mem_bandwidth_gbps, gpu.bf16_tflops, "bf16", "test", sm=gpu.sm)
    base = StepSettings(params=params_for("nvidia-hbm", "sglang"), engine="sglang")
    sg = decode_step(minimax, w, kv, hw, fabric, base, batch=4)
    vl = decode_step(minimax, w, kv, hw, fabric, replace(base, engine="vllm"), batch=4)
    norm_us = allreduce(fabric, 4 * 4, "nccl").latency_us  # 4 B (fp32 sum of squares) x 4 tokens
    assert (sg.norm_allreduce_count, vl.norm_allreduce_count) == (62, 124)
    assert sg.allreduce_time_s == pytest.approx((125 * sg.allreduce.latency_us + 62 * norm_us) * 1e-6)
    assert vl.step_time_s - sg.step_time_s == pytest.approx(62 * norm_us * 1e-6)


def test_triton_mla_grid(kimi):
    # Kimi K2.5: 64 heads, TP 8 -> 8 heads per rank -> one head block (BLOCK_H 16 >= 8) x 4 KV splits
    assert kimi.is_mla and kimi.num_attention_heads == 64
    assert split_kv_ctas(kimi, "sm120", "vllm", 1, 8) == 4
    assert split_kv_ctas(kimi, "sm80", "vllm", 16, 8) == 64
    assert split_kv_ctas(kimi, "sm120", "vllm", 1, 2) == 8     # 32 heads per rank: 2 blocks of 16
    assert split_kv_ctas(kimi, "sm90", "vllm", 1, 8) is None    # FlashMLA / FA-MLA on Hopper
    assert split_kv_ctas(kimi, "sm100", "vllm", 1, 8) is None   # CUTLASS MLA on Blackwell
    assert split_kv_ctas(kimi, "sm120", "sglang", 1, 8) is None


def test_long_context_mla_decode_is_grid_bound(kimi):
    gpu = get_gpu("rtx-pro-6000")
    fabric = fabric_for(gpu, 8)
    w = weight_traffic(kimi, 8)
    kv = kv_traffic(kimi, 150_000, 8)
    hw = Hardware(gpu.key, gpu.mem_bandwidth_gbps, gpu.bf16_tflops, "bf16", "test", sm=gpu.sm)
    p = params_for("nvidia-gddr", "vllm")
    step = decode_step(kimi, w, kv, hw, fabric, StepSettings(params=p, engine="vllm"), batch=1)
    hopper_path = decode_step(kimi, w, kv, replace(hw, sm="sm90"), fabric,
                              StepSettings(params=p, engine="vllm"), batch=1)
    bw = p.bandwidth_efficiency * gpu.mem_bandwidth_gbps * 1e9
    grid = 4 * p.split_kv_cta_gbps * 1e9
    assert grid < bw
    assert step.memory_time_s - hopper_path.memory_time_s == pytest.approx(
        kv.bytes_per_seq / grid - kv.bytes_per_seq / bw)
    assert step.memory_time_s > 5 * hopper_path.memory_time_s  # 150K latent cache read by 4 CTAs


def test_a100_has_its_own_moe_floor():
    from kvscope.perf.params import AMPERE_MOE_LAYER_FLOOR_US, LAYER_FLOOR_US
    a100, h100 = params_for("nvidia-ampere", "vllm"), params_for("nvidia-hbm", "vllm")
    assert a100.moe_layer_floor_us == AMPERE_MOE_LAYER_FLOOR_US.value
    assert h100.moe_layer_floor_us == LAYER_FLOOR_US["nvidia"]["moe"].value
    assert a100.dense_layer_floor_us == h100.dense_layer_floor_us
    assert params_for("nvidia-ampere", "vllm", "hi").moe_layer_floor_us == AMPERE_MOE_LAYER_FLOOR_US.hi
