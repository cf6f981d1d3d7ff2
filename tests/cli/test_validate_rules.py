"""The validation layer's tables (src/kvscope/validate.py): wide enough for every real checkpoint,
narrow enough to refuse what no engine loads, and one line naming the field, the value and the range."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from kvscope.errors import ConfigError, FlagError
from kvscope.model.spec import ModelSpec
from kvscope.validate import (CONFIG_RULES, MAX_HIDDEN, MAX_LAYERS, SGLANG_FLAG_RULES, VLLM_FLAG_RULES, Rule,
                              check_config, check_flags, check_value, probe_record_ok)

CATALOG = Path(__file__).resolve().parents[2] / "src" / "kvscope" / "catalog" / "data"
SHARED = Path("/work/shared/models")


def _configs():
    paths = sorted(CATALOG.glob("*/config*.json"))
    if SHARED.is_dir():
        paths += sorted(SHARED.glob("**/config.json"))
    for p in paths:
        try:
            cfg = json.loads(p.read_text())
        except ValueError:
            continue
        if isinstance(cfg, dict) and ("model_type" in cfg or "text_config" in cfg):
            yield p


CONFIGS = list(_configs())


def test_every_bundled_config_passes_the_rules():
    assert len(CONFIGS) >= 100
    refused = []
    for p in CONFIGS:
        cfg = json.loads(p.read_text())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ModelSpec.from_hf_config(cfg, p.parent.name)
        except ConfigError as exc:
            refused.append(f"{p.parent.name}: {exc}")
    assert refused == []


@pytest.mark.parametrize("value,ok", [
    (1, True), (10_000, True), (10_001, False), (0, False), (-1, False), (12.0, True), (12.5, False),
    (True, False), ("36", False), (math.nan, False), (math.inf, False), (None, True), ([36], False),
])
def test_layer_count_rule(value, ok):
    text = {"num_hidden_layers": value}
    if ok:
        check_config(text, text)
    else:
        with pytest.raises(ConfigError) as e:
            check_config(text, text)
        msg = str(e.value)
        assert e.value.field == "num_hidden_layers" and "\n" not in msg
        assert f"got {value!r}" in msg and f"<= {MAX_LAYERS}" in msg


def test_message_names_field_value_and_range():
    with pytest.raises(FlagError) as e:
        check_value("--page-size", 0, SGLANG_FLAG_RULES["page_size"], FlagError)
    assert str(e.value) == "--page-size: expected an integer >= 1 and <= 2^20, got 0"
    with pytest.raises(FlagError) as e:
        check_flags("vllm", {"max_model_len": -2})
    assert "(or -1)" in str(e.value) and "got -2" in str(e.value)
    check_flags("vllm", {"max_model_len": -1})  # auto-fit
    check_flags("sglang", {"chunked_prefill_size": -1})  # disables chunked prefill
    with pytest.raises(FlagError, match="mem-fraction-static: expected a finite number > 0 and < 1, got 1"):
        check_flags("sglang", {"mem_fraction_static": 1})


def test_hidden_size_cap_and_wrapper_top_level():
    with pytest.raises(ConfigError, match=f"<= {MAX_HIDDEN}"):
        check_config({"hidden_size": MAX_HIDDEN + 1}, {"hidden_size": MAX_HIDDEN + 1})
    wrapper = {"model_type": "x", "vocab_size": -5, "text_config": {"hidden_size": 8}}
    with pytest.raises(ConfigError, match="vocab_size"):
        check_config(wrapper, wrapper["text_config"])
    with pytest.raises(ConfigError, match="vision_config.depth"):
        cfg = {"vision_config": {"depth": -1}}
        check_config(cfg, {})


def test_every_rule_describes_itself():
    for table in (CONFIG_RULES, SGLANG_FLAG_RULES, VLLM_FLAG_RULES):
        for name, rule in table.items():
            assert isinstance(rule, Rule) and rule.describe(), name


@pytest.mark.parametrize("rec,ok", [
    ({"event": "call", "seq": 1, "call_id": 2, "inputs": {}}, True),
    ({"event": "attach", "rank": {"tp_rank": 0, "tp_size": 2}}, True),
    (None, False), ([1], False), ("x", False),
    ({"event": 5}, False), ({"seq": [1]}, False), ({"call_id": []}, False), ({"rank": True}, False),
    ({"rank": {"tp_rank": "0"}}, False), ({"inputs": "x"}, False), ({"mem": {"free_bytes": -1.5}}, False),
])
def test_probe_record_rules(rec, ok):
    assert probe_record_ok(rec) is ok
