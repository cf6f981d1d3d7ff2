"""SGLang's attention-backend default, the page size it forces and the aiter x0.85 fraction.

Expected values are read off the released code (see kvscope/engines/sglang/backend.py for the file
and line per version): e.g. server_args.py @ v0.5.9 l.1800-1833 (defaults), l.1855-1910 (pages),
l.1924 (aiter), server_args.py @ v0.5.6 (no trtllm_mha default yet), model_runner.py @ v0.4.8.post1.
"""

from __future__ import annotations

import pytest

from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.release import release
from kvscope.engines.sglang.backend import resolve_attention_backend
from kvscope.engines.sglang.plan import Measured, plan_sglang
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec

GIB = 1 << 30


def spec(ref):
    return load_spec(ref)[0]


def resolve(ref, gpu, version, context=131072, **kw):
    return resolve_attention_backend(release(version), spec(ref), get_gpu(gpu), SGLangArgs(**kw), context)


@pytest.mark.parametrize("model,gpu,version,backend,page", [
    ("meta-llama/Llama-3.1-8B-Instruct", "b200", "0.5.9", "trtllm_mha", 64),  # l.1805-1812
    ("meta-llama/Llama-3.1-8B-Instruct", "b200", "0.5.7", "trtllm_mha", 64),  # first release with it
    ("meta-llama/Llama-3.1-8B-Instruct", "b200", "0.5.6", "flashinfer", 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.5.23", "fa3", 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "rtx-pro-6000", "0.5.23", "flashinfer", 1),  # SM120 is not SM100
    ("deepseek-ai/DeepSeek-R1", "b200", "0.5.6", "trtllm_mla", 64),
    ("deepseek-ai/DeepSeek-R1", "b200", "0.5.3", "flashinfer", 1),
    ("deepseek-ai/DeepSeek-R1", "h200", "0.5.23", "fa3", 1),
    ("deepseek-ai/DeepSeek-R1", "mi300x", "0.5.9", "aiter", 1),  # 128 heads / tp 8 = 16
    ("moonshotai/Kimi-K2.5", "mi355x", "0.5.9", "triton", 1),  # 64 heads / tp 8 = 8: not 16/128
    ("moonshotai/Kimi-K2.5", "rtx-pro-6000", "0.5.23", "triton", 1),  # the origin case
    ("openai/gpt-oss-120b", "b200", "0.5.9", "trtllm_mha", 64),
    ("openai/gpt-oss-120b", "h100", "0.5.9", "fa3", 1),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "b200", "0.5.13", "triton", 1),  # mamba radix cache: page 1
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "b200", "0.5.9", "trtllm_mha", 64),  # generic SM100 rule
])
def test_default_backend_and_page(model, gpu, version, backend, page):
    be = resolve(model, gpu, version, tp_size=8)
    assert (be.name, be.page_size) == (backend, page)


def test_user_page_kept_when_the_backend_allows_it():
    assert resolve("deepseek-ai/DeepSeek-R1", "b200", "0.5.9", tp_size=8, page_size=32).page_size == 32
    assert resolve("deepseek-ai/DeepSeek-R1", "b200", "0.5.9", tp_size=8, page_size=16).page_size == 64
    assert resolve("meta-llama/Llama-3.1-8B-Instruct", "b200", "0.5.9", page_size=128).page_size == 64
    assert resolve("meta-llama/Llama-3.1-8B-Instruct", "b200", "0.5.23", page_size=128).page_size == 128
    assert resolve("deepseek-ai/DeepSeek-R1", "h100", "0.5.9", attention_backend="cutlass_mla").page_size == 128


def test_hybrid_gdn_on_sm100_without_radix_cache_uses_trtllm_mha():
    be = resolve("Qwen/Qwen3-Next-80B-A3B-Thinking", "b200", "0.5.23", tp_size=4, disable_radix_cache=True)
    assert (be.name, be.page_size) == ("trtllm_mha", 64)


def test_dsa_page_size_by_platform():
    assert resolve("zai-org/GLM-5", "b200", "0.5.9", tp_size=8).page_size == 64
    assert resolve("zai-org/GLM-5", "mi355x", "0.5.9", tp_size=8).page_size == 1


@pytest.mark.parametrize("version,context,factor", [
    ("0.5.9", 131072, 0.85), ("0.5.23", 131072, 0.85), ("0.4.8.post1", 131072, 0.85),
    ("0.5.9", 8192, None),  # context_len > 8192 only
    ("0.4.6.post5", 131072, None),  # not in model_runner.py @ v0.4.6.post5
])
def test_aiter_fraction_factor(version, context, factor):
    be = resolve("meta-llama/Llama-3.1-8B-Instruct", "mi300x", version, context=context)
    assert be.name == "aiter"
    assert be.fraction_factor == factor


def test_aiter_factor_is_applied_to_the_user_fraction_in_the_profile():
    """Same measured memory: aiter at 0.9 allocates exactly what triton does at 0.9 x 0.85."""
    m = Measured(pre_load_free_bytes=(190 * GIB,), post_load_free_bytes=(175 * GIB,))
    s, gpu = spec("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("mi300x")
    aiter = plan_sglang(s, gpu, SGLangArgs(mem_fraction_static=0.9), "0.5.9", measured=m)
    triton = plan_sglang(s, gpu, SGLangArgs(mem_fraction_static=0.9 * 0.85, attention_backend="triton"), "0.5.9",
                         measured=m)
    assert aiter.extra.attention_backend == "aiter" and triton.extra.aiter_fraction_factor is None
    assert aiter.kv_cache_tokens == triton.kv_cache_tokens
    # rest = 175 - 190 x (1 - 0.765) = 130.35 GiB; cell = 32 layers x 8 heads x 128 x 2 (K,V) x 2 B
    assert aiter.kv_cache_tokens == int((175 - 190 * (1 - 0.9 * 0.85)) * GIB) // 131072


def test_fix_is_given_in_flag_units_under_aiter():
    """A failing aiter start: the suggested flag, x0.85, starts; 0.001 less does not."""
    s, gpu = spec("meta-llama/Llama-3.1-70B-Instruct"), get_gpu("mi300x")
    m = Measured(pre_load_free_bytes=(190 * GIB,), post_load_free_bytes=(60 * GIB,))
    bad = plan_sglang(s, gpu, SGLangArgs(mem_fraction_static=0.7), "0.5.9", measured=m)
    assert not bad.starts
    flag = next(f.value for f in bad.fix if f.flag == "--mem-fraction-static" and f.why.startswith("floor:"))
    assert flag == bad.extra.min_mem_fraction_static or abs(flag - bad.extra.min_mem_fraction_static) < 1e-3
    ok = plan_sglang(s, gpu, SGLangArgs(mem_fraction_static=flag), "0.5.9", measured=m)
    low = plan_sglang(s, gpu, SGLangArgs(mem_fraction_static=round(flag - 0.001, 3)), "0.5.9", measured=m)
    assert ok.starts and not low.starts
    assert flag > bad.extra.min_effective_mem_fraction_static  # the flag is the effective value / 0.85
