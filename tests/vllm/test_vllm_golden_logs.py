"""Golden tests: every vLLM case of shared/logs that prints "Available KV cache memory" is
reproduced in measured mode -- the printed token count and concurrency come out of the block
arithmetic for an available-memory value inside the 2-decimal rounding of the printed GiB."""

from __future__ import annotations

import pytest

from kvscope.engines.vllm import memory as mem
from kvscope.engines.vllm.args import VllmFlags, resolve_args
from kvscope.engines.vllm.release import version_traits
from kvscope.hardware.gpus import get_gpu
from kvscope.units import GiB

from vllm_case_data import load_cases, spec_of

# case id -> (kvscope model with the same KV geometry, flags)
GOLDEN = {
    "lld-vllm-llama31-8b-h100-tp1": ("meta-llama/Llama-3.1-8B-Instruct", VllmFlags(
        gpu_memory_utilization=0.95, max_model_len=8192, enable_prefix_caching=False)),
    "lld-vllm-gptoss20b-h100-tp2": ("openai/gpt-oss-20b", VllmFlags(
        tensor_parallel_size=2, max_model_len=8192, enable_prefix_caching=False)),
    "lld-vllm-mixtral-8x7b-h100-tp2": ("mistralai/Mixtral-8x7B-Instruct-v0.1", VllmFlags(
        tensor_parallel_size=2, gpu_memory_utilization=0.95, max_model_len=8192, enable_prefix_caching=False)),
    "lld-vllm-qwen3-14b-h100-v0160": ("Qwen/Qwen3-14B", VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192)),
    "lld-vllm-qwen3-14b-h100-v0170": ("Qwen/Qwen3-14B", VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192)),
    # NVFP4 checkpoint of Qwen3-30B-A3B: same 48 layers x 4 KV heads x 128 head_dim bf16 KV cache
    "vllm-qwen3-30b-a3b-nvfp4-rtxpro6000": ("Qwen/Qwen3-30B-A3B", VllmFlags(
        gpu_memory_utilization=0.95, max_model_len=4096, max_num_seqs=32)),
}
GPU_OF = {"vllm-qwen3-30b-a3b-nvfp4-rtxpro6000": "rtx-pro-6000"}


def _printed_int(s) -> int:
    return int(str(s).split()[0].replace(",", ""))


def _printed_gib(s: str) -> float:
    return float(str(s).split()[0].replace("GiB", ""))


def _printed_concurrency(s: str) -> str:
    s = str(s)
    return s.split(":")[-1].strip().rstrip("x") if ":" in s else s.split("x")[0].strip()


def test_every_vllm_case_with_available_kv_is_covered():
    """All are reproduced here except DeepSeek-V4, whose case needs an input the record lacks
    (max_num_batched_tokens 8448, inferred): it is reproduced in test_vllm_deepseek_v4.py."""
    with_kv = {k for k, c in load_cases().items() if "available_kv_cache_gib" in c["observed"]}
    assert with_kv - set(GOLDEN) == {"vllm-dsv4-flash-rtxpro5000-tp4-mtp"}


@pytest.mark.parametrize("case_id", sorted(GOLDEN))
def test_tokens_and_concurrency_reproduced(case_id, cases):
    case = cases[case_id]
    model, flags = GOLDEN[case_id]
    spec = spec_of(model)
    gpu = get_gpu(GPU_OF.get(case_id, "h100-sxm"))
    traits = version_traits(case["engine_version"])
    a = resolve_args(flags, traits=traits, model_max_len=spec.max_position_embeddings,
                     gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name, is_mla=spec.is_mla,
                     is_hybrid_mamba=False, num_attention_heads=spec.num_attention_heads)
    kv = mem.model_kv(spec, a, a.max_model_len)
    obs = case["observed"]
    printed = _printed_gib(obs["available_kv_cache_gib"])
    lo, hi = int((printed - 0.005) * GiB), int((printed + 0.005) * GiB)
    want_tokens = _printed_int(obs["gpu_kv_cache_tokens"])
    want_conc = _printed_concurrency(obs["max_concurrency"])
    bpb = kv.workers[0].plan.bytes_per_block
    hits = []
    for blocks in range(lo // bpb, hi // bpb + 1):
        cap = mem.capacity_from_available([blocks * bpb], kv, spec, a, a.max_model_len)
        if cap.kv_cache_tokens == want_tokens and f"{cap.max_concurrency:.2f}" == want_conc:
            hits.append(blocks)
    assert hits, f"no available bytes within {printed} GiB +- 0.005 reproduce {want_tokens} tokens / {want_conc}x"
    if "kv_cache_blocks" in obs:
        assert obs["kv_cache_blocks"] in hits


def test_gpt_oss_token_formula_is_the_pre_0_20_2_one(cases):
    """0.19.0 prints num_blocks // 2 groups * 16, not int(316.07 x 8192) = 2,589,245."""
    spec = spec_of("openai/gpt-oss-20b")
    gpu = get_gpu("h100-sxm")
    flags = VllmFlags(tensor_parallel_size=2, max_model_len=8192)
    for version, tokens in (("0.19.0", 2_591_776), ("0.20.2", int(323_972 / 1025 * 8192))):
        a = resolve_args(flags, traits=version_traits(version), model_max_len=spec.max_position_embeddings,
                         gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name, is_mla=False,
                         is_hybrid_mamba=False, num_attention_heads=spec.num_attention_heads)
        kv = mem.model_kv(spec, a, 8192)
        plan = kv.workers[0].plan
        assert [(g.spec.kind, len(g.layer_ids)) for g in plan.groups] == [("sliding_window", 12), ("full", 12)] or \
            [(g.spec.kind, len(g.layer_ids)) for g in plan.groups] == [("full", 12), ("sliding_window", 12)]
        assert plan.bytes_per_block == 12 * 16384
        cap = mem.capacity_from_available([323_972 * plan.bytes_per_block], kv, spec, a, 8192)
        assert cap.num_gpu_blocks == 323_972
        assert cap.kv_cache_tokens == tokens
        assert f"{cap.max_concurrency:.2f}" == "316.07"


def test_v0_rtx3090_failure_reproduces_blocks_and_error(cases):
    """vllm#10517 (V0, 2024): kv_cache_size=2.89GiB -> 1478 blocks, 0.82x, and V0's exact error."""
    case = cases["vllm-llama31-8b-3090-29k-fail"]
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    gpu = get_gpu("rtx-3090")
    flags = VllmFlags(gpu_memory_utilization=0.9, max_model_len=29000)
    a = resolve_args(flags, traits=version_traits("0.6.4"), model_max_len=spec.max_position_embeddings,
                     gpu_memory_bytes=gpu.memory_bytes, gpu_name=gpu.name, is_mla=False, is_hybrid_mamba=False,
                     num_attention_heads=spec.num_attention_heads)
    kv = mem.model_kv(spec, a, 29000)
    cap = mem.capacity_from_available([1478 * kv.workers[0].plan.bytes_per_block], kv, spec, a, 29000)
    assert cap.num_gpu_blocks == case["observed"]["gpu_blocks"]
    assert f"{cap.max_concurrency:.2f}" == "0.82"
    assert cap.error == case["observed"]["error"]
    # and the printed 2.89 GiB is consistent with 1478 blocks of 2 MiB
    assert round(1478 * kv.workers[0].plan.bytes_per_block / GiB, 2) == 2.89
