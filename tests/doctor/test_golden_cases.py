"""Golden tests: every case of ../shared/logs (copied to data/cases.jsonl) parses from its
``log_excerpt`` alone, reproduces the printed figures, and yields the expected findings."""

from __future__ import annotations

import pytest

from kvscope.doctor import diagnose_text
from kvscope.errors import LogFormatError
from kvscope.units import gib_to_bytes

from .conftest import load_cases

ALL_IDS = sorted(load_cases())


def codes(report):
    return sorted(f.code for f in report.findings)


def check(report, name):
    hits = [c for c in report.checks if c.name == name]
    assert hits, f"no check {name!r}: {[c.name for c in report.checks]}"
    return hits[0]


def test_every_case_is_covered_here():
    covered = {
        "sgl-qwen3-235b-fp8-4xh100-mfs093", "vllm-llama31-8b-3090-29k-fail", "lld-vllm-llama31-8b-h100-tp1",
        "lld-vllm-gptoss20b-h100-tp2", "lld-vllm-mixtral-8x7b-h100-tp2", "sgl-dsr1-amd192gb-tp8-dp8-negative",
        "vllm-qwen25-32b-fp8-2x4090", "vllm-qwen3-30b-a3b-nvfp4-rtxpro6000", "sgl-qwq32b-4xl4-tp4",
        "vllm-dsv4-flash-rtxpro5000-tp4-mtp", "sgl-kimi-k25-8xmi355x-tp8", "sgl-glm5-fp8-8xmi355x-kvfp8",
        "lld-vllm-qwen3-14b-h100-v0160", "lld-vllm-qwen3-14b-h100-v0170",
    }
    assert set(ALL_IDS) == covered


@pytest.mark.parametrize("case_id", ALL_IDS)
def test_engine_detected_and_no_check_disagrees_unexpectedly(cases, case_id):
    case = cases[case_id]
    if case_id == "vllm-qwen25-32b-fp8-2x4090":
        pytest.skip("a user's summary, not log lines: covered by test_user_summary_is_not_a_log")
    r = diagnose_text(case["log_excerpt"])
    assert r.timeline.engine == case["engine"]
    assert r.timeline.source == "log"
    expected_disagreements = {"lld-vllm-gptoss20b-h100-tp2": {"maximum concurrency"}}.get(case_id, set())
    assert {c.name for c in r.checks if not c.agrees} == expected_disagreements


def test_sglang_qwen3_235b_kv_line_only(cases):
    c = cases["sgl-qwen3-235b-fp8-4xh100-mfs093"]
    r = diagnose_text(c["log_excerpt"])
    assert r.timeline.kv_cache_tokens == 367404
    assert r.timeline.kv_cache_bytes == gib_to_bytes(8.23 + 8.23)
    assert r.timeline.extra.engine_version_range == "<0.5.14"  # KV line without "dtype:"
    assert codes(r) == []
    # with the model and TP the case states, the KV size is recomputed exactly:
    # 94 layers × 1 KV head/rank × (128+128) × 2 B = 48,128 B/token; (367404+1) × 48128 B = 16.46 GiB
    r = diagnose_text(c["log_excerpt"], model="Qwen/Qwen3-235B-A22B-FP8", assume={"tp_size": 4})
    assert r.timeline.kv_cell_bytes == 48128
    kv = check(r, "KV size")
    assert kv.agrees and kv.printed == 16.46 and kv.recomputed == 16.46


def test_sglang_qwq32b_l4_full_startup(cases):
    r = diagnose_text(cases["sgl-qwq32b-4xl4-tp4"]["log_excerpt"])
    tl = r.timeline
    assert tl.engine == "sglang" and tl.starts is True
    assert tl.kv_cache_tokens == 46611 and tl.max_running_requests == 2049
    assert tl.kv_cache_bytes == gib_to_bytes(1.42 + 1.42)
    assert tl.weights_bytes == gib_to_bytes(15.54)
    assert tl.extra.engine_version_range == "<0.5.14,<0.5.3,<0.5.9"  # the doc says 0.4.3.post4
    (rank,) = tl.ranks
    phases = {p.name: p for p in rank.phases}
    assert phases["init"].free_bytes_after == gib_to_bytes(21.63)
    assert phases["load_weights"].free_bytes_before == gib_to_bytes(21.63)
    assert phases["load_weights"].free_bytes_after == gib_to_bytes(6.09)
    assert phases["kv_cache"].free_bytes_before == gib_to_bytes(6.09)
    assert phases["kv_cache"].free_bytes_after == gib_to_bytes(6.09) - gib_to_bytes(2.84)
    assert phases["req_to_token_pool"].free_bytes_after == gib_to_bytes(2.09)
    assert phases["cuda_graph"].free_bytes_before == gib_to_bytes(1.45)
    assert phases["cuda_graph"].free_bytes_after == gib_to_bytes(0.53)
    assert check(r, "TP0 weights mem usage").recomputed == 15.54
    assert check(r, "TP0 decode CUDA graph mem usage").recomputed == 0.92  # printed 0.93: rounding of both ends
    assert check(r, "max_total_num_tokens").agrees
    # 1 − (6.09 − 2.84)/21.63 = 0.8497: SGLang's auto default 0.85 for this L4 TP4 setup
    assert tl.extra.effective_mem_fraction_static == 0.8497
    assert codes(r) == ["cuda-graph-slack", "effective-fraction", "kv-pool-below-context"]
    below = next(f for f in r.findings if f.code == "kv-pool-below-context")
    assert "46,611 tokens but context_len is 131,072" in below.message


def test_sglang_dsr1_negative_profile(cases):
    r = diagnose_text(cases["sgl-dsr1-amd192gb-tp8-dp8-negative"]["log_excerpt"])
    tl = r.timeline
    assert tl.starts is False
    assert tl.extra.engine_version_range == "<0.5.9"  # 0.4.8.post1
    # baseline = avail after + mem usage = 21.73 + 166.59 = 188.32; minimum = 1 − 21.73/188.32
    assert tl.extra.min_mem_fraction_static == 0.8846
    assert [(f.flag, f.value) for f in tl.fix] == [("mem_fraction_static", 0.91)]
    assert codes(r) == ["kv-sizing-failed"]
    (f,) = r.findings
    assert "-561,981" in f.message and f.severity == "error"
    assert any("DP7 TP7" in e for e in f.evidence)
    # with the model and the 0.95 from the thread: −561,981 × 70,272 B = −36.78 GiB of budget
    r = diagnose_text(cases["sgl-dsr1-amd192gb-tp8-dp8-negative"]["log_excerpt"], model="deepseek-ai/DeepSeek-R1",
                      assume={"mem_fraction_static": 0.95, "tp_size": 8})
    assert r.timeline.kv_cell_bytes == 70272
    assert r.timeline.extra.effective_mem_fraction_static == 0.6893
    assert "-36.78 GiB of budget" in r.findings[0].message


def test_sglang_kimi_k25_mi355x(cases):
    r = diagnose_text(cases["sgl-kimi-k25-8xmi355x-tp8"]["log_excerpt"])
    tl = r.timeline
    assert tl.model == "moonshotai/Kimi-K2.5"  # from the `sglang serve` line
    assert tl.kv_cache_tokens == 2454421 and tl.kv_cache_bytes == gib_to_bytes(160.63)
    assert tl.extra.engine_version_range == "<0.5.10,<0.5.14,>0.5.6"  # 0.5.8.post1
    assert tl.kv_cell_bytes == 70272  # 61 × 576 × 2 B from the bundled config
    assert check(r, "KV size").recomputed == 160.63
    # the auto fraction was 0.8260405859375: 1 − (209.98 − 160.63)/283.56
    assert tl.extra.effective_mem_fraction_static == 0.826
    assert codes(r) == ["effective-fraction"]


def test_sglang_glm5_dsa_fp8_allocates_more_than_it_budgets(cases):
    """SGLang < 0.5.18 budgets a DSA token at (576 + 132) B x 78 layers but allocates 656-byte fp8 rows
    (the conformance suite runs get_cell_size_per_token @ v0.5.9 / _compute_cell_size @ v0.5.13):
    the printed 186.77 GiB is 788/708 of the budget, which follows the 0.908 in the ServerArgs dump."""
    r = diagnose_text(cases["sgl-glm5-fp8-8xmi355x-kvfp8"]["log_excerpt"])
    tl = r.timeline
    assert tl.extra.mem_fraction_static == 0.908 and tl.extra.mem_fraction_static_source == "server_args"
    assert r.flags["kv_cache_dtype"] == "fp8_e4m3" and r.flags["tp_size"] == 8
    assert tl.kv_cache_tokens == 3262823
    # 186.77 x 708/788 = 167.81 GiB budgeted; 1 − (193.92 − 167.81)/283.50 = 0.9079
    assert tl.extra.dsa_fp8_budgeted_kv_gib == 167.81
    assert tl.extra.effective_mem_fraction_static == 0.9079
    assert codes(r) == ["effective-fraction", "unparsed-lines"]
    f = next(f for f in r.findings if f.code == "effective-fraction")
    assert "656-byte fp8 row" in f.message and "18.96 GiB" in f.message
    assert r.stats.unparsed == 2  # the two DSA warnings are listed, not dropped
    assert "DSA with TP mode" in r.unparsed_samples[0]


def test_vllm_v0_3090_fails_at_kv_sizing(cases):
    r = diagnose_text(cases["vllm-llama31-8b-3090-29k-fail"]["log_excerpt"])
    tl = r.timeline
    assert tl.engine == "vllm" and tl.starts is False
    assert tl.extra.engine_version_range == "<0.11.0"
    assert tl.kv_cache_tokens == 1478 * 16 == 23648
    assert tl.extra.num_gpu_blocks == 1478
    assert check(r, "worker KV cache size (V0)").recomputed == 2.89  # 23.58 × 0.90 − 17.98 − 0.35
    assert check(r, "KV tokens in the error").agrees
    assert check(r, "maximum concurrency").recomputed == 0.82
    assert codes(r) == ["kv-sizing-failed"]
    assert ("max_model_len", 23648) in [(f.flag, f.value) for f in tl.fix]
    assert ("gpu_memory_utilization", 0.93) in [(f.flag, f.value) for f in tl.fix]


@pytest.mark.parametrize("case_id,avail,non_kv,tokens,conc,util", [
    ("lld-vllm-llama31-8b-h100-tp1", 58.11, 17.12, 476016, 58.11, 0.95),
    ("lld-vllm-gptoss20b-h100-tp2", 59.32, 11.95, 2591776, 316.07, 0.9),
    ("lld-vllm-mixtral-8x7b-h100-tp2", 28.44, 46.79, 465936, 56.88, 0.95),
])
def test_vllm_019_sweep(cases, case_id, avail, non_kv, tokens, conc, util):
    r = diagnose_text(cases[case_id]["log_excerpt"])
    tl = r.timeline
    assert tl.starts is True and tl.kv_cache_tokens == tokens
    assert tl.kv_cache_bytes == gib_to_bytes(avail)
    assert tl.extra.max_concurrency == conc and tl.extra.gpu_memory_utilization == util
    assert tl.extra.max_model_len == 8192
    # 0.19: available = requested − non-KV; the CUDA graph estimate is not subtracted
    a = next(c for c in r.checks if c.name.endswith("available KV cache memory"))
    assert a.agrees and a.recomputed == avail and "not subtracted" in a.how
    assert next(c for c in r.checks if c.name.endswith("non-KV memory")).agrees
    (rank,) = tl.ranks
    assert rank.phase("init").free_bytes_after is not None
    assert rank.decision.available_kv_cache_bytes == gib_to_bytes(avail)
    expected = ["cuda-graph-not-reserved"] + (["kv-tokens-from-concurrency"] if "gptoss" in case_id else [])
    assert codes(r) == expected


def test_vllm_nvfp4_013(cases):
    r = diagnose_text(cases["vllm-qwen3-30b-a3b-nvfp4-rtxpro6000"]["log_excerpt"])
    tl = r.timeline
    assert tl.engine_version == "0.13.0"
    assert tl.model == "nvidia/Qwen3-30B-A3B-NVFP4"
    assert tl.kv_cache_tokens == 789568 and tl.weights_bytes == gib_to_bytes(16.8574)
    assert check(r, "maximum concurrency").recomputed == 192.77  # 789,568 / 4,096
    assert codes(r) == []


def test_vllm_dsv4_merged_line(cases):
    r = diagnose_text(cases["vllm-dsv4-flash-rtxpro5000-tp4-mtp"]["log_excerpt"])
    tl = r.timeline
    assert tl.extra.engine_version_range == ">=0.28.0"
    assert tl.kv_cache_tokens == 63859 and tl.extra.max_model_len == 33792
    assert check(r, "maximum concurrency").agrees  # int(1.89 × 33,792) ≈ 63,859
    assert codes(r) == ["kv-tokens-from-concurrency"]


@pytest.mark.parametrize("case_id,tokens,blocks,non_kv", [
    ("lld-vllm-qwen3-14b-h100-v0160", 274848, 17178, 33.29),
    ("lld-vllm-qwen3-14b-h100-v0170", 297152, 18572, 29.89),
])
def test_llmd_run_records(cases, case_id, tokens, blocks, non_kv):
    r = diagnose_text(cases[case_id]["log_excerpt"])
    assert r.timeline.engine == "vllm"
    assert r.timeline.kv_cache_tokens == tokens and r.timeline.extra.num_gpu_blocks == blocks
    assert check(r, "kv cache tokens (record)").agrees  # blocks × 16
    nk = check(r, "non-KV memory (record)")
    assert nk.agrees and nk.printed == non_kv


def test_user_summary_is_not_a_log(cases):
    text = cases["vllm-qwen25-32b-fp8-2x4090"]["log_excerpt"]
    with pytest.raises(LogFormatError, match="no SGLang or vLLM startup lines"):
        diagnose_text(text)
    r = diagnose_text(text, engine="vllm")  # read anyway: nothing understood, everything listed
    assert r.timeline.kv_cache_tokens is None
    assert "no-memory-lines" in codes(r)
