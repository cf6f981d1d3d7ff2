"""Real startup logs posted publicly (tests/doctor/real_logs, one entry each in cases.jsonl): doctor must
read every one without error, recover exactly the figures the engine printed, reproduce the engine's
derived numbers where the log holds the inputs, and — where the model is in the catalog and the log
gives the measured free memory — `kvscope plan` in measured mode must predict the printed tokens
within the rounding / rank spread the log shows."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from kvscope.cli import main
from kvscope.report.doctor_text import render_doctor as render_text
from kvscope.doctor import diagnose_path, diagnose_text
from kvscope.units import gib_to_bytes

REAL = Path(__file__).parent / "real_logs"


def load_real_cases() -> dict[str, dict]:
    with open(REAL / "cases.jsonl", encoding="utf-8") as f:
        return {c["id"]: c for c in (json.loads(line) for line in f if line.strip())}


CASES = load_real_cases()
IDS = sorted(CASES)


def gib(x: float) -> int:
    return gib_to_bytes(x)


def codes(report) -> list[str]:
    return sorted(f.code for f in report.findings)


def check(report, name: str):
    hits = [c for c in report.checks if c.name == name]
    assert hits, f"no check {name!r}: {[c.name for c in report.checks]}"
    return hits[0]


def phases(report, rank: int) -> dict:
    r = next(r for r in report.timeline.ranks if r.rank == rank)
    return {p.name: (p.free_bytes_before, p.free_bytes_after) for p in r.phases}


# What each log printed (copied from the log text) and what doctor must make of it.
# tokens / kv_gib / weights_gib / mrr: the timeline's figures; codes: the findings, exactly;
# checks: recomputations that must agree (name -> recomputed value or None for "any").
EXPECT: dict[str, dict] = {
    "sglang-pr11716-tp8": dict(
        engine="sglang", starts=True, tokens=2795207, kv_gib=53.31 + 53.31, codes=[], version_range="<0.5.14,<0.5.9",
        pool_end={1: 11.87, 3: 11.87, 5: 11.87, 6: 11.87}, graph_begin={0: 11.82, 2: 11.78, 7: 12.01},
        init={0: 137.34, 1: 137.29, 7: 137.52}, decision={"init_mem_usage_bytes": gib(1.96), "cuda_graph_bs_max": 512},
        extra={"pre_model_load_memory_bytes": gib(137.29)}),
    "sglang-pr22537-qwen3-b200-tp4": dict(
        engine="sglang", starts=True, tokens=2206208, kv_gib=67.33 + 67.33, weights_gib=15.50, codes=["effective-fraction"],
        version_range="<0.5.14,>0.5.9", post={0: 160.78}, pool_end={0: 25.40, 1: 25.37, 2: 25.37, 3: 25.52},
        effective=0.8518),
    "sglang-pr27537-musa-tp2": dict(
        engine="sglang", starts=True, tokens=1106304, kv_gib=25.32 + 25.32, codes=[], version_range="<0.5.14,>0.5.9",
        pool_end={0: 12.05}, graph_begin={0: 11.99, 1: 12.07}),
    "sglang-pr29853-grok2-npu-tp16": dict(
        engine="sglang", starts=True, tokens=387968, kv_gib=5.92 + 5.92, weights_gib=35.57, mrr=2048,
        codes=["effective-fraction-mismatch"], version_range=">0.4.10.post2,>0.5.9",
        pre={0: 60.81, 9: 61.12, 14: 60.82}, post={0: 25.24, 9: 25.55, 14: 25.31},
        pool_end={0: 11.15, 9: 11.47, 15: 11.47, 8: 11.22}, effective=0.7796,
        checks={"max_total_num_tokens": 387968, "TP14 weights mem usage": 35.51, "TP0 weights mem usage": 35.57,
                "max_running_requests": 2048},  # pool max(min(int(387,968/131,072 × 512), 4096), 2048) = 2048
        extra={"context_len": 131072, "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
               "available_gpu_mem_bytes": gib(11.15), "mem_fraction_static": 0.8}),
    "sglang-xinference3481-qwen3-14b": dict(
        engine="sglang", starts=True, tokens=91749, kv_gib=7.00 + 7.00, weights_gib=27.57, codes=["effective-fraction"],
        version_range="<0.5.14,<0.5.9", post={0: 19.67}, pre={0: 47.24}, pool_end={0: 5.27}, graph_begin={0: 4.64},
        effective=0.88, decision={"cuda_graph_bs_max": 160}),
    "sglang-skill-clean-startup-qwen3-8b-b200": dict(
        engine="sglang", starts=True, tokens=992896, kv_gib=68.18 + 68.18, weights_gib=15.28, codes=["effective-fraction"],
        version_range="<0.5.14,>0.5.6,>0.5.9", model="Qwen/Qwen3-8B", pre={0: 177.57}, post={0: 162.30},
        pool_end={0: 25.26}, graph_begin={0: 24.14}, effective=0.8539,
        checks={"rank weights mem usage": 15.27, "rank decode CUDA graph mem usage": 0.6,
                "rank piecewise CUDA graph mem usage": 2.32, "max_total_num_tokens": 992896},
        decision={"init_mem_usage_bytes": gib(0.09), "free_bytes_at_end": gib(21.22)},
        extra={"chunked_prefill_size": 16384}),
    "sglang-2468-mistral7b-2024-no-mem-usage": dict(
        engine="sglang", starts=True, tokens=56524, mrr=2049, codes=[], version_range="<0.5.14,<0.5.3,<0.5.9",
        model="mistralai/Mistral-7B-Instruct-v0.1", post={0: 9.69}, pool_end={0: 2.44},
        checks={"max_running_requests": 2049},  # 0.4.x: ReqToTokenPool(2048 + 1), min(56,524 // 2, 2049)
        extra={"context_len": 32768, "max_prefill_tokens": 16384}),
    "sglang-inferencex2128-dsv4pro-h200-no-kv-memory": dict(
        engine="sglang", starts=False, weights_gib=125.65, codes=["kv-sizing-failed"], version_range=">0.5.13",
        post={0: 12.25}, pre={0: 137.90}, error="Loaded weights leave no GPU memory",
        extra={"min_mem_fraction_static": 0.9112, "mem_fraction_static": 0.88}, fix=[("mem_fraction_static", 0.94)],
        message="post-load free 12.25 GiB ≤ slack 137.90 × (1 − 0.88) = 16.55 GiB"),
    "sglang-4417-dsv3-2xh100-tp16": dict(
        engine="sglang", starts=None, tokens=None, weights_gib=40.46, codes=["log-truncated", "unbalanced-ranks"],
        version_range="<0.5.9", post={0: 35.52, 7: 36.63}, pool_end={0: 16.08, 5: 16.07, 6: 17.18}),
    "sglang-5770-qwen2-tp4": dict(
        engine="sglang", starts=None, tokens=None, weights_gib=0.94, codes=["log-truncated", "unbalanced-ranks"],
        version_range="<0.5.9", post={0: 89.06, 1: 88.82, 3: 90.00}),
    "sglang-29575-summary-line": dict(
        engine="sglang", starts=True, tokens=2086558, mrr=33, codes=["max-running-requests-reduced"],
        version_range=">0.4.10.post2",
        extra={"context_len": 256000, "available_gpu_mem_bytes": gib(17.22)}),
    "vllm-lmcache1739-qwen3-14b": dict(
        engine="vllm", starts=True, tokens=42656, kv_gib=6.51, codes=[], version_range="<0.28.0",
        checks={"maximum concurrency": 1.3}, extra={"max_model_len": 32768, "max_concurrency": 1.3}),
    "vllm-pr20707-40k": dict(
        engine="vllm", starts=True, tokens=922496, kv_gib=112.61, codes=[], version_range="<0.28.0",
        checks={"maximum concurrency": 23.06, "GPU KV cache size from num_gpu_blocks": 922496},
        extra={"max_model_len": 40000, "max_concurrency": 23.06, "num_gpu_blocks": 57656}),
    "vllm-10517-llama31-8b-3090-20k": dict(
        engine="vllm", starts=True, tokens=1952 * 16, kv_gib=3.81, weights_gib=14.9888, codes=[], version_range="<0.11.0",
        checks={"worker KV cache size (V0)": 3.81, "maximum concurrency": 1.56},
        extra={"num_gpu_blocks": 1952, "gpu_memory_utilization": 0.9, "max_model_len": 20000, "max_concurrency": 1.56}),
    "vllm-2418-v0-alpaca2-4096-fail": dict(
        engine="vllm", starts=False, tokens=229 * 16, codes=["kv-sizing-failed"], version_range="<0.11.0",
        extra={"num_gpu_blocks": 229, "max_model_len": 4096}, error="# GPU blocks: 229", fix=[("max_model_len", 3664)]),
    "vllm-34076-pp2-qwen3-coder-fail": dict(
        engine="vllm", starts=False, codes=["kv-sizing-failed"], error="max seq len (262144)",
        fix=[("max_model_len", 34736)], message="needs 24.0 GiB of KV but only 3.18 GiB"),
    "vllm-23278-gptoss120b-h100-negative": dict(
        engine="vllm", starts=False, weights_gib=65.9651, codes=["kv-sizing-failed", "unparsed-lines"],
        version_range="<0.14.0", error="Available KV cache memory: -2.14 GiB",
        extra={"available_kv_cache_bytes": gib(-2.14)}, message="-2.14 GiB"),
    "vllm-27508-gptoss120b-h100-fail": dict(
        engine="vllm", starts=False, kv_gib=1.71, codes=["kv-sizing-failed"], traceback_lines=3,
        error="max seq len (131072)", message="needs 4.54 GiB of KV but only 1.71 GiB"),
    "vllm-33155-gptoss120b-h100-0141-caret-ansi": dict(
        engine="vllm", starts=None, weights_gib=64.38, codes=["log-truncated"], version_range=">0.11.0",
        model="openai/gpt-oss-120b"),
    "vllm-14447-v0-profile-summary-workers": dict(
        engine="vllm", starts=True, kv_gib=1.57, weights_gib=21.21, codes=[], version_range="<0.11.0",
        checks={"VllmWorkerProcess pid=507 KV cache memory (profiling summary)": 1.57,
                "VllmWorkerProcess pid=577 KV cache memory (profiling summary)": 1.57,
                "VllmWorkerProcess pid=507 requested memory": 23.34},
        extra={"gpu_memory_utilization": 0.99}),
    "vllm-25350-fp8kv-100k": dict(
        engine="vllm", starts=True, tokens=230528, kv_gib=10.55, codes=[], version_range="<0.28.0",
        checks={"maximum concurrency": 2.31}, extra={"max_model_len": 100000, "max_concurrency": 2.31}),
    "vllm-25350-fp8kv-221k-fail": dict(
        engine="vllm", starts=False, codes=["kv-sizing-failed"], error="max seq len (221000)",
        fix=[("max_model_len", 122080)], message="needs 10.12 GiB of KV but only 5.59 GiB"),
    # "Free memory on device (free/total GiB) on startup is less than desired GPU memory utilization (util, req GiB)"
    "vllm-20305-v091-free-memory": dict(
        engine="vllm", starts=False, codes=["free-memory-below-utilization"], error="(31.44/47.38 GiB)",
        fix=[("gpu_memory_utilization", 0.65)], extra={"failed_at": "init"}, message="only 31.44 of 47.38 GiB",
        traceback_lines=3),
    "vllm-33297-ci-caret-free-memory": dict(
        engine="vllm", starts=False, codes=["free-memory-below-utilization"], error="(1.54/22.05 GiB)",
        fix=[("gpu_memory_utilization", 0.05)], extra={"failed_at": "init"}, message="requested 0.9 × total = 19.84 GiB"),
    "vllm-23192-mixtral-h200-free-memory": dict(
        engine="vllm", starts=False, codes=["free-memory-below-utilization"], error="(7.34/139.72 GiB)",
        extra={"failed_at": "init"}, message="only 7.34 of 139.72 GiB", traceback_lines=3),
    "vllm-pytorch175666-free-memory-cuda1": dict(
        engine="vllm", starts=False, codes=["free-memory-below-utilization"], error="cuda:1 (19.77/22.05 GiB)",
        fix=[("gpu_memory_utilization", 0.88)], extra={"failed_at": "init"}),
    "vllm-13061-v0-r1-distill-14b-2x4090": dict(
        engine="vllm", starts=False, tokens=None, weights_gib=13.9476, codes=["kv-sizing-failed"], version_range="<0.11.0",
        error="(81536)", fix=[("max_model_len", 81536)], message="max_model_len 131,072 needs more than the 81,536 tokens"),
    "vllm-club3090-1087-2x5090-startup-summary": dict(
        engine="vllm", starts=True, kv_gib=12.26, codes=[], checks={"TP0 requested memory": 28.89},
        extra={"gpu_memory_utilization": 0.92}, decision={"init_free_bytes": gib(30.27), "cuda_graph_bytes": gib(0.09)}),
    "vllm-17469-v085-qwen3-tp4-compose-rank": dict(
        engine="vllm", starts=None, weights_gib=14.2474, codes=["log-truncated"], version_range="<0.14.0"),
    "vllm-12569-v1-070-llama70b-w8a8": dict(
        engine="vllm", starts=True, tokens=1381 * 16, weights_gib=67.7229, codes=[], version_range="<0.11.0",
        model="neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", checks={"maximum concurrency": 10.79},
        extra={"num_gpu_blocks": 1381, "max_model_len": 2048, "gpu_memory_utilization": 0.98, "max_concurrency": 10.79}),
    "vllm-gaie550-k8s-v0-profile": dict(
        engine="vllm", starts=True, tokens=7191 * 16, kv_gib=56.18, weights_gib=12.55, codes=[], version_range="<0.11.0",
        checks={"worker KV cache memory (profiling summary)": 56.18, "worker requested memory": 71.27},
        extra={"num_gpu_blocks": 7191, "gpu_memory_utilization": 0.9}),
    "vllm-29335-v1-tinyllama-class": dict(
        engine="vllm", starts=True, tokens=1587648, kv_gib=33.31, weights_gib=2.0513, codes=[],
        version_range="<0.28.0,>0.11.0", checks={"maximum concurrency": 775.22},
        extra={"max_model_len": 2048, "max_concurrency": 775.22}),
    "vllm-winbuild4-cuda-graph-pool": dict(
        engine="vllm", starts=True, tokens=396928, codes=[], version_range="<0.28.0",
        checks={"maximum concurrency": 3.03}, extra={"max_model_len": 131072, "max_concurrency": 3.03},
        decision={"cuda_graph_bytes": gib(0.11)}),
    "vllm-club3090-612-v0240-out-of-order": dict(
        engine="vllm", starts=True, tokens=567978, kv_gib=5.98, mrr=1, codes=["kv-tokens-from-concurrency"],
        version_range="<0.28.0", checks={"maximum concurrency": 4.33},
        extra={"max_model_len": 131072, "max_concurrency": 4.33}),
}


def report_for(case_id: str):
    return diagnose_path(str(REAL / CASES[case_id]["fixture"]))


def test_every_fixture_has_a_case_and_an_expectation():
    logs = {p.name for p in REAL.glob("*.log")}
    assert logs == {c["fixture"] for c in CASES.values()}
    assert set(EXPECT) == set(CASES)
    for c in CASES.values():
        assert c["source"].count("https://github.com/") == 1, c["id"]
        assert c["engine"] in ("sglang", "vllm") and c["observed"], c["id"]
        assert c["id"].startswith(c["engine"]), c["id"]


@pytest.mark.parametrize("case_id", IDS)
def test_figures_recovered_exactly(case_id):
    exp = EXPECT[case_id]
    r = report_for(case_id)
    tl = r.timeline
    assert tl.engine == exp["engine"] and tl.source == "log"
    assert tl.starts is exp["starts"]
    assert tl.kv_cache_tokens == exp.get("tokens")
    if "kv_gib" in exp:
        assert tl.kv_cache_bytes == gib(exp["kv_gib"])
    if "weights_gib" in exp:
        assert tl.weights_bytes == gib(exp["weights_gib"])
    if "mrr" in exp:
        assert tl.max_running_requests == exp["mrr"]
    assert codes(r) == sorted(exp["codes"])
    if "version_range" in exp:
        assert tl.extra.engine_version_range == exp["version_range"]
    if "model" in exp:
        assert tl.model == exp["model"]
    for name, value in exp.get("checks", {}).items():
        c = check(r, name)
        assert c.agrees, c
        assert c.recomputed == value
    for key, value in exp.get("extra", {}).items():
        assert tl.extra.to_dict().get(key) == value, key
    if "effective" in exp:
        assert tl.extra.effective_mem_fraction_static == exp["effective"]
    if "error" in exp:
        assert exp["error"] in (tl.error or "")
    if "message" in exp:
        assert any(exp["message"] in f.message for f in r.findings), [f.message for f in r.findings]
    for flag, value in exp.get("fix", []):
        assert (flag, value) in [(f.flag, f.value) for f in tl.fix]
    # per-rank free memory exactly as printed (GiB → bytes of the 2-decimal figure)
    for rank, value in exp.get("pre", {}).items():
        assert phases(r, rank)["load_weights"][0] == gib(value)
    for rank, value in exp.get("post", {}).items():
        assert phases(r, rank)["load_weights"][1] == gib(value)
    for rank, value in exp.get("pool_end", {}).items():
        ph = phases(r, rank)
        end = ph.get("req_to_token_pool", ph.get("kv_cache"))
        assert end[1] == gib(value), (rank, ph)
    for rank, value in exp.get("init", {}).items():
        assert phases(r, rank)["init"][1] == gib(value)
    for rank, value in exp.get("graph_begin", {}).items():
        assert phases(r, rank)["cuda_graph"][0] == gib(value)
    if "traceback_lines" in exp:
        assert r.stats.traceback_lines == exp["traceback_lines"] and r.stats.unparsed == 0
    rank0 = tl.ranks[0].decision.to_dict() if tl.ranks else {}
    for key, value in exp.get("decision", {}).items():
        assert rank0.get(key) == value


@pytest.mark.parametrize("case_id", IDS)
def test_text_json_and_exit_code(case_id, capsys):
    r = report_for(case_id)
    text = render_text(r)
    assert text.startswith(f"engine   {CASES[case_id]['engine']}")
    json.dumps(r.to_dict())
    rc = main(["doctor", str(REAL / CASES[case_id]["fixture"])])
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("engine   ")
    assert rc == (1 if any(f.severity == "error" for f in r.findings) else 0)


@pytest.mark.parametrize("case_id", IDS)
def test_every_printed_number_comes_from_the_log_text(case_id):
    """The observed figures in cases.jsonl are copied from the fixture: every number listed appears in it."""
    import re

    text = (REAL / CASES[case_id]["fixture"]).read_text(encoding="utf-8")
    numbers = set(re.findall(r"-?\d[\d,]*(?:\.\d+)?", text))
    numbers |= {n.replace(",", "") for n in numbers}

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from walk(x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v
        elif isinstance(v, str):
            m = re.match(r"^(-?\d[\d,]*(?:\.\d+)?)", v)
            if m:
                yield m.group(1)

    for value in walk(CASES[case_id]["observed"]):
        s = value if isinstance(value, str) else (f"{value}" if isinstance(value, int) else None)
        if s is None:
            continue
        assert s in numbers or s.replace(",", "") in numbers, (case_id, value)


# ---------------------------------------------------------------------------------------------
# With the model from the catalog: the engine's derived numbers from the exact cell size
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case_id,model,assume,cell,printed", [
    # Qwen3-14B: 40 layers × 8 KV heads × (128+128) × 2 B = 163,840 B; (91,749 + 1) × 163,840 B = 14.00 GiB
    ("sglang-xinference3481-qwen3-14b", "Qwen/Qwen3-14B", {}, 163840, 14.0),
    # Qwen3-32B TP4: 64 × 2 heads/rank × 256 × 2 B = 65,536 B; (2,206,208 + 1) × 65,536 B = 134.66 GiB
    ("sglang-pr22537-qwen3-b200-tp4", "Qwen/Qwen3-32B", {"tp_size": 4}, 65536, 134.66),
    # Qwen3-30B-A3B TP2: 48 × 2 heads/rank × 256 × 2 B = 49,152 B; (1,106,304 + 1) × 49,152 B = 50.64 GiB
    ("sglang-pr27537-musa-tp2", "Qwen/Qwen3-30B-A3B-FP8", {"tp_size": 2}, 49152, 50.64),
    # the model is not named; the figures fit Llama-3.1-70B at TP8 (1 KV head/rank): 80 × 256 × 2 B = 40,960 B;
    # (2,795,207 + 1) × 40,960 B = 106.62 GiB
    ("sglang-pr11716-tp8", "meta-llama/Llama-3.1-70B-Instruct", {"tp_size": 8}, 40960, 106.62),
    # Qwen3-8B: 36 × 8 × 256 × 2 B = 147,456 B; page 64 from the printed trtllm_mha rule: (992,896 + 64) × 147,456 B
    ("sglang-skill-clean-startup-qwen3-8b-b200", "Qwen/Qwen3-8B", {}, 147456, 136.36),
])
def test_sglang_kv_size_from_the_catalog_cell(case_id, model, assume, cell, printed):
    text = (REAL / CASES[case_id]["fixture"]).read_text(encoding="utf-8")
    r = diagnose_text(text, model=model, assume=assume)
    assert r.timeline.kv_cell_bytes == cell
    c = check(r, "KV size")
    assert c.agrees and c.printed == printed and c.recomputed == printed


def test_grok2_npu_tp16_every_rank_is_read():
    r = report_for("sglang-pr29853-grok2-npu-tp16")
    assert len(r.timeline.ranks) == 16
    assert r.flags["tp_size"] == 16 and r.flags["mem_fraction_static"] == 0.8 and r.flags["device"] == "npu"
    assert r.flag_sources["mem_fraction_static"] == "launch command"
    # every rank: begin − end = the printed mem usage (TP14 loaded 35.51 GiB, the others 35.57)
    assert sum(c.name.endswith("weights mem usage") and c.agrees for c in r.checks) == 16
    assert r.stats.unparsed == 0 and r.stats.request_lines == 2
    assert r.timeline.extra.pre_model_load_memory_bytes == gib(60.81)  # the MIN over ranks


def test_vllm_model_from_the_load_line_and_caret_colours():
    r = report_for("vllm-33155-gptoss120b-h100-0141-caret-ansi")
    assert r.flag_sources["model"] == "'Starting to load model' line"
    assert r.stats.unparsed == 0 and r.timeline.ranks[0].decision.weights_bytes == gib(64.38)


def test_vllm_out_of_order_paste_is_not_a_restart():
    r = report_for("vllm-club3090-612-v0240-out-of-order")
    assert r.flags["kv_cache_dtype"] == "fp8" and r.flag_sources["max_model_len"] == "non-default args"
    assert "multiple-starts" not in codes(r) and r.timeline.kv_cache_tokens == 567978


def test_vllm_worker_rank_prefixes_and_startup_summary():
    r = report_for("vllm-17469-v085-qwen3-tp4-compose-rank")
    assert [x.decision.rank_label for x in r.timeline.ranks] == ["rank0", "rank1", "rank2", "rank3"]
    assert "  ranks 0-3 [rank0-3 identical]" in render_text(r)
    r = report_for("vllm-club3090-1087-2x5090-startup-summary")
    tp1 = phases(r, 1)
    assert tp1["init"][1] == gib(30.5)
    assert tp1["load_weights"] == (gib(30.5), gib(30.5) - gib(15.05))  # consumed (weights + non-torch)
    assert r.stats.unparsed == 0


def test_vllm_v0_blocks_without_the_hash():
    # the user's copy reads "GPU blocks: 1952, # CPU blocks: 2048" (no leading "# ")
    r = report_for("vllm-10517-llama31-8b-3090-20k")
    assert r.stats.unparsed == 0 and r.timeline.kv_cache_tokens == 31232


# ---------------------------------------------------------------------------------------------
# `kvscope plan` in measured mode against the printed numbers
# ---------------------------------------------------------------------------------------------

def plan_json(*argv: str) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["plan", *argv, "--json"])
    assert rc in (0, 1), buf.getvalue()
    return json.loads(buf.getvalue())


def sglang_plan_tokens(model: str, version: str, gpu: str, tp: int, pres: list[float], posts: list[float]) -> list[int]:
    return [plan_json(model, "--engine-version", version, "--gpu", gpu, "--tp", str(tp),
                      "--pre-load-free-gib", f"{p:.3f}", "--post-load-free-gib", f"{a:.3f}")["kv_cache_tokens"]
            for p in pres for a in posts]


def test_plan_sglang_qwen3_14b_measured_matches_within_rounding():
    # 0.4.6 (May 2025, format range <0.5.9): default mem_fraction_static 0.88 on a 48 GB GPU.
    # pre = 19.67 + 27.57 (derived, ±0.01), post = 19.67 (±0.005): printed 91,749 lies inside.
    # 47.24 GiB free before the weights: a 48 GiB-class card (an L40S has 44.99 GiB in all)
    d = plan_json("Qwen/Qwen3-14B", "--engine-version", "0.4.6.post5", "--gpu", "rtx-a6000",
                  "--pre-load-free-gib", "47.24", "--post-load-free-gib", "19.67")
    assert d["mem_fraction_static"] == 0.88 and d["kv_cell_bytes"] == 163840
    assert d["kv_cache_tokens"] == 91758  # the central figures; printed 91,749
    toks = sglang_plan_tokens("Qwen/Qwen3-14B", "0.4.6.post5", "rtx-a6000", 1, [47.23, 47.25], [19.665, 19.675])
    assert min(toks) <= 91749 <= max(toks)


def test_plan_sglang_qwen3_32b_b200_tp4_within_the_rank_spread():
    # TP0 printed post-load 160.78 and Memory pool end 25.40, TP1/TP2 25.37: their post-load free memory
    # was ≈0.03 GiB lower and SGLang sizes every rank by the MIN. Default fraction 0.852 (B200, TP4).
    d = plan_json("Qwen/Qwen3-32B", "--engine-version", "0.5.13", "--gpu", "b200", "--tp", "4",
                  "--pre-load-free-gib", "176.28", "--post-load-free-gib", "160.78")
    assert d["mem_fraction_static"] == 0.852 and d["kv_cell_bytes"] == 65536
    assert d["kv_cache_tokens"] == 2206720  # TP0's own figures: 512 tokens (8 pages of 64) more than printed
    toks = sglang_plan_tokens("Qwen/Qwen3-32B", "0.5.13", "b200", 4, [176.27, 176.29],
                              [160.78 - 0.03 - 0.005, 160.78 + 0.005])
    assert min(toks) <= 2206208 <= max(toks)


def test_plan_vllm_qwen3_14b_available_kv():
    d = plan_json("Qwen/Qwen3-14B", "--engine", "vllm", "--gpu", "h100-sxm", "--available-kv-cache-gib", "6.51",
                  "--max-model-len", "32768")
    assert d["kv_cache_tokens"] == 42656 and d["num_gpu_blocks"] == 2666
    assert round(d["max_concurrency"], 2) == 1.30


def test_plan_vllm_llama31_8b_v0_blocks_within_rounding():
    # V0: 3.81 GiB printed (±0.005) / 2 MiB per 16-token block -> 1,948..1,953 blocks; printed 1,952
    blocks = [plan_json("meta-llama/Llama-3.1-8B-Instruct", "--engine", "vllm", "--engine-version", "0.6.4",
                        "--gpu", "rtx-3090", "--available-kv-cache-gib", f"{a:.3f}", "--max-model-len", "20000")["num_gpu_blocks"]
              for a in (3.805, 3.815)]
    assert blocks[0] <= 1952 <= blocks[1]


def test_plan_vllm_gpt_oss_120b_reproduces_the_error():
    # the user's flags (gpu_memory_utilization 0.95, max_num_batched_tokens 1024) at a 0.11 vLLM:
    # 18 full layers × 2,048 B × 131,072 tokens + the sliding-window group's blocks = 4.54 GiB
    d = plan_json("openai/gpt-oss-120b", "--engine", "vllm", "--engine-version", "0.11.0", "--gpu", "h100-sxm",
                  "--gpu-memory-utilization", "0.95", "--max-num-batched-tokens", "1024",
                  "--available-kv-cache-gib", "1.71", "--max-model-len", "131072")
    assert d["starts"] is False
    assert "(4.54 GiB KV cache is needed, which is larger than the available KV cache memory (1.71 GiB)" in d["error"]
    assert "models's max seq len (131072)" in d["error"]  # 0.11's spelling, as in the log


def test_contradicting_formats_give_no_version_range():
    # a user's copy of a 0.5.2x line stripped of "elapsed=…, type=…" no longer dates the log as <0.5.9
    r = report_for("sglang-inferencex2128-dsv4pro-h200-no-kv-memory")
    assert "engine_version_conflict" not in r.timeline.extra.to_dict()
    text = (REAL / CASES["sglang-2468-mistral7b-2024-no-mem-usage"]["fixture"]).read_text(encoding="utf-8")
    mixed = text + "[2026-07-01 15:19:55 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 10, K size: 0.01 GB, V size: 0.01 GB\n"
    r = diagnose_text(mixed)  # a 2024 log with a 0.5.10+ line appended: no release prints both
    assert "engine_version_range" not in r.timeline.extra.to_dict() and r.timeline.extra.engine_version_conflict
    assert "the line formats disagree" in render_text(r)


def test_text_collapses_identical_ranks_and_checks():
    text = render_text(report_for("sglang-pr11716-tp8"))
    assert "  ranks 1,3,5-6 [TP1,3,5-6 identical]" in text and "  rank 7 [TP7]" in text
    text = render_text(report_for("sglang-pr29853-grok2-npu-tp16"))
    assert "TP0-13,15 weights mem usage: printed 35.57" in text and "TP14 weights mem usage: printed 35.51" in text
    assert "rank 14 [TP14]" in text  # every rank printed slightly different free memory: nothing to collapse


def test_custom_allreduce_forced_on_pcie(origin_log):
    """The origin case's team forced custom all-reduce on over 8 PCIe RTX PRO 6000s. SGLang prints
    'Custom allreduce is disabled …' on such GPUs unless its gate was bypassed: the same start without
    those lines, with the GPU named, is flagged; with them it is the ordinary info."""
    forced = "\n".join(line for line in origin_log.splitlines() if "Custom allreduce" not in line)
    r = diagnose_text(forced, assume={"gpu": "rtx-pro-6000"})
    (f,) = [f for f in r.findings if f.code == "custom-allreduce"]
    assert f.severity == "warning" and "forced on over 8 PCIe-only" in f.message
    assert "--disable-custom-all-reduce" in f.fix
    r = diagnose_text(origin_log, assume={"gpu": "rtx-pro-6000"})
    assert [f.severity for f in r.findings if f.code == "custom-allreduce"] == ["info"]
    r = diagnose_text(forced, assume={"gpu": "h100-sxm"})  # NVLink: custom AR is on by design
    assert "custom-allreduce" not in codes(r)
    r = diagnose_text(forced)  # GPU unknown: no claim
    assert "custom-allreduce" not in codes(r)


def test_npu_fraction_mismatch_is_information_only():
    r = report_for("sglang-pr29853-grok2-npu-tp16")
    (f,) = [f for f in r.findings if f.code == "effective-fraction-mismatch"]
    assert f.severity == "info" and "device=npu" in f.message


@pytest.mark.parametrize("case_id,model,assume,name,printed,lo,hi,version", [
    # Qwen3-14B: 2,621,440 B per 16-token block; 6.51 GiB ±0.005 -> 2,664..2,668 blocks -> 42,624..42,688 tokens
    ("vllm-lmcache1739-qwen3-14b", "Qwen/Qwen3-14B", {}, "GPU KV cache size from the model", 42656, 42624, 42688, "0.24.0"),
    # V0 (format range <0.11): 3.81 GiB ±0.005 / 2 MiB per block
    ("vllm-10517-llama31-8b-3090-20k", "meta-llama/Llama-3.1-8B-Instruct", {}, "num_gpu_blocks from the model",
     1952, 1948, 1953, "0.10.1"),
])
def test_vllm_capacity_through_the_engine_module(case_id, model, assume, name, printed, lo, hi, version):
    text = (REAL / CASES[case_id]["fixture"]).read_text(encoding="utf-8")
    r = diagnose_text(text, model=model, assume=assume)
    c = check(r, name)
    assert c.agrees and c.printed == printed and c.recomputed == [lo, hi]
    assert r.timeline.extra.vllm_capacity_version == version
    assert "capacity_from_available" in c.how


def test_vllm_needed_kv_for_one_request_through_the_engine_module():
    # gpt-oss-120b at the user's --max-num-batched-tokens 1024 (in the thread, not in the excerpt):
    # 18 full layers × 2,048 B × 131,072 + the sliding-window group's 73 blocks = 4.54 GiB, as printed.
    # "models's" dates the text before 0.22; without the flag vLLM's default batch widens the window group.
    text = (REAL / CASES["vllm-27508-gptoss120b-h100-fail"]["fixture"]).read_text(encoding="utf-8")
    r = diagnose_text(text, model="openai/gpt-oss-120b", assume={"max_num_batched_tokens": 1024})
    assert r.timeline.extra.engine_version_range == "<0.22.0"
    c = check(r, "KV needed for one max_model_len request")
    assert c.agrees and c.printed == 4.54 and c.recomputed == 4.54
    r = diagnose_text(text, model="openai/gpt-oss-120b")
    c = check(r, "KV needed for one max_model_len request")
    assert not c.agrees and "max_num_batched_tokens not in the log" in c.how
    assert "engine-arithmetic-mismatch" not in codes(r)  # an assumed default is not the engine's arithmetic


@pytest.mark.parametrize("case_id", ["sglang-pr22537-qwen3-b200-tp4", "sglang-pr29853-grok2-npu-tp16",
                                     "vllm-lmcache1739-qwen3-14b", "vllm-gaie550-k8s-v0-profile"])
def test_real_lines_survive_common_wrappers(case_id):
    """The same real lines as they arrive through other pipes: docker compose / kubectl prefixes,
    CRLF, real ANSI colours, and SGLang prefixes whose timestamps were cut: same figures."""
    import re

    text = (REAL / CASES[case_id]["fixture"]).read_text(encoding="utf-8")
    base = report_for(case_id)
    variants = {
        "compose": "".join(f"sglang-1  | {line}\n" for line in text.splitlines()),
        "crlf": text.replace("\n", "\r\n"),
        "ansi": "".join(f"\x1b[36m{line}\x1b[0m\n" for line in text.splitlines()),
        "no-timestamps": re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "[", text),
    }
    for name, variant in variants.items():
        r = diagnose_text(variant)
        assert r.timeline.kv_cache_tokens == base.timeline.kv_cache_tokens, name
        assert r.timeline.kv_cache_bytes == base.timeline.kv_cache_bytes, name
        assert [x.decision.rank_label for x in r.timeline.ranks] == \
            [x.decision.rank_label for x in base.timeline.ranks], name
        assert codes(r) == codes(base), name


def test_local_model_directories_map_to_the_catalog():
    from kvscope.doctor import catalog_id_for

    # paths as they appear in the real threads (vllm#21348's command, HF cache dirs, local checkpoints)
    assert catalog_id_for("/path/to/Qwen3-235B-A22B-FP8") == "Qwen/Qwen3-235B-A22B-FP8"
    assert catalog_id_for("/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct") == \
        "meta-llama/Llama-3.1-8B-Instruct"
    assert catalog_id_for("qwen/qwen3-14b") == "Qwen/Qwen3-14B"
    assert catalog_id_for("/data/weights/grok-2") is None  # not bundled: no guess
    assert catalog_id_for("~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4") is None
    text = (REAL / CASES["vllm-lmcache1739-qwen3-14b"]["fixture"]).read_text(encoding="utf-8")
    r = diagnose_text(text, model="/models/Qwen3-14B")
    assert r.timeline.extra.model_catalog_id == "Qwen/Qwen3-14B"
    assert check(r, "GPU KV cache size from the model").agrees


def test_sglang_profile_window_allows_the_setup_before_load_begin():
    # SGLang's clean-startup log (B200, default fraction 0.854 = round((gpu − reserved)/gpu, 3)):
    # 992,896 tokens need a baseline 0.09–0.14 GiB above the printed "Load weight begin" 177.57 GiB —
    # the engine measures it at the end of init (model_runner.py @ v0.5.10; docs/doctor.md, mismatch 5).
    text = (REAL / CASES["sglang-skill-clean-startup-qwen3-8b-b200"]["fixture"]).read_text(encoding="utf-8")
    r = diagnose_text(text, assume={"mem_fraction_static": 0.854})
    c = check(r, "max_total_num_tokens from the profile")
    assert c.agrees and c.recomputed == [992832, 993088] and "end of init" in c.how
    assert "engine-arithmetic-mismatch" not in codes(r)
