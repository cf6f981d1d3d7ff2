"""Catalog entries added in the Nov 2026 catalog pass: provenance, geometry and parameter counts.

Numbers below are worked out by hand from each bundled config.json (layer count, KV heads, head_dim) and
must match what kvscope parses; KV bytes/token is SGLang's per-rank cell at TP 1 with a bf16 KV cache:
2 (K and V) x KV heads x head_dim x 2 B x attention layers. Parameter counts are compared with the
Hugging Face API ``safetensors.total`` as scraped by llmfit
(AlexsJones/llmfit:llmfit-core/data/hf_models.json@a3e0eb27c57fe05298292f4c61699b9aed2824ea, ``parameters_raw``),
which each entry's meta.json records as ``param_count``.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from packaging.version import Version

from kvscope.catalog import DATA_DIR, list_models, load_model_source
from kvscope.engines.sglang.kv_cache import cell_size
from kvscope.engines.sglang.release import release
from kvscope.model.load import load_spec
from kvscope.model.weights import weights_per_rank

ADDED = {
    # hf id: (layers, kv heads, head_dim, full-attention layers, sliding layers, bf16 KV bytes/token at TP 1)
    # Llama-3.3-70B: 2 (K,V) x 8 heads x 128 x 2 B x 80 layers
    "meta-llama/Llama-3.3-70B-Instruct": (80, 8, 128, 80, 0, 327_680),
    # Mistral NeMo: explicit head_dim 128 (hidden 5120 / 32 heads would be 160): 2 x 8 x 128 x 2 x 40
    "mistralai/Mistral-Nemo-Instruct-2407": (40, 8, 128, 40, 0, 163_840),
    "Qwen/Qwen3-VL-2B-Instruct": (28, 8, 128, 28, 0, 114_688),
    "Qwen/Qwen3-VL-4B-Instruct": (36, 8, 128, 36, 0, 147_456),
    "Qwen/Qwen3-VL-32B-Instruct": (64, 8, 128, 64, 0, 262_144),
    # MoE text decoders: 4 KV heads
    "Qwen/Qwen3-VL-30B-A3B-Instruct": (48, 4, 128, 48, 0, 98_304),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": (94, 4, 128, 94, 0, 192_512),
    # Phi-3.5-mini is MHA: 32 KV heads of 3072/32 = 96
    "microsoft/Phi-3.5-mini-instruct": (32, 32, 96, 32, 0, 393_216),
    # Llama 4 Scout: every 4th layer global (NoPE), the rest chunked-local attention (8192-token chunks)
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": (48, 8, 128, 12, 36, 196_608),
}

NEW_DIRS = [
    "meta-llama--Llama-3.3-70B-Instruct", "mistralai--Mistral-Nemo-Instruct-2407", "Qwen--Qwen3-VL-2B-Instruct",
    "Qwen--Qwen3-VL-4B-Instruct", "Qwen--Qwen3-VL-32B-Instruct", "Qwen--Qwen3-VL-30B-A3B-Instruct",
    "Qwen--Qwen3-VL-235B-A22B-Instruct", "microsoft--Phi-3.5-mini-instruct",
    "RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "deepseek-ai--DeepSeek-V4-Flash",
]


@pytest.mark.parametrize("d", NEW_DIRS)
def test_added_files_match_their_recorded_source(d):
    """meta.json names a repository, path and full commit, and the stored bytes are the ones hashed."""
    src = load_model_source(d.replace("--", "/", 1))
    meta = src.meta
    assert re.fullmatch(r"[\w.-]+/[\w.-]+:[^@\s]+@[0-9a-f]{40}( \(.*\))?", meta["source"]), meta["source"]
    data = (DATA_DIR / d / meta["config_file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == meta["sha256"]
    assert len(data) == meta["bytes"]
    assert src.partial == (meta["config_file"] == "config.partial.json")


def test_added_models_are_listed():
    ids = {m.lower() for m in list_models()}
    for hf in list(ADDED) + ["deepseek-ai/DeepSeek-V4-Flash"]:
        assert hf.lower() in ids


@pytest.mark.parametrize("hf", sorted(ADDED))
def test_geometry_and_kv_bytes_per_token(hf):
    layers, kv_heads, head_dim, n_full, n_sliding, cell_bytes = ADDED[hf]
    spec, _ = load_spec(hf)
    assert spec.num_hidden_layers == layers
    assert spec.num_key_value_heads == kv_heads
    assert (spec.head_dim, spec.v_head_dim) == (head_dim, head_dim)
    assert (spec.num_full_attention_layers, spec.num_sliding_layers) == (n_full, n_sliding)
    assert spec.dtype == "bfloat16"
    assert 2 * kv_heads * head_dim * 2 * layers == cell_bytes  # the hand formula
    assert cell_size(spec, release("0.5.23"), attn_tp=1, kv_bytes=2).cell_bytes == cell_bytes


def test_sliding_window_and_context_facts():
    scout, _ = load_spec("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
    assert scout.sliding_window == 8192 and scout.max_position_embeddings == 10_485_760
    assert scout.full_attention_layer_ids == tuple(range(3, 48, 4))
    assert load_spec("mistralai/Mistral-Nemo-Instruct-2407")[0].max_position_embeddings == 131_072
    assert load_spec("Qwen/Qwen3-VL-2B-Instruct")[0].max_position_embeddings == 262_144
    assert load_spec("microsoft/Phi-3.5-mini-instruct")[0].max_position_embeddings == 131_072


def test_moe_facts():
    a3b, _ = load_spec("Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert (a3b.moe.num_experts, a3b.moe.num_experts_per_tok, a3b.moe.moe_intermediate_size) == (128, 8, 768)
    big, _ = load_spec("Qwen/Qwen3-VL-235B-A22B-Instruct")
    assert (big.moe.num_experts, big.moe.num_experts_per_tok, big.moe.moe_intermediate_size) == (128, 8, 1536)
    assert big.ffn_types == ("moe",) * 94


def test_quantization_is_read():
    scout, _ = load_spec("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
    assert scout.quant.method == "compressed-tensors" and scout.quant.is_quantized


# Parameter counts: kvscope's estimate (sum of parameter shapes) vs the hub's safetensors.total.
# Tolerances are stated per model. Text-only bf16 models must agree to 0.01 %. For Qwen3-VL the shortfall
# is the vision tower's patch merger + DeepStack mergers, position embedding, vision biases/LayerNorms and the
# text q_norm/k_norm weights, which kvscope's estimate does not model (2B: 104,974,336 params short = 4.9 %;
# larger models dilute it).
PARAMS = {
    "meta-llama/Llama-3.3-70B-Instruct": (70_553_706_496, 0.0001),
    "mistralai/Mistral-Nemo-Instruct-2407": (12_247_076_864, 0.0001),
    "microsoft/Phi-3.5-mini-instruct": (3_821_079_552, 0.0001),
    "Qwen/Qwen3-VL-2B-Instruct": (2_127_532_032, 0.05),
    "Qwen/Qwen3-VL-4B-Instruct": (4_437_815_808, 0.03),
    "Qwen/Qwen3-VL-32B-Instruct": (33_357_390_064, 0.01),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": (235_670_022_896, 0.002),
}


@pytest.mark.parametrize("hf", sorted(PARAMS))
def test_parameter_count_vs_hub(hf):
    published, tol = PARAMS[hf]
    spec, src = load_spec(hf)
    assert src.meta["param_count"] == published  # the figure recorded next to the config
    n = sum(g.numel for g in weights_per_rank(spec, include_mtp=True).groups)
    assert abs(n - published) / published < tol, (hf, n, published)
    if not spec.quant.is_quantized:
        assert weights_per_rank(spec).total_bytes == 2 * n  # bf16 checkpoints: 2 B per parameter


def test_llama33_weights_per_rank_tp4():
    """70,553,706,496 bf16 params = 141,107,412,992 B; TP 4 shards all but the (tiny) norms."""
    spec, _ = load_spec("meta-llama/Llama-3.3-70B-Instruct")
    w = weights_per_rank(spec, tp=4)
    assert w.total_bytes == 141_107_412_992
    assert 141_107_412_992 // 4 <= w.per_rank_bytes < 141_107_412_992 // 4 + 2_000_000


def test_deepseek_v4_flash_is_modelled():
    """DeepSeek-V4's compressed sparse attention (compress_ratios, 512-wide single latent, SWA ring) and FP4
    experts are modelled since ModelSpec.dsv4 (engines/{vllm,sglang}/deepseek_v4.py; tests/model/test_deepseek_v4.py):
    the config is no longer read as a generic decoder."""
    spec, src = load_spec("deepseek-ai/DeepSeek-V4-Flash")
    assert src.config["model_type"] == "deepseek_v4" and len(src.config["compress_ratios"]) == 44
    assert (spec.num_hidden_layers, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim) == (43, 64, 1, 512)
    assert spec.dsv4 is not None and len(spec.dsv4.compress_ratios) == 43
    assert not spec.assumed
