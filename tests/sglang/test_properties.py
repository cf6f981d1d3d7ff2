"""Invariants of the SGLang profile (hypothesis): more fraction never gives fewer tokens;
tokens x cell never exceeds the budget; the minimum viable fraction is a true boundary."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.engines.sglang import memory as mem
from kvscope.engines.sglang import pools
from kvscope.engines.sglang.release import release

GIB = 1 << 30
versions = st.sampled_from([release(x) for x in ("0.4.6.post5", "0.5.9", "0.5.13", "0.5.14", "0.5.23")])
frac = st.floats(min_value=0.05, max_value=0.99)


@settings(max_examples=300, deadline=None)
@given(v=versions, pre=st.floats(10, 300), used=st.floats(0, 0.95), f1=frac, f2=frac,
       cell=st.integers(1024, 200_000), page=st.sampled_from([1, 16, 64]))
def test_monotone_and_bounded(v, pre, used, f1, f2, cell, page):
    post = pre * (1 - used)
    lo, hi = sorted((f1, f2))
    p_lo, _ = mem.profile(v, pre_model_load_gib=pre, available_gpu_gib=post, mem_fraction_static=lo, cell_bytes=cell)
    p_hi, _ = mem.profile(v, pre_model_load_gib=pre, available_gpu_gib=post, mem_fraction_static=hi, cell_bytes=cell)
    t_lo = pools.round_to_page(max(p_lo.profiled_tokens, 0), page)
    t_hi = pools.round_to_page(max(p_hi.profiled_tokens, 0), page)
    assert t_hi >= t_lo
    assert t_hi * cell <= max(p_hi.rest_memory_bytes, 0)


@settings(max_examples=200, deadline=None)
@given(pre=st.floats(10, 300), used=st.floats(0.05, 0.95), cell=st.integers(1024, 200_000))
def test_min_viable_fraction_is_the_boundary(pre, used, cell):
    v = release("0.5.23")
    post = pre * (1 - used)
    f = mem.min_viable_fraction(pre_model_load_gib=pre, available_gpu_gib=post, reserve_gib=0.0, need_bytes=cell)
    if not 0.001 < f < 0.998:
        return
    above, _ = mem.profile(v, pre_model_load_gib=pre, available_gpu_gib=post, mem_fraction_static=f + 1e-3,
                           cell_bytes=cell)
    below, _ = mem.profile(v, pre_model_load_gib=pre, available_gpu_gib=post, mem_fraction_static=f - 1e-3,
                           cell_bytes=cell)
    assert above.error is None and above.profiled_tokens >= 1
    assert below.error is not None or below.profiled_tokens < 1
