"""Misses found by the public SGLang starts in tests/accuracy/sglang_public_starts.jsonl, closed against
SGLang's released source (each assertion is the engine's own arithmetic or the number its log printed)."""

from __future__ import annotations

import kvscope
from kvscope.units import GiB

LLAMA4 = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def test_llama4_10m_context_req_to_token_pool_does_not_fit():
    """sgl-project/sglang#5755: Llama-4-Scout, 8x 80 GB, --tp 8 --disable-cuda-graph died with
    'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.04 GiB.' That is ReqToTokenPool
    (memory_pool.py @ v0.4.6.post5): (max_num_reqs + 1) x (context_len + 4) int32 = 2049 x 10485764 x 4 B,
    which profile_max_num_token does not budget."""
    t = kvscope.plan(LLAMA4, "h100-sxm", engine="sglang", engine_version="0.4.6", tp_size=8, disable_cuda_graph=True)
    assert t.ranks[0].decision.req_to_token_bytes == 2049 * (10485760 + 4) * 4
    assert t.starts is False
    assert t.error.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.04 GiB")
    assert f"{2049 * (10485760 + 4) * 4 / GiB:.2f}" == "80.04"


def test_llama4_with_a_shorter_context_fits_the_req_to_token_pool():
    t = kvscope.plan(LLAMA4, "h100-sxm", engine="sglang", engine_version="0.4.6", tp_size=8, disable_cuda_graph=True,
                     context_length=131072)
    assert t.starts is True and t.error is None
    assert t.ranks[0].decision.req_to_token_bytes == 4097 * (131072 + 4) * 4  # 2.00 GiB: fits the slack


def test_aiter_fraction_factor_is_0_90_in_v0_5_4_post1_only():
    """server_args.py @ v0.5.4.post1 l.1196-1199: ``self.mem_fraction_static *= 0.90`` for aiter with
    context_len > 8192; v0.5.4 (model_runner.py l.646-648) and v0.5.5+ (server_args.py) multiply by 0.85.
    sgl-project/sglang#12419 (Qwen3-Next, 4x MI300X, v0.5.4.post1 image) sized 5,091,015 tokens, which
    only the 0.90 factor reaches."""
    factors = {}
    for v in ("0.5.4", "0.5.4.post1", "0.5.5"):
        t = kvscope.plan("Qwen/Qwen3-Next-80B-A3B-Thinking", "mi300x", engine="sglang", engine_version=v, tp_size=4)
        factors[v] = t.extra.aiter_fraction_factor
    assert factors == {"0.5.4": 0.85, "0.5.4.post1": 0.90, "0.5.5": 0.85}
