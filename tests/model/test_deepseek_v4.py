"""DeepSeek-V4 (model_type deepseek_v4) in ModelSpec and the weight model.

Published sizes of deepseek-ai/DeepSeek-V4-Flash: 284B total / 13B active parameters (model card,
https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash, as extracted in antirez/ds4 MODEL_CARD.md and
featherless.ai's model page). The Hub's "158B params" figure counts stored safetensors elements
(packed fp4 pairs as one I8, scales as elements), not parameters.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from kvscope.model.spec import FULL, SLIDING, ModelSpec
from kvscope.model.weights import tensor_groups, weights_per_rank

CONFIG = Path(__file__).resolve().parents[2] / "src/kvscope/catalog/data/deepseek-ai--DeepSeek-V4-Flash/config.json"


@pytest.fixture(scope="module")
def config() -> dict:
    return json.loads(CONFIG.read_text())


@pytest.fixture(scope="module")
def spec(config) -> ModelSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelSpec.from_hf_config(config, name="deepseek-ai/DeepSeek-V4-Flash")


def test_v4_fields(spec):
    v4 = spec.dsv4
    assert v4 is not None and spec.is_deepseek_v4
    assert len(v4.compress_ratios) == 43  # the 44th entry is the MTP layer
    assert (v4.num_swa_only_layers, v4.num_c4_layers, v4.num_c128_layers) == (2, 21, 20)
    assert v4.compress_ratios[:4] == (0, 0, 4, 128) and v4.compress_ratios[-1] == 4
    assert (v4.sliding_window, v4.head_dim, v4.qk_rope_head_dim, v4.q_lora_rank) == (128, 512, 64, 1024)
    assert (v4.o_groups, v4.o_lora_rank, v4.hc_mult, v4.num_hash_layers, v4.expert_dtype) == (8, 1024, 4, 3, "fp4")
    assert (v4.index_head_dim, v4.index_n_heads, v4.index_topk) == (128, 64, 512)
    assert v4.n_mtp_layers is None
    # every layer keeps a sliding-window ring; compressed layers read as full attention
    assert spec.layer_types.count(SLIDING) == 2 and spec.layer_types.count(FULL) == 41
    assert spec.sliding_window == 128
    # the C4-only indexer is not a V3.2-style DSA indexer on every layer
    assert not spec.has_dsa_indexer and not spec.is_mla
    assert spec.num_nextn_predict_layers == 1
    assert spec.moe is not None and (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (256, 6)


def test_upstream_layer_types_form(config):
    """transformers' DeepseekV4Config form: layer_types + compress_rates (get_compress_ratios,
    vllm/transformers_utils/deepseek_v4_utils.py @ v0.33.0)."""
    cfg = dict(config)
    ratios = cfg.pop("compress_ratios")[:43]
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    cfg["layer_types"] = [names[r] for r in ratios]
    cfg["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = ModelSpec.from_hf_config(cfg)
    assert s.dsv4 is not None and s.dsv4.compress_ratios == tuple(ratios)


def test_bad_ratio_rejected(config):
    from kvscope.errors import ConfigError
    cfg = dict(config, compress_ratios=[0, 0, 8] + config["compress_ratios"][3:])
    with pytest.raises(ConfigError):
        ModelSpec.from_hf_config(cfg)


def test_parameter_count_matches_model_card(spec):
    """284B total parameters (model card); kvscope: 284,334,567,511 without the MTP layer.
    Tolerance 0.5 %."""
    params = sum(g.numel for g in tensor_groups(spec))
    assert params == 284_334_567_511
    assert abs(params - 284e9) / 284e9 < 0.005
    with_mtp = sum(g.numel for g in tensor_groups(spec, include_mtp=True))
    assert with_mtp - params == 6_610_048_891


def _stored_elements(spec) -> int:
    """Elements as the Hub counts them: bytes for 1-byte types (fp8, packed fp4, e8m0 scales),
    numel for bf16 / fp32 / int64 tensors."""
    total = 0
    for g in tensor_groups(spec, include_mtp=True):
        if g.name in ("embed", "lm_head"):
            total += g.numel  # bf16
        elif g.bytes >= 2 * g.numel:  # bf16 / fp32 / int64 tensors (norms, mHC, hash tables, compressors)
            total += g.numel
        else:
            total += g.bytes  # fp8 / fp4 + 1-byte scales
    return total


def test_stored_size(spec):
    """159.6 GB stored with MTP: fp4 experts 0.5 B + 1/32 B scale per value, fp8 1 B + e8m0 per
    128 x 128. The Hub's safetensors.total for the checkpoint -- 158,069,433,298 stored elements,
    catalog meta.json ``param_count`` (llmfit's scrape of the Hugging Face API) -- is reproduced
    exactly, MTP layer, int64 hash tables and every scale tensor included."""
    w = weights_per_rank(spec, tp=1, include_mtp=True)
    assert w.total_bytes == 159_609_485_896
    assert _stored_elements(spec) == 158_069_433_298
    experts = sum(g.bytes for g in tensor_groups(spec) if g.name == "experts")
    assert experts == 43 * 256 * 3 * (2048 * 4096 // 2 + 2048 * 4096 // 32)


def test_per_rank_sharding(spec):
    """TP shards wq_b / wo_a / wo_b, the experts and the shared expert; the compressor, the indexer,
    routers, norms and mHC mixers are replicated."""
    w1 = weights_per_rank(spec, tp=1)
    w4 = weights_per_rank(spec, tp=4)
    replicated = sum(g.bytes for g in w1.groups if g.shard == "replicated")
    sharded = w1.total_bytes - replicated
    assert w4.per_rank_bytes == pytest.approx(replicated + sharded / 4, abs=64)
    assert w4.per_rank_bytes == 39_991_556_380  # 37.25 GiB per rank at TP4 (no MTP)
