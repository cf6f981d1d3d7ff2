"""``--quantization`` / ``--dtype`` under each engine's names and rules (model/quant.py).

Hand arithmetic for Llama-3.1-8B (32 layers, hidden 4096, 8 KV heads of 128, MLP 14336, vocab 128256):
per layer, attention q/k/v/o = 4096x4096 + 2 x 1024x4096 + 4096x4096 = 41,943,040 weights (10,240 output
rows) and MLP gate/up/down = 3 x 14336x4096 = 176,160,768 weights (32,768 rows); embed_tokens and lm_head
are 128256 x 4096 x 2 B = 1,050,673,152 B each and the norms (65 x 4096) x 2 B = 532,480 B stay bf16.
"""

from __future__ import annotations

import dataclasses

import pytest

import kvscope
from kvscope.errors import FlagError
from kvscope.model.load import apply_serving_flags, load_spec
from kvscope.model.quant import ENGINE_QUANTIZATION, quantization_for_flag
from kvscope.model.weights import weights_per_rank

LAYERS, ATTN, ATTN_ROWS, MLP, MLP_ROWS = 32, 41_943_040, 10_240, 176_160_768, 32_768
BF16_REST = 2 * 1_050_673_152 + 532_480


@pytest.fixture(scope="module")
def llama():
    return load_spec("meta-llama/Llama-3.1-8B-Instruct")


def _total(spec, src, engine, version, q=None, dtype=None):
    return weights_per_rank(apply_serving_flags(spec, src, engine, version, q, dtype)[0]).total_bytes


def test_bf16_baseline(llama):
    assert _total(*llama, "sglang", None) == LAYERS * 2 * (ATTN + MLP) + BF16_REST == 16_060_522_496


def test_sglang_online_fp8_is_per_channel(llama):
    """SGLang Fp8LinearMethod (not fp8-serialized): fp8 weights + one float32 scale per output row."""
    want = LAYERS * (ATTN + 4 * ATTN_ROWS + MLP + 4 * MLP_ROWS) + BF16_REST
    assert _total(*llama, "sglang", None, "fp8") == want == 9_086_705_664


def test_vllm_online_fp8_per_tensor_and_per_block(llama):
    """vLLM: one float32 scale per linear (7 per layer); fp8_per_block: one per 128x128 block."""
    assert _total(*llama, "vllm", "0.33.0", "fp8_per_tensor") == LAYERS * (ATTN + MLP + 7 * 4) + BF16_REST
    assert _total(*llama, "vllm", "0.20.2", "fp8") == LAYERS * (ATTN + MLP + 7 * 4) + BF16_REST
    blocks = (32 * 32 + 8 * 32 + 8 * 32 + 32 * 32) + (112 * 32 * 2 + 32 * 112)  # per layer, ceil(rows/128) x ceil(cols/128)
    assert _total(*llama, "vllm", "0.33.0", "fp8_per_block") == LAYERS * (ATTN + MLP + 4 * blocks) + BF16_REST


def test_online_fp8_raises_kv_tokens_on_h100():
    """The issue's -10 %: planned as bf16, an online-fp8 start has ~13 % more KV tokens."""
    bf16 = kvscope.plan("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm")
    fp8 = kvscope.plan("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", quantization="fp8")
    assert fp8.weights_bytes < bf16.weights_bytes and fp8.kv_cache_tokens > bf16.kv_cache_tokens
    assert bf16.kv_cache_tokens / fp8.kv_cache_tokens < 0.90


def test_vllm_033_refuses_plain_fp8_online(llama):
    with pytest.raises(FlagError, match="fp8_per_tensor"):
        apply_serving_flags(*llama, "vllm", "0.33.0", "fp8", None)


def test_quantized_checkpoint_needs_its_own_method():
    spec, _ = load_spec("Qwen/Qwen3-32B-FP8")
    assert quantization_for_flag(spec.quant, "fp8", "sglang") is spec.quant
    with pytest.raises(FlagError) as e:
        quantization_for_flag(spec.quant, "awq", "vllm", "0.33.0")
    assert e.value.field == "--quantization" and "fp8" in str(e.value)
    gpt, _ = load_spec("openai/gpt-oss-20b")
    assert quantization_for_flag(gpt.quant, "mxfp4", "vllm", "0.33.0") is gpt.quant


@pytest.mark.parametrize("flag", ["awq", "gptq", "compressed-tensors", "modelopt_fp4", "mxfp4"])
def test_checkpoint_methods_refuse_a_bf16_checkpoint(llama, flag):
    with pytest.raises(FlagError, match="needs a checkpoint quantized"):
        apply_serving_flags(*llama, "sglang", None, flag, None)


def test_unknown_names_list_the_engine_choices(llama):
    with pytest.raises(FlagError) as e:
        apply_serving_flags(*llama, "vllm", "0.33.0", "bitsandbytes", None)  # not a vLLM 0.33 method
    assert "fp8_per_tensor" in str(e.value)
    assert "bitsandbytes" in ENGINE_QUANTIZATION["sglang"]
    with pytest.raises(FlagError, match="--dtype"):
        apply_serving_flags(*llama, "sglang", None, None, "fp64")


def test_dtype_float32_doubles_weights_and_kv(llama):
    spec, src = llama
    f32, _ = apply_serving_flags(spec, src, "sglang", None, None, "float")
    assert f32.dtype == "float32" and weights_per_rank(f32).total_bytes == 2 * 16_060_522_496
    t16 = kvscope.plan("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm")
    t32 = kvscope.plan("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", dtype="float32")
    assert t32.kv_cell_bytes == 2 * t16.kv_cell_bytes == 2 * (2 * 8 * 128 * 2 * 32)
    assert apply_serving_flags(spec, src, "sglang", None, None, "auto")[0] is spec


def test_online_quant_drops_exact_header_weights(llama, tmp_path):
    spec, src = llama
    src = dataclasses.replace(src, checkpoint_dir=tmp_path)
    _, out = apply_serving_flags(spec, src, "sglang", None, "fp8", None)
    assert out.checkpoint_dir is None
