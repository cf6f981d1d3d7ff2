"""The doctor's structure: rule tables for the log grammars, typed observed records, the profile
algebra through the engine module."""

from __future__ import annotations

import pytest

from kvscope.doctor.sglang_rules import SglangFlags, fraction_for
from kvscope.doctor.vllm_rules import VllmObservedFlags
from kvscope.engines.sglang import logs as sglang_logs
from kvscope.engines.sglang.logs import SglangLogDecision
from kvscope.engines.vllm import logs as vllm_logs
from kvscope.engines.vllm.logs import VllmLogDecision
from kvscope.logs.grammar import Rule, compile_rules


@pytest.mark.parametrize("mod,parser", [(sglang_logs, sglang_logs.SglangLogParser),
                                        (vllm_logs, vllm_logs.VllmLogParser)])
def test_one_rule_per_trigger_in_table_order(mod, parser):
    assert mod.TRIGGER_RE.pattern == "|".join(r.trigger for r in mod.RULES)
    named, by_group = compile_rules(mod.RULES)
    assert named.groups == len(mod.RULES) and list(by_group.values()) == list(mod.RULES)
    assert parser.RULES is mod.RULES


def test_a_trigger_with_a_capturing_group_is_refused():
    with pytest.raises(ValueError):
        compile_rules((Rule("(KV) Cache", None, lambda p, m, ln: None),))


def test_dispatch_picks_the_rule_of_the_phrase():
    p = sglang_logs.SglangLogParser()
    assert p.feed(1, "[2025-01-01 00:00:00 TP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB")
    assert p.feed(2, "[2025-01-01 00:00:01 TP1] KV Cache VA upper bound. #tokens: 10, KV size: 0.50 GB")
    assert not p.feed(3, "[2025-01-01 00:00:02 TP0] KV Cache is allocated. (no figures)")
    log = p.result()
    assert [a.size_gib for r in log.ranks.values() for a in r.kv_allocs] == [2.0, 0.5]
    assert log.matched_lines == 2


def test_observed_record_keeps_the_log_order_and_printed_nulls():
    d = SglangLogDecision.from_items([("rank_label", "TP0"), ("full_layer_tokens", None), ("swa_layer_tokens", 5)])
    assert d.to_dict() == {"rank_label": "TP0", "full_layer_tokens": None, "swa_layer_tokens": 5}
    assert d.swa_layer_tokens == 5 and d.has("full_layer_tokens") and not d.has("kv_cache_bytes")
    v = VllmLogDecision.from_items([("rank_label", "TP0"), ("available_kv_cache_bytes", 1), ("weights_bytes", 2)])
    assert list(v.to_dict()) == ["rank_label", "available_kv_cache_bytes", "weights_bytes"]
    with pytest.raises(KeyError):
        VllmLogDecision.from_items([("rank_label", "TP0"), ("not_a_key", 1)])


def test_flags_are_typed_once():
    f = SglangFlags.build({"tp_size": 8, "mem_fraction_static": "0.8", "enable_dp_attention": True},
                          {"mem_fraction_static": "server_args"})
    assert (f.tp_size, f.mem_fraction_static, f.enable_dp_attention, f.mfs_source) == (8, 0.8, True, "server_args")
    assert f.attention_backend == "None" and f.device == "cuda" and f.page_size is None
    v = VllmObservedFlags.build({"block_size": 32, "disable_custom_all_reduce": "true"}, {})
    assert v.block_size == 32 and v.block_size_set and v.disable_custom_all_reduce and "block_size" in v.present


@pytest.mark.parametrize("pre,post,kv,mm", [(94.0, 21.7, 10.4, 0.0), (47.24, 19.67, 12.34, 0.5), (79.1, 8.02, 0.0, 0.0)])
def test_fraction_for_is_the_profile_solved_for_the_fraction(pre, post, kv, mm):
    assert fraction_for(pre, post, kv, mm) == 1.0 - (post - mm - kv) / pre  # bit for bit
