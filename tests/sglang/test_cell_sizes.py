"""Exact cell sizes (bytes per token per rank) for every bundled attention family — SGLang's arithmetic
(pool_configurator.py _compute_cell_size @ v0.5.23; mixin get_cell_size_per_token @ v0.5.9)."""

from __future__ import annotations

import pytest

from kvscope.engines.sglang import kv_cache
from kvscope.engines.sglang import mamba
from kvscope.engines.sglang.release import release
from kvscope.model.load import load_spec

V = release("0.5.23")

CASES = [
    # model, attn_tp, kv dtype flag, expected bytes, how
    ("meta-llama/Llama-3.1-8B-Instruct", 1, "auto", 8 * (128 + 128) * 32 * 2, "GQA"),
    ("meta-llama/Llama-3.1-70B-Instruct", 8, "auto", 1 * (128 + 128) * 80 * 2, "GQA 8 heads / tp 8"),
    ("meta-llama/Llama-3.1-70B-Instruct", 16, "auto", 1 * (128 + 128) * 80 * 2, "tp 16 > 8 heads: replicated"),
    ("Qwen/Qwen3-14B", 1, "auto", 8 * 256 * 40 * 2, "explicit head_dim"),
    ("Qwen/Qwen3-14B", 1, "fp8_e5m2", 8 * 256 * 40 * 1, "fp8 KV"),
    ("Qwen/Qwen3-235B-A22B-FP8", 4, "auto", 1 * 256 * 94 * 2, "MoE GQA"),
    ("Qwen/Qwen2.5-7B-Instruct", 2, "auto", 2 * 256 * 28 * 2, "4 KV heads / tp 2"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 1, "auto", 8 * 256 * 32 * 2, "Mixtral"),
    ("deepseek-ai/DeepSeek-V3", 8, "auto", 576 * 61 * 2, "MLA bf16, no TP divisor"),
    ("deepseek-ai/DeepSeek-V3", 8, "fp8_e4m3", 576 * 61 * 1, "MLA fp8"),
    ("moonshotai/Kimi-K2.5", 8, "auto", 70272, "Kimi K2.5 (origin)"),
    ("deepseek-ai/DeepSeek-V2-Lite", 1, "auto", 576 * 27 * 2, "MLA V2-Lite"),
    ("deepseek-ai/DeepSeek-V3.2", 8, "fp8_e4m3", (656 + 132) * 61, "DSA fp8: 48,068"),
    ("zai-org/GLM-5", 8, "fp8_e4m3", (656 + 132) * 78, "GLM-5 DSA"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", 1, "auto", 2 * 512 * 12 * 2, "GDN hybrid: 12 full layers"),
    ("nvidia/Nemotron-H-56B-Base-8K", 1, "auto", 8 * 256 * 10 * 2, "mamba hybrid: 10 attention layers"),
    ("openai/gpt-oss-20b", 1, "auto", 8 * 128 * 24 * 2, "SWA hybrid: 12 full + 12 sliding"),
    ("google/gemma-2-9b-it", 1, "auto", 8 * 512 * 42 * 2, "gemma-2: head_dim 256"),
    ("microsoft/phi-4", 1, "auto", 10 * 256 * 40 * 2, "phi-4"),
]


@pytest.mark.parametrize("model,attn_tp,flag,expected,how", CASES, ids=[c[4] for c in CASES])
def test_cell_size(model, attn_tp, flag, expected, how):
    spec, _ = load_spec(model)
    _name, e = kv_cache.kv_cache_dtype(spec, flag)
    cell = kv_cache.cell_size(spec, V, attn_tp=attn_tp, kv_bytes=e, kv_flag=flag)
    assert cell.cell_bytes == expected


def test_checkpoint_fp8_kv_scheme_auto():
    """A ModelOpt checkpoint declaring kv_cache_quant_algo FP8 gets float8_e4m3fn under --kv-cache-dtype auto."""
    spec, _ = load_spec("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert kv_cache.kv_cache_dtype(spec, "auto") == ("float8_e4m3fn", 1)
    spec, _ = load_spec("meta-llama/Llama-3.1-70B-Instruct")
    assert kv_cache.kv_cache_dtype(spec, "auto") == ("bfloat16", 2)


def test_eagle_draft_share_current():
    """>=0.5.14: draft_kv = int(cell * draft_layers / num_layers) is added (pool_configurator.py l.260-320)."""
    spec, _ = load_spec("deepseek-ai/DeepSeek-V3")
    cell = kv_cache.cell_size(spec, V, attn_tp=8, kv_bytes=2, draft_layers=1, draft_in_budget=True)
    assert cell.draft_bytes == int(70272 * 1 / 61) == 1152
    assert cell.cell_bytes == 70272 + 1152


def test_v046_assumed_v_equals_k():
    spec, _ = load_spec("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")
    cell = kv_cache.cell_size(spec, release("0.4.6.post5"), attn_tp=1, kv_bytes=2)
    assert cell.cell_bytes == 8 * 128 * 64 * 2 * 2


def test_mamba_state_qwen3_next():
    """GDN state per request per rank: conv (2*16*128 + 32*128) x 3 x 2 B + temporal 32*128*128 x 4 B, x 36 layers
    (shared/specs/perf.md §3: 'temporal = 32*128*128*4, conv = (2*16*128 + 32*128)*3*2')."""
    spec, _ = load_spec("Qwen/Qwen3-Next-80B-A3B-Thinking")
    per = mamba.mamba_state_bytes_per_req(spec, tp=1)
    assert per == ((2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4) * 36
