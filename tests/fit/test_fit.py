"""kvscope fit: every answer is checked by feeding it back into plan (minimality on the knob's grid),
the refusals carry the engine's reason, the origin case gives SGLang's own numbers, JSON round-trips,
bad input is one line (exit 2) and "nothing fits" is an answer (exit 1)."""

from __future__ import annotations

import json
import math
import shlex
import struct
from dataclasses import replace
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.cli import main
from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.plan import Measured, plan_sglang
from kvscope.engines.vllm.args import VllmFlags
from kvscope.engines.vllm.plan import plan_vllm
from kvscope.engines.vllm.release import version_traits
from kvscope.fit import FitRequest, _first_true, _last_true, candidates, fit, fit_result_from_dict
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec
from kvscope.report.fit_text import render_fit
from kvscope.units import GiB, gib_to_bytes

STEP = 0.01


@lru_cache(maxsize=None)
def _spec(model):
    return load_spec(model)[0]


@lru_cache(maxsize=None)
def _fit(model, gpu, gpus, context, concurrency, engine="sglang", kv=None, tp=None, pp=None, dp=None,
         optimize="throughput"):
    return fit(FitRequest(_spec(model), get_gpu(gpu), gpus, context, concurrency, engine=engine, kv_cache_dtype=kv,
                          tp=tp, pp=pp, dp=dp, model_ref=model, gpu_ref=gpu, optimize=optimize))


def _sglang_at(model, gpu, o, context, concurrency, frac, measured=None):
    c = o.candidate
    running = math.ceil(concurrency / c.dp) * (c.dp if c.dp_attention else 1)
    a = SGLangArgs(tp_size=c.tp, pp_size=c.pp, dp_size=c.dp, enable_dp_attention=c.dp_attention,
                   kv_cache_dtype=c.kv_cache_dtype, context_length=context, max_running_requests=running,
                   mem_fraction_static=round(frac, 6))
    return plan_sglang(_spec(model), get_gpu(gpu), a, None, measured)


def _vllm_at(model, gpu, o, context, concurrency, util):
    c = o.candidate
    f = VllmFlags(tensor_parallel_size=c.tp, pipeline_parallel_size=c.pp, data_parallel_size=c.dp,
                  kv_cache_dtype=c.kv_cache_dtype, max_model_len=context,
                  max_num_seqs=math.ceil(concurrency / c.dp), gpu_memory_utilization=round(util, 6))
    return plan_vllm(_spec(model), get_gpu(gpu), f)


def _headroom(t):
    return min(r.decision.runtime_headroom_bytes_estimated for r in t.ranks)


# ------------------------------------------------------------------------------------------------
# the search primitive


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 40), st.integers(0, 42), st.one_of(st.none(), st.integers(-5, 50)))
def test_first_true_matches_brute_force(lo, threshold, guess):
    hi = lo + 30
    pred = lambda k: k >= threshold  # noqa: E731
    want = next((k for k in range(lo, hi + 1) if pred(k)), None)
    assert _first_true(lo, hi, pred, guess) == want
    pred2 = lambda k: k <= threshold  # noqa: E731
    want2 = next((k for k in range(hi, lo - 1, -1) if pred2(k)), None)
    assert _last_true(lo, hi, pred2, guess) == want2


# ------------------------------------------------------------------------------------------------
# SGLang: the fraction is the smallest on the grid, and the upper end is the last with headroom >= 0

SGLANG_CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100", 1, 32768, 8),
    ("Qwen/Qwen3-32B", "h100", 8, 32768, 16),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16),
    ("moonshotai/Kimi-K2.5", "rtx-pro-6000", 8, 32768, 16),
]


@pytest.mark.parametrize("model,gpu,gpus,context,concurrency", SGLANG_CASES)
def test_sglang_fraction_is_minimal_and_max_is_last_with_headroom(model, gpu, gpus, context, concurrency):
    res = _fit(model, gpu, gpus, context, concurrency)
    assert res.fits and res.target_tokens == context * concurrency
    for o in res.options[:8]:  # the best ones (all of them are searched the same way)
        c = o.candidate
        per = math.ceil(concurrency / c.dp)
        t = _sglang_at(model, gpu, o, context, concurrency, o.fraction)
        assert t.starts and t.kv_cache_tokens == o.kv_cache_tokens_floor >= context * per, o.candidate.label
        assert t.max_running_requests >= per
        below = _sglang_at(model, gpu, o, context, concurrency, o.fraction - STEP)
        assert not below.starts or below.kv_cache_tokens < context * per, o.candidate.label
        top = _sglang_at(model, gpu, o, context, concurrency, o.fraction_max)
        assert top.kv_cache_tokens == o.kv_cache_tokens_max and _headroom(top) >= 0
        if o.fraction_max + STEP < 1:
            assert _headroom(_sglang_at(model, gpu, o, context, concurrency, o.fraction_max + STEP)) < 0
        assert o.headroom == round(o.kv_cache_tokens_max / (context * per), 4) >= 1
        assert o.flags["--mem-fraction-static"] == o.recommended and o.flags["--context-length"] == context
        # recommended: SGLang's default for the layout when the target fits there, else the floor
        rec = _sglang_at(model, gpu, o, context, concurrency, o.recommended)
        assert rec.kv_cache_tokens == o.kv_cache_tokens >= context * per
        assert o.recommended == max(o.fraction, o.engine_default) or o.recommended == o.engine_default
        assert o.recommended >= o.engine_default - 1e-9
    # ranked: estimated decode throughput at the target, fastest first
    keys = [-o.speed.decode_tokens_per_s for o in res.options]
    assert keys == sorted(keys)


def test_sglang_llama8b_one_h100_best_and_command():
    res = _fit("meta-llama/Llama-3.1-8B-Instruct", "h100", 1, 32768, 8)
    best = res.best
    assert best.candidate.label == "TP1" and best.candidate.num_gpus == 1
    assert best.command == ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                            f"--tp-size 1 --mem-fraction-static {best.recommended} --context-length 32768 "
                            "--max-running-requests 8")
    assert "pre_model_load_memory" in best.estimated and "weights" in best.estimated


def test_llama70b_layouts_rejected_with_reasons():
    res = _fit("meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16)
    why = {r.candidate.label: r.reason for r in res.rejected}
    from kvscope.model.weights import weights_per_rank
    w1 = weights_per_rank(load_spec("meta-llama/Llama-3.1-70B-Instruct")[0], tp=1, engine="sglang").per_rank_bytes
    assert why["TP1"].startswith(f"weights {w1 / 2**30:.1f} GiB per rank leave no KV budget")
    assert 131 < w1 / 2**30 < 132  # 70.55 B params x 2 B (+ RoPE cache and allocator rounding)
    assert "(est.)" in why["TP1"]
    assert "KV tokens < 524,288 needed" in why["TP2"]
    assert {o.candidate.num_gpus for o in res.options} == {4, 8}
    assert res.best.candidate.label == "TP8"  # fastest decode at the target (TP4 DP2 does not hold 8 requests each)
    assert _fit("meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16,
                optimize="gpus").best.candidate.num_gpus == 4


def test_heads_not_divisible_is_rejected_with_engine_message():
    sg = _fit("Qwen/Qwen2.5-7B-Instruct", "h100", 8, 32768, 8)
    assert [r.reason for r in sg.rejected if r.candidate.label == "TP8"] == [
        "--tp: num_attention_heads (28) must be divisible by attention tp size (8) (use a --tp that divides 28)"]
    vl = _fit("Qwen/Qwen2.5-7B-Instruct", "h100", 8, 32768, 8, engine="vllm")
    reasons = [r.reason for r in vl.rejected if r.candidate.label == "TP8"]
    assert reasons == ["--tensor-parallel-size: Total number of attention heads (28) must be divisible by tensor "
                       "parallel size (8). (pick a TP size that divides the attention heads)"]
    assert all(o.candidate.tp != 8 for o in sg.options + vl.options)


def test_dp_replicas_split_the_requests():
    res = _fit("Qwen/Qwen2.5-7B-Instruct", "h100", 8, 32768, 200)
    o = next(o for o in res.options if o.candidate.label == "TP1 DP8")
    assert o.flags["--dp-size"] == 8 and o.flags["--max-running-requests"] == 25  # per replica
    t = _sglang_at("Qwen/Qwen2.5-7B-Instruct", "h100", o, 32768, 200, o.fraction)
    assert t.kv_cache_tokens >= 25 * 32768 > _sglang_at("Qwen/Qwen2.5-7B-Instruct", "h100", o, 32768, 200,
                                                       o.fraction - STEP).kv_cache_tokens
    assert o.kv_cache_tokens_floor == t.kv_cache_tokens
    rec = _sglang_at("Qwen/Qwen2.5-7B-Instruct", "h100", o, 32768, 200, o.recommended)
    assert o.concurrency == round(rec.kv_cache_tokens * 8 / 32768, 4)  # at the command's value


def test_kimi_dp_attention_flags_per_version():
    res = _fit("moonshotai/Kimi-K2.5", "rtx-pro-6000", 8, 32768, 16)
    o = next(o for o in res.options if o.candidate.label == "TP8 DP-attn8")
    assert o.flags["--attn-dp-size"] == 8 and o.flags["--max-running-requests"] == 16  # SGLang divides by 8
    assert "--dp 8 --enable-dp-attention" in o.plan_command
    old = fit(FitRequest(_spec("moonshotai/Kimi-K2.5"), get_gpu("rtx-pro-6000"), 8, 32768, 16, version="0.5.9",
                         tp=8, pp=1, dp=None, kv_cache_dtype="auto"))
    o9 = next(o for o in old.options if o.candidate.dp_attention)
    assert o9.flags["--dp-size"] == 8 and o9.flags["--enable-dp-attention"] is True
    assert "--attn-dp-size" not in o9.flags


# ------------------------------------------------------------------------------------------------
# The origin case (docs/origin.md): measured 94 / 21.7 GiB on 8x RTX PRO 6000, TP8


def test_origin_case_with_measured_inputs_exact():
    measured = Measured((gib_to_bytes(94),), (gib_to_bytes(21.7),))
    res = fit(FitRequest(_spec("moonshotai/Kimi-K2.5"), get_gpu("rtx-pro-6000"), 8, 32768, 4, tp=8, pp=1, dp=1,
                         kv_cache_dtype="auto", measured=measured, model_ref="moonshotai/Kimi-K2.5",
                         gpu_ref="rtx-pro-6000"))
    assert [o.candidate.label for o in res.options] == ["TP8"]
    best = res.best
    # SGLang's formula by hand: rest = avail - pre (1 - f) - 100 MB VLM reservation; tokens = rest // 70272.
    f32 = lambda b: struct.unpack("f", struct.pack("f", float(b)))[0] / GiB  # noqa: E731
    pre, avail = f32(gib_to_bytes(94)), f32(gib_to_bytes(21.7))
    tokens = lambda f: int((avail - pre * (1 - f) - 100 / 1024) * GiB) // 70272  # noqa: E731
    assert tokens(0.86) == 128997 < 131072 <= tokens(0.87) == 143360
    assert (best.fraction, best.kv_cache_tokens, best.tokens_per_step) == (0.87, 143360, 14363)
    assert best.estimated == ("runtime_headroom (fraction_max)",)  # everything else was measured
    assert best.plan_command.endswith("--pre-load-free-gib 94 --post-load-free-gib 21.7")


def test_origin_case_predicted_rejects_small_tp_and_bf16_tp8():
    res = _fit("moonshotai/Kimi-K2.5", "rtx-pro-6000", 8, 32768, 16)
    why = {r.candidate.label: r.reason for r in res.rejected}
    for label in ("TP1", "TP2", "TP4"):
        assert "leave no KV budget" in why[label], label
    assert "KV tokens < 524,288 needed" in why["TP8"]
    assert "TP8 fp8_e4m3 KV" in {o.candidate.label for o in res.options}
    # TP within the node before PP: on 8 GPUs TP8 fills the node, so no PP layout is tried
    assert not [c for c in [*res.rejected, *res.options] if c.candidate.pp > 1]
    # DP-attention (MLA) or TP8 first, by estimated throughput
    assert res.best.candidate.tp == 8 and res.best.speed.decode_tokens_per_s > 0


def test_deepseek_v3_8x_h200_first_option_is_tp8_or_dp_attention():
    res = _fit("deepseek-ai/DeepSeek-V3", "h200", 8, 32768, 32)
    best = res.best
    assert best.candidate.tp == 8 and best.candidate.pp == 1 and best.speed.decode_tokens_per_s > 0
    assert best.candidate.label == "TP8 DP-attn8"  # each worker reads 1/8 of the MLA latent KV
    speeds = [o.speed.decode_tokens_per_s for o in res.options]
    assert speeds == sorted(speeds, reverse=True)
    # the command keeps SGLang's default for the layout (the target fits there); the floor is apart
    assert best.recommended == best.engine_default >= best.fraction
    assert best.flags["--mem-fraction-static"] == best.recommended
    latency = _fit("deepseek-ai/DeepSeek-V3", "h200", 8, 32768, 32, optimize="latency")
    ttfts = [o.speed.ttft_s for o in latency.options]
    assert ttfts == sorted(ttfts)


def test_pp_only_when_tp_cannot_hold_the_model():
    from kvscope.fit import candidates, fit_request
    r = fit_request("meta-llama/Llama-3.1-405B", "h100", context=8192, concurrency=4, gpus=16)
    pps = {(c.tp, c.pp) for c in candidates(r) if c.pp > 1}
    assert pps == {(8, 2)}  # PP stages only after TP fills a node (8 GPUs)
    res = fit(r)
    assert res.fits and res.best.candidate.num_gpus == 16


# ------------------------------------------------------------------------------------------------
# vLLM: the utilization is the smallest with concurrency >= target; the upper end is the last vLLM accepts

VLLM_CASES = [
    ("Qwen/Qwen3-32B", "h100", 8, 32768, 16),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16),
]


@pytest.mark.parametrize("model,gpu,gpus,context,concurrency", VLLM_CASES)
def test_vllm_utilization_is_minimal(model, gpu, gpus, context, concurrency):
    res = _fit(model, gpu, gpus, context, concurrency, engine="vllm")
    assert res.fits
    for o in res.options[:8]:
        per = math.ceil(concurrency / o.candidate.dp)
        t = _vllm_at(model, gpu, o, context, concurrency, o.fraction)
        assert t.starts and t.extra.max_concurrency >= per, o.candidate.label
        assert t.kv_cache_tokens == o.kv_cache_tokens_floor
        rec = _vllm_at(model, gpu, o, context, concurrency, o.recommended)
        assert rec.starts and rec.kv_cache_tokens == o.kv_cache_tokens
        default = version_traits(None).default_gpu_memory_utilization  # 0.92 from vLLM 0.20
        assert o.engine_default == default and o.recommended == min(max(o.fraction, default), o.fraction_max)
        below = _vllm_at(model, gpu, o, context, concurrency, o.fraction - STEP)
        assert not below.starts or below.extra.max_concurrency < per, o.candidate.label
        top = _vllm_at(model, gpu, o, context, concurrency, o.fraction_max)
        assert top.starts
        if o.fraction_max + STEP <= 1:
            assert not _vllm_at(model, gpu, o, context, concurrency, o.fraction_max + STEP).starts
        assert o.flags["--max-model-len"] == context and o.flags["--max-num-seqs"] == per
        assert o.command.startswith(f"vllm serve {model} --tensor-parallel-size {o.candidate.tp}")


def test_vllm_qwen3_32b_rejections():
    res = _fit("Qwen/Qwen3-32B", "h100", 8, 32768, 16, engine="vllm")
    why = {r.candidate.label: r.reason for r in res.rejected}
    assert "concurrency" in why["TP1"] and "< 16 at --max-model-len 32768" in why["TP1"]
    gpus = _fit("Qwen/Qwen3-32B", "h100", 8, 32768, 16, engine="vllm", optimize="gpus")
    assert gpus.best.candidate.num_gpus == 2
    assert res.best.speed.decode_tokens_per_s == max(o.speed.decode_tokens_per_s for o in res.options)


# ------------------------------------------------------------------------------------------------
# fixed flags, nothing fits


def test_fixed_fraction_is_used_as_given():
    res = fit(FitRequest(_spec("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("h100"), 2, 32768, 16,
                         fixed={"mem_fraction_static": 0.855}))
    assert res.options and all(o.fraction == o.fraction_max == 0.855 for o in res.options)
    assert "--mem-fraction-static 0.855" in res.best.command


def test_nothing_fits_names_closest_and_what_is_missing(capsys):
    args = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--gpus", "1", "--context", "32768",
            "--concurrency", "24", "--kv-cache-dtype", "auto"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "nothing fits on 1× h100-sxm" in out
    assert main(args + ["--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    sf = d["shortfall"]
    assert d["fits"] is False and d["options"] == []
    assert sf["closest"]["candidate"]["label"] == "TP1" and sf["needs_more_kv"] > 1
    tips = " | ".join(sf["suggestions"])
    assert "fp8 KV fits on 1 GPU(s): TP1 fp8_e4m3 KV" in tips
    assert "use 2 GPUs:" in tips
    assert f"needs {sf['needs_more_kv']:.2f}× more KV" in out


# ------------------------------------------------------------------------------------------------
# CLI, JSON


def test_json_round_trips_and_matches_library(capsys):
    assert main(["fit", "--model", "Qwen/Qwen3-32B", "--gpu", "h100", "--gpus", "8", "--context", "32768",
                 "--concurrency", "16", "--engine", "vllm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d == json.loads(json.dumps(_fit("Qwen/Qwen3-32B", "h100", 8, 32768, 16, engine="vllm").to_dict()))
    assert fit_result_from_dict(d).to_dict() == d
    assert d["target_tokens"] == 524288 and d["engine_version"] == "0.33.0"


def test_plan_command_reproduces_the_option(capsys):
    measured = Measured((gib_to_bytes(94),), (gib_to_bytes(21.7),))
    res = fit(FitRequest(_spec("moonshotai/Kimi-K2.5"), get_gpu("rtx-pro-6000"), 8, 32768, 4, tp=8, pp=1, dp=1,
                         measured=measured, model_ref="moonshotai/Kimi-K2.5", gpu_ref="rtx-pro-6000"))
    vres = _fit("Qwen/Qwen3-32B", "h100", 8, 32768, 16, engine="vllm")
    for o in (res.best, res.options[-1], vres.best):
        argv = shlex.split(o.plan_command)[1:] + ["--json"]
        assert main(argv) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["starts"] is True and d["kv_cache_tokens"] == o.kv_cache_tokens, o.plan_command


@pytest.mark.parametrize("argv,field", [
    (["--gpu", "h999"], "--gpu"),
    (["--context", "200000"], "--context"),
    (["--set", "bogus=1"], "--set"),
    (["--tp", "16"], "--gpus"),
    (["--pre-load-free-gib", "94"], "--pre-load-free-gib"),
    (["--kv-cache-dtype", "int3"], "--kv-cache-dtype"),
    (["--engine-version", "banana"], "--engine-version"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, field):
    base = {"--gpu": "h100", "--context": "32768"}
    args = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--concurrency", "4"]
    for k, v in base.items():
        if k not in argv:
            args += [k, v]
    assert main(args + argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvscope: error: ") and field in lines[0]
    assert "Traceback" not in cap.err


def test_text_report_shows_command_and_rejections():
    res = _fit("meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16)
    text = render_fit(res)
    b = res.best
    assert f"best: {b.candidate.label} on 8 GPU(s) — ~{b.speed.decode_tokens_per_s:,.0f}" in text
    assert "tok/s decode at 16 requests" in text
    assert f"floor: --mem-fraction-static {b.fraction:g} ({b.kv_cache_tokens_floor:,} KV tokens)" in text
    assert res.best.command in text and res.best.plan_command in text
    w1 = next(r.reason for r in res.rejected if r.candidate.label == "TP1")
    assert f"rejected:\n  TP1, TP1 DP2, TP1 DP4, TP1 DP8: {w1}" in text  # one line per reason
    assert "TP1 fp8_e4m3 KV" not in text  # no KV budget at all: fp8 KV cannot help, not tried
    assert "est. (pre_model_load_memory, weights)" in text


def test_search_cost_is_bounded():
    r = FitRequest(_spec("meta-llama/Llama-3.1-70B-Instruct"), get_gpu("h100"), 8, 32768, 16)
    res = _fit("meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16)
    n = len(candidates(r))
    # 10 TP / TP x DP-replica layouts with <= 8 GPUs (no PP: TP8 fills the node), x 2 KV dtypes
    assert n == 20
    tried = len(res.options) + len(res.rejected)  # fp8 only where unquantized KV falls short: TP1, TP2, TP4 DP2
    assert tried == 13
    assert res.plan_calls <= 4 * tried  # a bisection over 99 grid points alone would take 2 x 7 per candidate


def test_fit_request_replace_keeps_validation():
    r = FitRequest(_spec("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("h100"), 1, 32768, 1)
    with pytest.raises(Exception, match="--concurrency"):
        fit(replace(r, concurrency=0))


def test_vllm_weights_rejection_names_the_request():
    res = _fit("meta-llama/Llama-3.1-70B-Instruct", "h100", 2, 8192, 4, engine="vllm")
    why = {r.candidate.label: r.reason for r in res.rejected}
    assert why["TP1"] == ("weights 131.4 GiB per rank + profile peaks exceed 0.99 x 79.2 GiB = 78.4 GiB, the most "
                          "vLLM accepts (free at startup (est.))")
    assert {o.candidate.num_gpus for o in res.options} == {2}


def test_fp8_kv_on_a_gpu_without_fp8_is_flagged():
    res = _fit("meta-llama/Llama-3.1-8B-Instruct", "a100-80g", 1, 32768, 16)
    o = next(o for o in res.options if o.candidate.kv_quantized)
    assert any("has no native fp8" in w for w in o.warnings)
    h = _fit("meta-llama/Llama-3.1-8B-Instruct", "h100", 1, 32768, 8)
    assert not any("native fp8" in w for o in h.options for w in o.warnings)


def test_cli_aliases_and_fixed_vllm_setting(capsys):
    assert main(["fit", "--model", "Qwen/Qwen3-8B", "--gpu", "h100", "--gpus", "1", "--context", "16384",
                 "--concurrency", "8", "--engine", "vllm", "--version", "0.19.0", "--set", "block_size=32",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    best = d["options"][0]
    assert d["engine_version"] == "0.19.0" and best["flags"]["--block-size"] == 32
    assert "--engine-version 0.19.0" in best["plan_command"] and "--block-size 32" in best["command"]
    assert main(shlex.split(best["plan_command"])[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_cache_tokens"] == best["kv_cache_tokens"]
    assert main(["fit", "Qwen/Qwen3-8B", "--model", "Qwen/Qwen3-32B", "--gpu", "h100", "--context", "8192",
                 "--concurrency", "1"]) == 2
    assert "two models given" in capsys.readouterr().err


def _checkpoint(tmp_path, ref="Qwen/Qwen3-8B"):
    """A checkpoint directory: the bundled config + one safetensors file (header, sparse data)."""
    from kvscope.catalog import load_model_source

    cfg = load_model_source(ref).config
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    h, i, v, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h], "model.norm.weight": [h]}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes.update({p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                       p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
                       p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
                       p + "mlp.down_proj.weight": [h, i], p + "input_layernorm.weight": [h]})
    header, off = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + size]}
        off += size
    raw = json.dumps(header).encode()
    with open(tmp_path / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + off)  # sparse: only the header is read
    return str(tmp_path)


def test_library_fit_reads_exact_weights_from_a_checkpoint_like_the_cli(tmp_path, capsys):
    """The exact-weights path is the library's: ``fit`` reads the safetensors headers of a checkpoint
    directory given as ``model_ref``, and gives the CLI's JSON."""
    ckpt = _checkpoint(tmp_path)
    spec = load_spec(ckpt)[0]
    res = fit(FitRequest(spec, get_gpu("h100-sxm"), 8, 32768, 16, model_ref=ckpt))
    assert main(["fit", ckpt, "--gpu", "h100-sxm", "--context", "32768", "--concurrency", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == res.to_dict()
    estimate = fit(FitRequest(spec, get_gpu("h100-sxm"), 8, 32768, 16, model_ref="Qwen/Qwen3-8B"))
    assert res.best.kv_cache_tokens != estimate.best.kv_cache_tokens  # the exact weights were used
    vllm = [fit(FitRequest(spec, get_gpu("h100-sxm"), 8, 32768, 16, engine="vllm", model_ref=ref))
            for ref in (ckpt, "Qwen/Qwen3-8B")]
    assert vllm[0].best.kv_cache_tokens == vllm[1].best.kv_cache_tokens  # vLLM plans take no exact weights


def test_every_result_field_is_in_the_json():
    """``_KEYS`` orders the JSON keys of the fit result types; a field left out of it would vanish."""
    from dataclasses import fields

    from kvscope.fit import Candidate, FitOption, FitResult, Rejection, Shortfall

    for cls in (Candidate, FitOption, Rejection, Shortfall, FitResult):
        assert {f.name for f in fields(cls)} <= set(cls._KEYS), cls.__name__


def test_fit_request_builds_what_the_cli_runs(tmp_path, capsys):
    """``fit_request(model, gpu, ...)``: the CLI's model loading, GPU, measured GiB and exact weights."""
    from kvscope.fit import fit_request

    ckpt = _checkpoint(tmp_path)
    argv = ["fit", ckpt, "--gpu", "h100-sxm", "--context", "32768", "--concurrency", "16", "--tp", "2", "--pp", "1",
            "--pre-load-free-gib", "78", "--post-load-free-gib", "70.5,70.25", "--set", "page_size=64", "--json"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    r = fit_request(ckpt, "h100-sxm", context=32768, concurrency=16, tp=2, pp=1, pre_load_free_gib=[78],
                    post_load_free_gib=[70.5, 70.25], fixed={"page_size": 64})
    assert fit(r).to_dict() == cli
