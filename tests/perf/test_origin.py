"""The origin case (shared/docs/origin.md, shared/specs/perf.md §3.3, §4.4): Kimi K2.5 int4 on
8x RTX PRO 6000 (PCIe Gen5, dual socket), SGLang TP 8: 89.5 tok/s, EAGLE-3 54.1 tok/s, forced custom
all-reduce 38 tok/s."""
from __future__ import annotations

import pytest

from kvscope.hardware.gpus import get_gpu
from kvscope.perf.report import PerfOptions, build_perf

PRO = "rtx-pro-6000"


def _run(kimi, **kw):
    return build_perf(kimi, get_gpu(PRO), PerfOptions(tp=8, **kw))


def test_baseline_within_15_percent(kimi):
    r = _run(kimi)
    d = r.primary
    assert r.communicator.used == "nccl"
    assert d.allreduce_count == 123
    assert abs(d.decode_tokens_per_s / 89.5 - 1) < 0.15
    # mechanism model (perf/params.py, calibrated values): 4.68 GB of dense weights + KV at 0.80 x 1,792 GB/s
    # and 1.49 GB of int4 experts at a further x0.575 (one token per expert) = 5.07 ms, above the 60-layer
    # kernel floor (3.08 ms); + 123 x 45.3 us all-reduces + 1.5 ms SGLang step cost = 12.14 ms (was 87.0 tok/s
    # with the roofline defaults: 4.92 ms + 123 x 45.3 us + 1 ms)
    assert d.decode_tokens_per_s == pytest.approx(82.3, abs=0.1)
    lo, hi = r.decode_range[0]
    assert lo < 89.5 < hi  # the published figure lies inside the parameter range


def test_eagle3_with_measured_verify_latency_within_15_percent(kimi):
    r = _run(kimi, speculative_algorithm="EAGLE3", speculative_num_draft_tokens=4, accept_length=2.3,
             verify_allreduce_latency_us=246.0)
    s = r.speculative
    assert abs(s.decode_tokens_per_s / 54.1 - 1) < 0.15
    assert s.speedup < 1.0 and "slower" in s.verdict
    assert s.verify.allreduce.payload_bytes == 4 * 7168 * 2
    assert s.verify.experts_touched_per_layer == pytest.approx(31.0, abs=0.05)
    assert s.verify_allreduce_time_s == pytest.approx(123 * 246e-6)
    # a communicator at the baseline's per-all-reduce cost: a speedup (spec §4.4: ~130 tok/s, 1.46x)
    assert s.counterfactual_speedup > 1.3


def test_eagle3_with_modelled_nccl_is_a_speedup(kimi):
    # with the modelled NCCL verify all-reduce (52 us) EAGLE-3 would pay off; draft-forward floors and the
    # spec-loop overhead (perf/params.py) keep it below the 1.46x of spec §4.4
    s = _run(kimi, speculative_algorithm="EAGLE3", accept_length=2.3).speculative
    assert 1.2 < s.speedup < 1.46


def test_eagle3_without_accept_length_uses_assumed_default(kimi):
    s = _run(kimi, speculative_algorithm="EAGLE3", speculative_num_draft_tokens=4,
             verify_allreduce_latency_us=246.0).speculative
    assert s.accept_length_assumed and "assumed" in s.accepted_tokens_source
    lo, hi = s.accept_length_range
    assert lo < s.accepted_tokens_per_step < hi
    assert s.break_even_accept_length > hi  # the measured verify cost loses at any typical acceptance
    assert s.speedup_range[1] < 1.0


def test_forced_custom_allreduce_near_38(kimi):
    r = _run(kimi, allreduce="custom")
    assert r.communicator.used == "custom" and not r.communicator.engine_allows_custom
    assert abs(r.primary.decode_tokens_per_s / 38 - 1) < 0.2  # 43.9 modelled [E hypothesis]
    assert r.primary.decode_tokens_per_s < 0.55 * _run(kimi).primary.decode_tokens_per_s


def test_implied_latency_from_observed(kimi):
    r = _run(kimi, observed_tokens_per_s=89.5)
    assert r.implied_allreduce_latency_us == pytest.approx(37.4, abs=0.1)  # spec §3.3: ~43 us
    r38 = _run(kimi, observed_tokens_per_s=38)
    assert r38.implied_allreduce_latency_us == pytest.approx(160.5, abs=0.1)  # spec §4.4: ~165 us


def test_prefill_allreduce_bound(kimi):
    p = _run(kimi, context_tokens=8192).prefill
    assert p.bound == "allreduce"
    assert p.allreduce_bus_bytes_per_token == 123 * 14336 * 7 // 4  # ~3.1 MB per token
