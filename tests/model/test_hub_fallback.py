"""When the hub fallback runs: never for bundled ids; for unbundled ids and for bundled entries without a
usable config only when switched on ([hub] extra installed, or KVSCOPE_HUB=1) and not offline; every
failure is one line."""

from __future__ import annotations

import sys
import types

import pytest

from kvscope.catalog import hub, list_models, load_model_source
from kvscope.errors import ConfigError

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
          "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
          "intermediate_size": 4096, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """hub._get replaced by a recorder that serves CONFIG for config.json and 404s everything else."""
    seen = []

    def fake_get(url, byte_range=None, limit=0):
        seen.append(url)
        if url.endswith("/config.json") and "/missing/" not in url:
            import json
            return json.dumps(CONFIG).encode(), {}
        raise hub.HubError(f"HTTP 404: {url.rsplit('/', 1)[-1]} not found (check the id and revision)")

    monkeypatch.setattr(hub, "_get", fake_get)
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("KVSCOPE_HUB", "1")
    for k in ("KVSCOPE_OFFLINE", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(k, raising=False)
    return seen


def test_unbundled_id_is_fetched_from_the_hub(calls):
    src = load_model_source("someorg/tiny-llama")
    assert src.config["num_hidden_layers"] == 2 and src.hf_quant_config is None
    assert src.meta["source"] == "huggingface hub: someorg/tiny-llama@main/config.json"
    assert calls[0] == "https://huggingface.co/someorg/tiny-llama/resolve/main/config.json"


def test_bundled_ids_never_touch_the_hub(calls):
    for m in ("Qwen/Qwen3-8B", "meta-llama/Llama-2-7b-hf"):
        load_model_source(m)
    assert calls == []


def test_metadata_only_entry_reads_the_hub_when_on(calls, monkeypatch):
    assert "google/gemma-3-4b-it" not in list_models()  # no bundled config: not listed as bundled
    src = load_model_source("google/gemma-3-4b-it")
    assert src.meta["hub"] == {"repo": "google/gemma-3-4b-it", "revision": "main"}
    monkeypatch.setenv("KVSCOPE_HUB", "0")
    with pytest.raises(ConfigError, match="no config.json for google/gemma-3-4b-it"):
        load_model_source("google/gemma-3-4b-it")


def test_incomplete_bundled_copy_is_refused_naming_the_field(calls, monkeypatch):
    """Kimi-K2-Thinking's only public copy lacks quantization_config: one line, never a bf16 number."""
    monkeypatch.setenv("KVSCOPE_HUB", "0")
    assert "moonshotai/Kimi-K2-Thinking" not in list_models()
    with pytest.raises(ConfigError) as e:
        load_model_source("moonshotai/Kimi-K2-Thinking")
    assert e.value.field == "quantization_config" and "\n" not in str(e.value)


def test_hub_failure_is_one_line(calls):
    with pytest.raises(ConfigError) as e:
        load_model_source("someorg/missing")
    assert e.value.field == "model" and "hub: HTTP 404" in str(e.value) and "\n" not in str(e.value)


def test_switches(monkeypatch):
    for k in ("KVSCOPE_HUB", "KVSCOPE_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace())
    assert hub.enabled()  # the [hub] extra switches it on
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not hub.enabled()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("KVSCOPE_HUB", "0")
    assert not hub.enabled()
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    monkeypatch.setenv("KVSCOPE_HUB", "1")
    assert hub.enabled()
    monkeypatch.delenv("KVSCOPE_HUB")
    assert not hub.enabled()
    assert hub.parse_ref("org/m@v1.2") == ("org/m", "v1.2") and hub.parse_ref("org/m") == ("org/m", "main")
