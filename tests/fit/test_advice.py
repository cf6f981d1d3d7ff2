"""Issue #18: every launch command fit prints passes plan's own parser and plans as fit says; plan's
fixes give a floor and a recommendation; an over-committed request limit is named in the verdict."""

from __future__ import annotations

import argparse
import shlex

import pytest

from kvscope.commands import plan as plan_cmd
from kvscope.fit import fit, fit_request
from kvscope.plan import plan


def _plan_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvscope")
    plan_cmd.register(p.add_subparsers(dest="command"))
    return p


def _launch_to_plan_argv(o, model: str, gpu: str, engine: str) -> list[str]:
    """The launch command's flags, as typed, into ``kvscope plan`` (the one rename: SGLang 0.5.23's
    ``--attn-dp-size N`` is plan's ``--dp N --enable-dp-attention``)."""
    words = shlex.split(o.command)
    flags = words[words.index(model) + 1:]
    if "--attn-dp-size" in flags:
        i = flags.index("--attn-dp-size")
        flags[i:i + 2] = ["--dp", flags[i + 1], "--enable-dp-attention"]
    return ["plan", model, "--gpu", gpu, "--engine", engine, *flags]


CASES = [("deepseek-ai/DeepSeek-V3", "h200", "sglang", 32768, 32),
         ("deepseek-ai/DeepSeek-V3", "h200", "vllm", 32768, 32),
         ("Qwen/Qwen3-32B", "h100", "vllm", 32768, 64),
         ("meta-llama/Llama-3.1-70B-Instruct", "h100", "sglang", 32768, 16)]


@pytest.mark.parametrize("model,gpu,engine,context,concurrency", CASES)
def test_every_launch_command_passes_plan(model, gpu, engine, context, concurrency):
    res = fit(fit_request(model, gpu, context=context, concurrency=concurrency, engine=engine))
    assert res.options
    parser = _plan_parser()
    for o in res.options:
        for argv in (_launch_to_plan_argv(o, model, gpu, engine), shlex.split(o.plan_command)[1:]):
            args = parser.parse_args(argv)  # argparse exits on an unknown flag
            t = _run(args)
            assert t.starts, (o.candidate.label, argv)
            assert t.kv_cache_tokens == o.kv_cache_tokens, o.candidate.label


def _run(args):
    """What ``kvscope plan`` runs for ``args`` (its own translation of the parsed flags)."""
    import contextlib
    import io
    import json
    args.json = True
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        args.func(args)
    from kvscope.timeline import timeline_from_dict
    return timeline_from_dict(json.loads(buf.getvalue()))


def test_sglang_failing_plan_gives_recommendation_then_floor():
    # Kimi K2.5 on 8x H200 at --mem-fraction-static 0.5: the weights leave no budget
    t = plan("moonshotai/Kimi-K2.5", "h200", tp_size=8, mem_fraction_static=0.5)
    assert not t.starts
    fr = [f for f in t.fix if f.flag == "--mem-fraction-static"]
    rec, floor = fr[0], fr[-1]
    assert rec.why.startswith("recommended: holds one full 262,144-token request")
    assert floor.why.startswith("floor: the least that starts")
    assert floor.value == round(t.extra.min_mem_fraction_static + 0.0005 - 1e-9, 3) or floor.value >= \
        t.extra.min_mem_fraction_static
    # the recommendation holds one full request when planned
    t2 = plan("moonshotai/Kimi-K2.5", "h200", tp_size=8, mem_fraction_static=rec.value)
    assert t2.starts and t2.kv_cache_tokens >= 262144
    t3 = plan("moonshotai/Kimi-K2.5", "h200", tp_size=8, mem_fraction_static=floor.value)
    assert t3.starts and t3.kv_cache_tokens < 262144


def test_sglang_overcommitted_running_requests_named_in_the_verdict():
    t = plan("moonshotai/Kimi-K2.5", "h200", tp_size=8, mem_fraction_static=0.7, max_running_requests=8,
             context_length=131072)
    assert t.starts
    held = t.kv_cache_tokens // 131072
    note = next(w for w in t.warnings if w.startswith("--max-running-requests 8 exceeds"))
    assert f"{t.kv_cache_tokens:,} tokens hold {held} request(s) of 131,072 tokens" in note
    from kvscope.report.sglang_text import render_sglang
    assert "verdict: starts" in render_sglang(t) and "UNDER-SIZED" in render_sglang(t)


def test_vllm_overcommitted_max_num_seqs_named_and_fixed():
    t = plan("Qwen/Qwen3-32B", "h100", engine="vllm", max_num_seqs=64, max_model_len=32768)
    assert t.starts
    held = int(t.extra.max_concurrency)
    note = next(w for w in t.warnings if w.startswith("--max-num-seqs 64 exceeds"))
    assert f"hold {held} request(s) of 32,768 tokens" in note
    assert any(f.why.startswith("recommended:") for f in t.fix)
    # with more GPUs the recommendation is a utilization that holds the requests at full length
    t4 = plan("Qwen/Qwen3-32B", "h100", engine="vllm", max_num_seqs=16, max_model_len=32768,
              tensor_parallel_size=4, gpu_memory_utilization=0.5)
    assert t4.starts and t4.extra.max_concurrency < 16
    rec = next(f for f in t4.fix if f.flag == "--gpu-memory-utilization" and f.why.startswith("recommended:"))
    t5 = plan("Qwen/Qwen3-32B", "h100", engine="vllm", max_num_seqs=16, max_model_len=32768,
              tensor_parallel_size=4, gpu_memory_utilization=rec.value)
    assert t5.extra.max_concurrency >= 16 and rec.value >= 0.92  # at least vLLM's default


def test_vllm_moe_data_parallel_is_expert_parallel_and_ranked_by_speed():
    res = fit(fit_request("deepseek-ai/DeepSeek-V3", "h200", context=32768, concurrency=32, engine="vllm"))
    best = res.best
    # vLLM's DP deployment of an MoE model: experts over all 8 GPUs, attention per DP engine
    assert best.candidate.expert_parallel and best.candidate.num_gpus == 8
    assert best.flags["--enable-expert-parallel"] is True and best.flags["--max-num-seqs"] == 32 // best.candidate.dp
    assert [o.speed.decode_tokens_per_s for o in res.options] == sorted(
        (o.speed.decode_tokens_per_s for o in res.options), reverse=True)
    assert best.recommended == best.engine_default == 0.92 >= best.fraction  # vLLM 0.33's default kept


def test_weights_that_do_not_fit_get_a_tp_floor_and_recommendation_both_engines():
    model = "meta-llama/Llama-3.1-70B-Instruct"
    t = plan(model, "h100")
    assert not t.starts
    tp = {f.why.split(" ")[0].rstrip(":"): f.value for f in t.fix if f.flag == "--tp"}
    # the floor is the least TP that starts with the other flags as given (the default fraction): TP 2 has a
    # KV budget only from --mem-fraction-static 0.857 up, so at the default the floor is the recommendation
    assert tp == {"recommended": 4, "floor": 4}
    assert not plan(model, "h100", tp_size=2).starts
    assert plan(model, "h100", tp_size=4).kv_cache_tokens >= 131072 > plan(model, "h100", tp_size=2,
                                                                           mem_fraction_static=0.83).kv_cache_tokens
    assert plan(model, "h100", tp_size=2, mem_fraction_static=0.99).kv_cache_tokens > 0  # the floor has a budget
    v = plan(model, "h100", engine="vllm")
    assert not v.starts
    vtp = {f.why.split(" ")[0].rstrip(":"): f.value for f in v.fix if f.flag == "--tensor-parallel-size"}
    assert vtp == {"recommended": 4, "floor": 4}
    assert plan(model, "h100", engine="vllm", tensor_parallel_size=4).starts
    assert not plan(model, "h100", engine="vllm", tensor_parallel_size=2).starts
    assert plan(model, "h100", engine="vllm", tensor_parallel_size=2, gpu_memory_utilization=0.99).kv_cache_tokens > 0
