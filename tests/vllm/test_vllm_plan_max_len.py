"""plan_vllm takes max_model_len from the config the way each release derives it (max_len.derive_max_model_len,
conformance-tested against _get_and_verify_max_len): Phi-3.5-mini is a longrope model whose top-level
original_max_position_embeddings (4096) becomes the default from vLLM 0.19 (config/model.py @ v0.19.1)."""

from __future__ import annotations

import pytest

from kvscope.engines.vllm.args import VllmFlags
from kvscope.engines.vllm.plan import plan_vllm
from kvscope.errors import FlagError
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec


@pytest.mark.parametrize("version,expected", [("0.11.0", 131072), ("0.33.0", 4096)])
def test_longrope_default_max_model_len_per_release(version, expected):
    spec = load_spec("microsoft/Phi-3.5-mini-instruct")[0]
    t = plan_vllm(spec, get_gpu("h100"), VllmFlags(), version)
    assert t.extra.max_model_len == expected


def test_user_value_above_the_derived_length_is_refused_with_the_engine_text():
    spec = load_spec("meta-llama/Llama-3.1-8B-Instruct")[0]
    with pytest.raises(FlagError) as e:
        plan_vllm(spec, get_gpu("h100"), VllmFlags(max_model_len=200_000), "0.33.0")
    assert e.value.field == "--max-model-len" and "131072" in str(e.value)
