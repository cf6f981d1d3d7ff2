"""Config layouts read as the engines' model code reads them (issue 13): ``moe_layer_freq`` as a per-layer
list (MiMo-V2-Flash, MiniMax-M3), Gemma 4's ``top_k_experts`` and MiniCPM3 (MLA projections; SGLang caches
the latent, vLLM a per-head K/V)."""

from __future__ import annotations

import warnings

import pytest

import kvscope
from kvscope.errors import ConfigError
from kvscope.model.spec import ModelSpec

BASE = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 128, "intermediate_size": 256, "max_position_embeddings": 2048, "torch_dtype": "bfloat16",
        "moe_intermediate_size": 32, "num_experts_per_tok": 2, "n_routed_experts": 8,
        "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash"}


def _spec(**over):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelSpec.from_hf_config({**BASE, **over}, "t")


def test_moe_layer_freq_list_marks_each_layer():
    # sglang models/mimo_v2.py @ 0.5.23: ``config.moe_layer_freq[layer_idx]`` truthy -> MoE (no step rule)
    assert _spec(moe_layer_freq=[0, 1, 1, 0]).ffn_types == ("dense", "moe", "moe", "dense")
    # minimax_m3: the list wins over first_k_dense_replace
    assert _spec(moe_layer_freq=[0, 0, 0, 1], first_k_dense_replace=1).ffn_types == ("dense",) * 3 + ("moe",)
    assert _spec(moe_layer_freq=2).ffn_types == ("dense", "moe", "dense", "moe")  # the integer step still works


@pytest.mark.parametrize("bad", [[0, 1, 1], [0, 1, 2, 1], [0, 1, "1", 1], [0, True, 1, 1]])
def test_bad_moe_layer_freq_list_is_one_line(bad):
    with pytest.raises(ConfigError, match="moe_layer_freq: expected an integer or a list of 4 entries") as e:
        _spec(moe_layer_freq=bad)
    assert e.value.field == "moe_layer_freq" and "\n" not in str(e.value)


def test_gemma4_top_k_experts():
    s = _spec(model_type="gemma4_text", num_experts=8, top_k_experts=3, n_routed_experts=None,
              num_experts_per_tok=None)
    assert (s.moe.num_experts, s.moe.num_experts_per_tok) == (8, 3)


def test_minicpm3_kv_cells_per_engine():
    """openbmb/MiniCPM3-4B: 62 layers, 40 heads, kv_lora_rank 256, qk_rope 32, qk_nope 64, bf16.
    SGLang (``AttentionArch.MLA``): (256 + 32) x 2 B per layer. vLLM (MHA, V padded to qk_head_dim 96):
    2 x 40 heads / tp x 96 x 2 B per layer."""
    spec = kvscope.plan("openbmb/MiniCPM3-4B", "h100-sxm", engine="sglang")
    assert spec.kv_cell_bytes == (256 + 32) * 2 * 62
    assert kvscope.plan("openbmb/MiniCPM3-4B", "h100-sxm", engine="vllm").kv_cell_bytes == 2 * 40 * 96 * 2 * 62
    t2 = kvscope.plan("openbmb/MiniCPM3-4B", "h100-sxm", engine="vllm", tensor_parallel_size=2)
    assert t2.kv_cell_bytes == 2 * 20 * 96 * 2 * 62


def test_minicpm3_v_head_dim_is_hidden_over_heads():
    from kvscope.model.load import load_spec

    s = load_spec("openbmb/MiniCPM3-4B")[0]
    assert (s.attention, s.head_dim, s.v_head_dim, s.kv_lora_rank) == ("mla", 96, 2560 // 40, 256)


@pytest.mark.parametrize("model_type,field,value", [
    ("gemma4_text", "global_head_dim", 512),
    ("mimo_v2_flash", "swa_num_key_value_heads", 8),
    ("minimax_m3", "sparse_attention_config", {"use_sparse_attention": True}),
])
def test_unmodelled_attention_is_refused_in_one_line(model_type, field, value):
    """These layouts size some layers unlike the first kind; a generic read would be a wrong number."""
    with pytest.raises(ConfigError, match=f"{model_type}: {field} is set") as e:
        _spec(model_type=model_type, **{field: value})
    assert e.value.field == field and "\n" not in str(e.value)

