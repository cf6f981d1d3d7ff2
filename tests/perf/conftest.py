from __future__ import annotations

import pytest

from kvscope.catalog import load_model_source
from kvscope.model.spec import ModelSpec


def _spec(ref: str) -> ModelSpec:
    src = load_model_source(ref)
    return ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)


@pytest.fixture(scope="session")
def kimi() -> ModelSpec:
    return _spec("moonshotai/Kimi-K2.5")


@pytest.fixture()
def dense_spec() -> ModelSpec:
    return ModelSpec.from_hf_config({
        "model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 4096, "vocab_size": 1000,
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    }, "tiny-dense")


@pytest.fixture()
def moe_spec() -> ModelSpec:
    return ModelSpec.from_hf_config({
        "model_type": "qwen3_moe", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 1024, "moe_intermediate_size": 256,
        "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "vocab_size": 1000,
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    }, "tiny-moe")
