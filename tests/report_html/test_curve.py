"""``kvscope.curve``: every point is a real ``plan()``; the marks are the exact 1e-4 edges."""

from __future__ import annotations

import pytest

from kvscope.curve import curve
from kvscope.errors import FlagError
from kvscope.plan import plan

KIMI = dict(tp_size=8, pre_load_free_gib=94, post_load_free_gib=21.7)


def _plan(v, engine="sglang", **kw):
    knob = "mem_fraction_static" if engine == "sglang" else "gpu_memory_utilization"
    return plan(kw.pop("model"), kw.pop("gpu"), engine=engine, **{knob: v}, **kw)


def test_origin_case_marks():
    c = curve("moonshotai/Kimi-K2.5", "rtx-pro-6000", mem_fraction_static=0.55, **KIMI)
    base = plan("moonshotai/Kimi-K2.5", "rtx-pro-6000", mem_fraction_static=0.55, **KIMI)
    assert c.user_value == 0.55 and c.point_at(0.55).kv_cache_tokens == base.kv_cache_tokens == 0
    assert c.min_viable == base.extra.min_mem_fraction_static == 0.7702
    args = dict(model="moonshotai/Kimi-K2.5", gpu="rtx-pro-6000", **KIMI)
    assert not _plan(0.7701, **args).starts and _plan(0.7702, **args).starts
    assert c.error_below.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache")
    # above the working range CUDA graph capture runs out of memory: the curve marks that edge too
    assert c.fails_above is not None and c.fails_above > c.min_viable
    assert _plan(round(c.fails_above - 1e-4, 4), **args).starts and not _plan(c.fails_above, **args).starts
    assert c.error_above == _plan(c.fails_above, **args).error
    # the full-context mark: the smallest value whose pool holds 262,144 tokens
    assert c.context_tokens == 262144
    assert _plan(c.full_context_value, **args).kv_cache_tokens >= 262144 > _plan(
        round(c.full_context_value - 1e-4, 4), **args).kv_cache_tokens
    assert c.tokens_per_0_01 == 14363
    for p in c.points:  # every point is plan() at that value
        if p.value in (0.6, 0.8, 0.9):
            assert p.kv_cache_tokens == _plan(p.value, **args).kv_cache_tokens


def test_vllm_default_and_min_viable():
    c = curve("Qwen/Qwen3-8B", "h100-sxm", engine="vllm", concurrency=4)
    base = plan("Qwen/Qwen3-8B", "h100-sxm", engine="vllm")
    assert c.knob == "--gpu-memory-utilization" and c.user_value is None
    assert c.engine_default == base.extra.gpu_memory_utilization
    assert c.point_at(c.engine_default).kv_cache_tokens == base.kv_cache_tokens
    args = dict(model="Qwen/Qwen3-8B", gpu="h100-sxm")
    assert not _plan(round(c.min_viable - 1e-4, 4), "vllm", **args).starts
    assert _plan(c.min_viable, "vllm", **args).starts
    assert _plan(c.concurrency_value, "vllm", **args).kv_cache_tokens >= 4 * 40960 > _plan(
        round(c.concurrency_value - 1e-4, 4), "vllm", **args).kv_cache_tokens


def test_bad_input_is_a_typed_error():
    with pytest.raises(FlagError, match="step"):
        curve("Qwen/Qwen3-8B", "h100-sxm", step=0.9)
    with pytest.raises(FlagError, match="engine"):
        curve("Qwen/Qwen3-8B", "h100-sxm", engine="trt")
