"""``kvscope plan`` text: the verdict first, then the same section names in the same order for both engines."""

from __future__ import annotations

import pytest

from kvscope.plan import plan
from kvscope.report.sections import SECTIONS
from kvscope.report.sglang_text import render_sglang
from kvscope.report.vllm_text import render_vllm

CASES = [
    ("sglang", dict(model="Qwen/Qwen3-8B", gpu="h100-sxm"), True),
    ("sglang", dict(model="moonshotai/Kimi-K2.5", gpu="rtx-pro-6000", tp_size=8, mem_fraction_static=0.55,
                    pre_load_free_gib=94, post_load_free_gib=21.7), False),
    ("vllm", dict(model="Qwen/Qwen3-8B", gpu="h100-sxm"), True),
    ("vllm", dict(model="Qwen/Qwen3-8B", gpu="h100-sxm", gpu_memory_utilization=0.2), False),
]


@pytest.mark.parametrize("engine,kw,starts", CASES)
def test_verdict_first_then_the_same_sections(engine, kw, starts):
    kw = dict(kw)
    t = plan(kw.pop("model"), kw.pop("gpu"), engine=engine, **kw)
    assert t.starts is starts
    text = (render_vllm if engine == "vllm" else render_sglang)(t)
    lines = text.splitlines()
    if starts:
        assert lines[0] == f"verdict: starts — {t.kv_cache_tokens:,} " + (
            "KV tokens (GPU KV cache size)" if engine == "vllm" else "KV tokens per rank")
    else:
        assert lines[0] == "verdict: FAILS at KV sizing" and lines[1] == f"  {t.error}"
    headings = [x[:-1] for x in lines if x.endswith(":") and x[:-1] in SECTIONS]
    want = [s for s in SECTIONS if s != "fixes and notes" or t.fix or t.warnings]
    assert headings == want
