"""Every fix ``plan`` prints starts when it is applied (issue 18: advice an engineer would launch).

Over a table of real cases — the origin case (Kimi K2.5 on 8× RTX PRO 6000 with the measured free
memory), bundled models on H100 / H200 / L40S / RTX 4090 at several TP sizes and contexts, both
engines, several releases — each fix of the plan is applied to the same command (the other flags
unchanged) and planned again:

* the re-planned engine starts (``Timeline.starts``), for every fix;
* a ``recommended:`` value that claims to hold N requests at context C holds them: SGLang's
  ``max_total_num_tokens >= N x C`` (per DP-attention worker), vLLM's ``Maximum concurrency >= N``.

A ``--tp`` fix changes the layout, so measured free memory (it belongs to one layout) is dropped for
it and the re-plan is estimated, as the fix says.
"""

from __future__ import annotations

import re

import pytest

import kvscope
from kvscope.errors import KvscopeError

ORIGIN = dict(model="moonshotai/Kimi-K2.5", gpu="rtx-pro-6000", tp_size=8, mem_fraction_static=0.55,
              pre_load_free_gib=94, post_load_free_gib=21.7)

CASES = [
    ORIGIN,
    {**ORIGIN, "max_running_requests": 4},
    {**ORIGIN, "mem_fraction_static": 0.9},
    {**ORIGIN, "engine_version": "0.5.9"},
    dict(model="moonshotai/Kimi-K2.5", gpu="h200", tp_size=8),
    dict(model="deepseek-ai/DeepSeek-V3", gpu="h200", tp_size=8, mem_fraction_static=0.6),
    dict(model="deepseek-ai/DeepSeek-V3", gpu="h100", tp_size=8),
    dict(model="deepseek-ai/DeepSeek-V3", gpu="h200", tp_size=8, dp_size=8, enable_dp_attention=True,
         mem_fraction_static=0.6, max_running_requests=256),
    dict(model="deepseek-ai/DeepSeek-V3", gpu="h200", tp_size=8, dp_size=8, enable_dp_attention=True,
         max_running_requests=512, context_length=65536),
    dict(model="Qwen/Qwen3-32B", gpu="rtx-4090", tp_size=1),
    dict(model="Qwen/Qwen3-32B", gpu="rtx-4090", tp_size=2, context_length=32768),
    dict(model="Qwen/Qwen3-32B", gpu="h100", tp_size=1, mem_fraction_static=0.5, max_running_requests=32),
    dict(model="Qwen/Qwen3-32B", gpu="l40s", tp_size=2, max_running_requests=64, engine_version="0.5.3"),
    dict(model="Qwen/Qwen3-32B", gpu="l40s", tp_size=4, mem_fraction_static=0.95),
    dict(model="Qwen/Qwen3-8B", gpu="rtx-4090", tp_size=1, mem_fraction_static=0.6, max_running_requests=16),
    dict(model="Qwen/Qwen3-8B", gpu="rtx-4090", tp_size=1, mem_fraction_static=0.97),
    dict(model="Qwen/Qwen3-235B-A22B", gpu="h100", tp_size=4),
    dict(model="Qwen/Qwen3-235B-A22B", gpu="h200", tp_size=8, max_running_requests=256, engine_version="0.5.14"),
    dict(model="Qwen/Qwen3-Next-80B-A3B-Thinking", gpu="h100", tp_size=2, mem_fraction_static=0.7),
    dict(model="Qwen/Qwen2.5-72B", gpu="h100", tp_size=2, engine_version="0.4.8.post1"),
    dict(model="Qwen/Qwen2.5-7B-Instruct", gpu="l40s", tp_size=1, max_running_requests=128),
    # every formula value above the working range (graphs / req_to_token after the KV cache): searched downwards
    dict(model="Qwen/Qwen3-8B", gpu="rtx-4090", tp_size=8, mem_fraction_static=0.97),
    dict(model="meta-llama/Llama-3.1-70B-Instruct", gpu="rtx-4090", tp_size=8, mem_fraction_static=0.97),
    dict(model="Qwen/Qwen3-30B-A3B", gpu="rtx-4090", tp_size=2, mem_fraction_static=0.97),
]
VLLM_CASES = [
    dict(model="Qwen/Qwen3-32B", gpu="h100", tensor_parallel_size=1),
    dict(model="Qwen/Qwen3-32B", gpu="h100", tensor_parallel_size=1, max_num_seqs=64),
    dict(model="Qwen/Qwen3-32B", gpu="h100", tensor_parallel_size=2, max_num_seqs=64),
    dict(model="Qwen/Qwen3-32B", gpu="h100", tensor_parallel_size=2, max_num_seqs=64, engine_version="0.10.2"),
    dict(model="Qwen/Qwen3-32B", gpu="rtx-4090", tensor_parallel_size=2, max_model_len=16384),
    dict(model="Qwen/Qwen3-32B", gpu="l40s", tensor_parallel_size=2, max_num_seqs=32, engine_version="0.19.0"),
    dict(model="Qwen/Qwen3-8B", gpu="rtx-4090", tensor_parallel_size=1, gpu_memory_utilization=0.6),
    dict(model="Qwen/Qwen3-8B", gpu="rtx-4090", tensor_parallel_size=1, max_num_seqs=32, engine_version="0.6.6"),
    dict(model="Qwen/Qwen3-8B", gpu="l40s", tensor_parallel_size=1, gpu_memory_utilization=0.5, max_num_seqs=16),
    dict(model="Qwen/Qwen3-235B-A22B", gpu="h200", tensor_parallel_size=4, max_num_seqs=128),
    dict(model="Qwen/Qwen3-235B-A22B", gpu="h100", tensor_parallel_size=2),
    dict(model="deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=8, max_num_seqs=64),
    dict(model="moonshotai/Kimi-K2.5", gpu="h200", tensor_parallel_size=8, gpu_memory_utilization=0.8),
    dict(model="Qwen/Qwen2.5-7B-Instruct", gpu="l40s", tensor_parallel_size=1, max_num_seqs=256,
         engine_version="0.13.0"),
]

# the fix's flag -> plan()'s keyword (the engines' own spellings)
_KW = {"--tp": "tp_size", "--tensor-parallel-size": "tensor_parallel_size"}
_TP = ("tp_size", "tensor_parallel_size")
_MEASURED = ("pre_load_free_gib", "post_load_free_gib")


def _kwargs(case: dict, engine: str) -> dict:
    return {k: v for k, v in case.items() if k not in ("model", "gpu")} | {"engine": engine}


def _applied(case: dict, engine: str, fix) -> dict:
    kw = _kwargs(case, engine)
    name = _KW.get(fix.flag, fix.flag.lstrip("-").replace("-", "_"))
    if name in _TP:
        kw = {k: v for k, v in kw.items() if k not in _MEASURED + _TP}
    kw[name] = fix.value
    return kw


def _claims(why: str) -> tuple[int, int] | None:
    """(requests, tokens each) a ``recommended:`` fix says it holds, or None."""
    if not why.startswith("recommended"):
        return None
    m = re.search(r"holds one full ([\d,]+)-token request", why)
    if m:
        return 1, int(m.group(1).replace(",", ""))
    m = re.search(r"\((\d+) per DP worker\) at ([\d,]+) tokens", why) or re.search(
        r"holds --max-running-requests (\d+) at ([\d,]+) tokens", why) or re.search(
        r"holds (?:--max-num-seqs )?(\d+) requests of ([\d,]+) tokens", why)
    if m:
        return int(m.group(1)), int(m.group(2).replace(",", ""))
    return None


def _holds(t, requests: int, tokens: int) -> bool:
    if t.engine == "vllm":
        return t.to_dict()["max_concurrency"] >= requests
    return t.kv_cache_tokens >= requests * tokens


_ALTERNATIVES = (  # the combinations a "largest that starts" fix offers, re-planned: (pattern, flags, tokens held)
    (r"--max-running-requests (\d+) with --mem-fraction-static ([\d.]+) starts and holds ([\d,]+) tokens",
     lambda m, v: {"max_running_requests": int(m[1]), "mem_fraction_static": float(m[2])}, 3),
    (r"--context-length (\d+) with it fits one full request",
     lambda m, v: {"context_length": int(m[1]), "mem_fraction_static": v}, 1),
    (r"--kv-cache-dtype fp8_e4m3 with it holds ([\d,]+) tokens",
     lambda m, v: {"kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": v}, 1),
)


def _alternatives(case: dict, engine: str, fix) -> list[str]:
    """Each combination the fix's text offers starts, and holds the tokens it says."""
    bad = []
    for pattern, flags, group in _ALTERNATIVES:
        m = re.search(pattern, fix.why)
        if m:
            r = kvscope.plan(case["model"], case["gpu"], **{**_kwargs(case, engine), **flags(m, fix.value)})
            if not (r.starts and r.kv_cache_tokens >= int(m[group].replace(",", ""))):
                bad.append(f"{fix.flag} {fix.value}: the alternative {m[0]!r} does not hold: {r.error}")
    return bad


def _check(case: dict, engine: str) -> list[str]:
    t = kvscope.plan(case["model"], case["gpu"], **_kwargs(case, engine))
    bad = []
    for f in t.fix:
        try:
            r = kvscope.plan(case["model"], case["gpu"], **_applied(case, engine, f))
        except KvscopeError as exc:
            bad.append(f"{f.flag} {f.value} ({f.why}): refused: {exc}")
            continue
        if not r.starts:
            bad.append(f"{f.flag} {f.value} ({f.why}): does not start: {r.error}")
            continue
        if f.why.startswith("largest that starts"):
            bad += _alternatives(case, engine, f)
        claim = _claims(f.why)
        if claim and not _holds(r, *claim):
            bad.append(f"{f.flag} {f.value} ({f.why}): holds {r.kv_cache_tokens} tokens, not {claim}")
    return bad


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_sglang_fixes_start(case):
    assert _check(case, "sglang") == []


@pytest.mark.parametrize("case", VLLM_CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_vllm_fixes_start(case):
    assert _check(case, "vllm") == []


def test_the_table_has_fixes_of_each_kind():
    """The table is not vacuous: it prints recommendations, floors and a knob value at the start edge."""
    whys = [f.why for c in CASES for f in kvscope.plan(c["model"], c["gpu"], **_kwargs(c, "sglang")).fix]
    whys += [f.why for c in VLLM_CASES for f in kvscope.plan(c["model"], c["gpu"], **_kwargs(c, "vllm")).fix]
    assert sum(w.startswith("recommended") for w in whys) >= 10
    assert sum(w.startswith("floor") for w in whys) >= 10
    assert any(w.startswith("largest that starts") for w in whys)


FIT_CASES = [  # (model, gpu, options): fit's option command must start and hold the target, set and floor alike
    ("moonshotai/Kimi-K2.5", "rtx-pro-6000", dict(gpus=8, tp=8, pp=1, pre_load_free_gib=[94], post_load_free_gib=[21.7],
                                                  context=262144, concurrency=1)),
    ("Qwen/Qwen3-32B", "h100", dict(gpus=2, context=32768, concurrency=8)),
    ("Qwen/Qwen3-32B", "h100", dict(gpus=2, context=32768, concurrency=8, engine="vllm")),
    ("Qwen/Qwen3-8B", "rtx-4090", dict(gpus=1, context=16384, concurrency=4, engine="vllm", engine_version="0.10.2")),
]


def _fit_flags(option, knob_value) -> dict:
    out = {}
    for flag, value in option.flags.items():
        out[_KW.get(flag, flag.lstrip("-").replace("-", "_"))] = value
    out[option.knob.lstrip("-").replace("-", "_")] = knob_value
    return out


@pytest.mark.parametrize("model,gpu,opts", FIT_CASES, ids=lambda x: str(x)[:40])
def test_fit_recommended_and_floor_start(model, gpu, opts):
    res = kvscope.fit(model, gpu, **opts)
    assert res.options
    engine = opts.get("engine", "sglang")
    measured = {k: opts[k] for k in _MEASURED if k in opts}
    per_engine = {}
    for o in res.options:
        for value in (o.recommended, o.fraction):
            kw = {**_fit_flags(o, value), **measured, "engine": engine, "engine_version": opts.get("engine_version")}
            t = kvscope.plan(model, gpu, **kw)
            assert t.starts, (o.flags, value, t.error)
            if engine == "vllm":
                per_engine[value] = t.to_dict()["max_concurrency"] >= kw["max_num_seqs"]
            else:
                per_engine[value] = t.kv_cache_tokens >= opts["context"] * -(-opts["concurrency"] // o.candidate.dp)
            assert per_engine[value], (o.flags, value, t.kv_cache_tokens)


def _sg(model, gpu, **kw):
    return kvscope.plan(model, gpu, check_fixes=False, **kw)


def test_a_floor_below_the_state_pool_moves_up_to_the_least_that_starts():
    """Qwen3-Next on 2× H100: the one-page floor (0.967) leaves the mamba state pool no request; the
    floor printed is the least fraction whose plan starts."""
    m, kw = "Qwen/Qwen3-Next-80B-A3B-Thinking", dict(tp_size=2)
    floor = [f for f in kvscope.plan(m, "h100", mem_fraction_static=0.7, **kw).fix if f.why.startswith("floor")]
    assert [f.value for f in floor] == [0.971]
    assert _sg(m, "h100", mem_fraction_static=0.971, **kw).starts
    assert "state cache is too small" in _sg(m, "h100", mem_fraction_static=0.97, **kw).error


def test_every_formula_value_above_the_working_range_moves_down():
    """Qwen3-8B on 8× RTX 4090 at 0.97: the graph fix's value (and every value above) fails at start-up
    (graphs / req_to_token after the KV cache); the fix is the largest that starts, found below it."""
    m, kw = "Qwen/Qwen3-8B", dict(tp_size=8)
    t = kvscope.plan(m, "rtx-4090", mem_fraction_static=0.97, **kw)
    assert [(f.flag, f.value) for f in t.fix] == [("--mem-fraction-static", 0.937)]
    assert _sg(m, "rtx-4090", mem_fraction_static=0.937, **kw).starts
    assert not _sg(m, "rtx-4090", mem_fraction_static=0.938, **kw).starts
    assert t.fix[0].why.startswith("largest that starts: 1,146,745 KV tokens = 27 full 40,960-token request(s)")
