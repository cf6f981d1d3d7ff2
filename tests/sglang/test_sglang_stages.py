"""The SGLang plan's stages: settle is one frozen record, the budget algebra has one home, the
decision is typed."""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.engines.sglang import memory
from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.decision import SGLangDecision, SGLangPlanExtra
from kvscope.engines.sglang.plan import plan_sglang
from kvscope.engines.sglang.release import release
from kvscope.engines.sglang.settle import settle
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec


def test_settle_is_frozen_and_applies_the_aiter_factor_once():
    spec, _ = load_spec("Qwen/Qwen3-8B")
    s = settle(spec, get_gpu("mi300x"), SGLangArgs(mem_fraction_static=0.8, context_length=32768), release("0.5.23"))
    assert s.backend.name == "aiter" and s.fraction_factor == 0.85
    assert s.mem_fraction_static == 0.8 * 0.85 and s.defaults.mem_fraction_static == 0.8
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.page_size = 2  # type: ignore[misc]


def test_fraction_for_inverts_the_budget():
    kw = dict(pre_model_load_gib=139.5, available_gpu_gib=120.25, reserve_gib=0.1)
    for f in (0.2, 0.55, 0.9):
        budget = memory.kv_budget_gib(mem_fraction_static=f, **kw)
        assert memory.fraction_for(budget_gib=budget, **kw) == pytest.approx(f, abs=1e-12)
    need = 1 << 20
    assert memory.min_viable_fraction(need_bytes=need, **kw) == memory.fraction_for(budget_gib=need / (1 << 30), **kw)


def test_plan_produces_typed_records_with_the_documented_keys():
    spec, _ = load_spec("Qwen/Qwen3-8B")
    t = plan_sglang(spec, get_gpu("h100-sxm"), SGLangArgs())
    d, x = t.ranks[0].decision, t.extra
    assert isinstance(d, SGLangDecision) and isinstance(x, SGLangPlanExtra)
    assert list(d.to_dict()) == [f.name for f in dataclasses.fields(SGLangDecision)]
    assert d.max_total_num_tokens == t.kv_cache_tokens and x.context_len == 40960
    out = t.to_dict()
    assert out["ranks"][0]["decision"] == d.to_dict()
    assert all(out[k] == v for k, v in x.to_dict().items() if k not in ("max_running_requests",))
