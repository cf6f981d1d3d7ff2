"""SGLang's derived context length (hf_transformers_utils.py::get_context_length, unchanged from
v0.4.6.post5 to v0.5.23): first of CONTEXT_LENGTH_KEYS x rope factor, factor 1 for llama3 and for
rope dicts that carry original_max_position_embeddings."""

from __future__ import annotations

import pytest

from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.plan import plan_sglang
from kvscope.errors import FlagError
from kvscope.hardware.gpus import get_gpu
from kvscope.model.spec import ModelSpec, sglang_context_length


@pytest.mark.parametrize("text,expected", [
    ({"max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}, 1048576),  # gemma-3
    ({"max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0, "rope_type": "llama3",
                                                          "original_max_position_embeddings": 8192}}, 131072),
    ({"max_position_embeddings": 163840, "rope_scaling": {"type": "yarn", "factor": 40,
                                                          "original_max_position_embeddings": 4096}}, 163840),
    ({"max_position_embeddings": 32768, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, 65536),
    ({"max_position_embeddings": 8192, "seq_length": 32768}, 32768),  # seq_length comes first
    ({"max_position_embeddings": 40960, "rope_scaling": None}, 40960),
])
def test_sglang_context_length(text, expected):
    assert sglang_context_length(text, 4096) == expected


def _llama(rope):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
           "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
           "intermediate_size": 8192, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
           "rope_scaling": rope}
    return ModelSpec.from_hf_config(cfg, "tiny")


def test_plan_uses_the_derived_context_for_the_limit_and_the_request_pool():
    gpu = get_gpu("h100")
    scaled = _llama({"type": "linear", "factor": 4.0})
    assert scaled.sglang_context_len == 16384
    t = plan_sglang(scaled, gpu, SGLangArgs(), "0.5.9")
    assert t.extra.context_len == 16384
    plan_sglang(scaled, gpu, SGLangArgs(context_length=16384), "0.5.9")  # allowed: not above the derived
    with pytest.raises(FlagError):
        plan_sglang(_llama(None), gpu, SGLangArgs(context_length=16384), "0.5.9")
