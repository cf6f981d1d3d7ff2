"""The optional hub fallback: used only for ids the catalog lacks, only with huggingface_hub installed and
not offline; every failure is the same one-line ConfigError as offline."""

from __future__ import annotations

import json
import sys
import types

import pytest

from kvscope.catalog import load_model_source
from kvscope.errors import ConfigError

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
          "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
          "intermediate_size": 4096, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    calls = []

    def hf_hub_download(repo_id, filename, **kw):
        calls.append((repo_id, filename))
        if repo_id == "someorg/missing" or filename != "config.json":
            raise FileNotFoundError(f"404 {repo_id}/{filename}")
        p = tmp_path / filename
        p.write_text(json.dumps(CONFIG))
        return str(p)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=hf_hub_download))
    monkeypatch.delenv("KVSCOPE_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return calls


def test_unbundled_id_is_fetched_from_the_hub(fake_hub):
    src = load_model_source("someorg/tiny-llama")
    assert src.config["num_hidden_layers"] == 2 and src.hf_quant_config is None
    assert src.meta["source"].startswith("huggingface hub")
    assert ("someorg/tiny-llama", "config.json") in fake_hub


def test_bundled_ids_never_touch_the_hub(fake_hub):
    load_model_source("Qwen/Qwen3-8B")
    assert fake_hub == []


def test_hub_failure_and_offline_are_the_same_one_line_error(fake_hub, monkeypatch):
    with pytest.raises(ConfigError) as e:
        load_model_source("someorg/missing")
    assert e.value.field == "model" and "hub: FileNotFoundError" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("KVSCOPE_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        load_model_source("someorg/tiny-llama")
    assert "hub access off" in str(e.value)
