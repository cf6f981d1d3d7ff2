"""Every bundled config parses; computed weights match checkpoint total_size where the catalog has one;
exact-integer spec facts for each family; bad configs give a one-line ConfigError naming the field."""

from __future__ import annotations

import json
import struct

import pytest

from kvscope.catalog import list_models, load_model_source
from kvscope.errors import CheckpointError, ConfigError
from kvscope.model.load import load_spec
from kvscope.model.safetensors import exact_weights_per_rank, read_header
from kvscope.model.spec import ModelSpec
from kvscope.model.weights import weights_per_rank

MODELS = list_models()


def test_catalog_has_every_shared_model_id():
    ids = {m.lower() for m in list_models(with_config_only=False)}
    for must in ("moonshotai/kimi-k2.5", "deepseek-ai/deepseek-v3", "qwen/qwen3-14b", "openai/gpt-oss-120b",
                 "meta-llama/llama-3.1-8b-instruct", "google/gemma-3-27b-it"):
        assert must in ids
    assert load_model_source("MOONSHOTAI/kimi-k2.5").name == "moonshotai/Kimi-K2.5"


@pytest.mark.parametrize("model", [m for m in MODELS if "partial" not in m])
def test_every_bundled_config_parses(model):
    src = load_model_source(model)
    if src.partial and not src.config.get("model_type"):
        with pytest.raises(ConfigError):
            load_spec(model)
        return
    spec, _ = load_spec(model)
    assert spec.num_hidden_layers == len(spec.layer_types) == len(spec.ffn_types)
    assert spec.num_kv_layers + spec.num_state_layers + spec.layer_types.count("none") == spec.num_hidden_layers
    w = weights_per_rank(spec, tp=1)
    assert w.total_bytes > 0 and w.estimated


@pytest.mark.parametrize("model", [m for m in MODELS if load_model_source(m).meta.get("total_size_bytes")])
def test_weights_match_checkpoint_total_size(model):
    src = load_model_source(model)
    spec, _ = load_spec(model)
    total = weights_per_rank(spec, include_mtp=True).total_bytes
    assert total == src.meta["total_size_bytes"]


def test_param_counts_match_hub_for_unquantized_models():
    """Parameter counts vs the hub's safetensors.total (meta param_count) for bf16 checkpoints."""
    checked = 0
    for model in MODELS:
        src = load_model_source(model)
        pc = src.meta.get("param_count")
        if not pc or src.meta.get("param_count_caveat") or src.partial or "eagle" in model.lower():
            continue
        spec, _ = load_spec(model)
        if spec.quant.is_quantized or spec.tie_word_embeddings:
            continue
        n = sum(g.numel for g in weights_per_rank(spec, include_mtp=True).groups)
        assert abs(n - pc) / pc < 0.025, model
        checked += 1
    assert checked >= 20


def test_spec_facts():
    k = load_spec("moonshotai/Kimi-K2.5")[0]
    assert (k.is_mla, k.mla_kv_dim, k.num_hidden_layers, k.is_multimodal) == (True, 576, 61, True)
    assert (k.quant.method, k.quant.weight_bits, k.quant.group_size, k.quant.experts_only) == ("compressed-tensors", 4, 32, True)
    assert (k.vision.sglang_num_layers, k.vision.sglang_hidden_size) == (27, 1152)
    g = load_spec("openai/gpt-oss-120b")[0]
    assert (g.num_full_attention_layers, g.num_sliding_layers, g.sliding_window) == (18, 18, 128)
    q = load_spec("Qwen/Qwen3-Next-80B-A3B-Thinking")[0]
    assert (q.num_full_attention_layers, q.num_state_layers, q.mamba.kind) == (12, 36, "gdn")
    n = load_spec("nvidia/Nemotron-H-56B-Base-8K")[0]
    assert (n.num_full_attention_layers, n.num_state_layers, n.mamba.kind) == (10, 54, "mamba2")
    l4 = load_spec("meta-llama/Llama-4-Scout-17B-16E-Instruct")[0]
    assert (l4.num_full_attention_layers, l4.num_sliding_layers, l4.sliding_window) == (12, 36, 8192)
    d = load_spec("deepseek-ai/DeepSeek-V3")[0]
    assert (d.ffn_types[:3], d.ffn_types[3], d.num_nextn_predict_layers) == (("dense",) * 3, "moe", 1)
    assert load_spec("deepseek-ai/DeepSeek-V3.2")[0].index_head_dim == 128


def test_kimi_int4_weights_per_rank_tp8():
    """~595 GB int4 checkpoint; ~71.7 GiB per rank at TP 8 (the origin case saw ~72.3 GiB used)."""
    spec, _ = load_spec("moonshotai/Kimi-K2.5")
    w = weights_per_rank(spec, tp=8)
    assert 590e9 < w.total_bytes < 600e9
    assert 70 * 2**30 < w.per_rank_bytes < 73 * 2**30


@pytest.mark.parametrize("cfg,field", [
    ({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}, "hidden_size"),
    ({"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 2, "num_attention_heads": 4}, "hidden_size"),
    ({"hidden_size": 64}, "model_type"),
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 6,
      "num_key_value_heads": 4, "vocab_size": 10}, "num_key_value_heads"),
])
def test_bad_config(cfg, field):
    with pytest.raises(ConfigError) as e:
        ModelSpec.from_hf_config(cfg)
    assert e.value.field == field and "\n" not in str(e.value)


def test_unknown_model_type_falls_back_with_warning():
    cfg = {"model_type": "brand_new", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100}
    with pytest.warns(UserWarning, match="generic decoder"):
        s = ModelSpec.from_hf_config(cfg)
    assert s.num_kv_layers == 2 and s.assumed


def _st(path, header: bytes, data: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_safetensors_exact_and_corrupt(tmp_path):
    h = json.dumps({"model.layers.0.self_attn.q_proj.weight": {"dtype": "BF16", "shape": [8, 4], "data_offsets": [0, 64]},
                    "model.norm.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [64, 72]},
                    "__metadata__": {"format": "pt"}}).encode()
    _st(tmp_path / "a.safetensors", h, b"\0" * 72)
    tensors = read_header(tmp_path / "a.safetensors")
    assert exact_weights_per_rank(tensors, tp=2) == (72, 32 + 8)
    _st(tmp_path / "b.safetensors", b"{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        read_header(tmp_path / "b.safetensors")
    (tmp_path / "c.safetensors").write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(CheckpointError, match="header length"):
        read_header(tmp_path / "c.safetensors")
    _st(tmp_path / "d.safetensors", h, b"\0" * 10)  # truncated data
    with pytest.raises(CheckpointError, match="past the end"):
        read_header(tmp_path / "d.safetensors")


def test_metadata_only_model_names_the_related_bundled_config():
    from kvscope.catalog import load_model_source
    from kvscope.errors import ConfigError
    with pytest.raises(ConfigError) as e:
        load_model_source("Qwen/Qwen2.5-32B-Instruct")
    assert e.value.field == "config.json" and "Qwen/Qwen2.5-32B " in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_model_source("google/gemma-3-27b-it")  # no related config: no suggestion invented
    assert "related" not in str(e.value)


def test_assumed_notes_keep_the_step_order():
    """spec_from_hf_config joins each step's notes in step order: model_type, kv heads, MLP, length."""
    cfg = {"model_type": "brand_new", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100}
    with pytest.warns(UserWarning) as record:
        s = ModelSpec.from_hf_config(cfg)
    assert [n.split(" ", 1)[0] for n in s.assumed] == [
        "unknown", "num_key_value_heads", "intermediate_size", "max_position_embeddings"]
    assert [str(w.message) for w in record] == [f"kvscope: brand_new: {n}" for n in s.assumed]
    assert (s.num_key_value_heads, s.intermediate_size, s.max_position_embeddings) == (4, 256, 4096)


def test_mla_and_dsa_indexer_steps():
    cfg = {"model_type": "deepseek_v32", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 4, "vocab_size": 100, "intermediate_size": 128, "max_position_embeddings": 64,
           "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
           "q_lora_rank": 24, "index_head_dim": 8, "index_n_heads": 2, "index_topk": 16}
    s = ModelSpec.from_hf_config(cfg)
    assert (s.attention, s.num_key_value_heads, s.head_dim, s.v_head_dim, s.mla_kv_dim) == ("mla", 1, 24, 16, 40)
    assert (s.q_lora_rank, s.index_head_dim, s.index_n_heads, s.index_topk) == (24, 8, 2, 16)
    assert ModelSpec.from_hf_config({**cfg, "q_lora_rank": None, "index_topk": 0}).q_lora_rank is None
    assert not ModelSpec.from_hf_config({**cfg, "index_head_dim": None}).has_dsa_indexer
