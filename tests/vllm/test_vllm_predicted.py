"""From model + GPU + flags alone, predicted "Available KV cache memory" for the H100 cases of
shared/logs is within 3 % of the printed value (table in docs/vllm.md)."""

from __future__ import annotations

import pytest

from kvscope.engines.vllm.plan import VllmFlags, plan_vllm
from kvscope.hardware.gpus import get_gpu
from kvscope.units import GiB

from vllm_case_data import spec_of

H100_CASES = [
    # id, model, version, flags, printed available GiB
    ("lld-vllm-llama31-8b-h100-tp1", "meta-llama/Llama-3.1-8B-Instruct", "0.19.0",
     VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192, enable_prefix_caching=False), 58.11),
    ("lld-vllm-gptoss20b-h100-tp2", "openai/gpt-oss-20b", "0.19.0",
     VllmFlags(tensor_parallel_size=2, max_model_len=8192, enable_prefix_caching=False), 59.32),
    ("lld-vllm-mixtral-8x7b-h100-tp2", "mistralai/Mixtral-8x7B-Instruct-v0.1", "0.19.0",
     VllmFlags(tensor_parallel_size=2, gpu_memory_utilization=0.95, max_model_len=8192), 28.44),
    ("lld-vllm-qwen3-14b-h100-v0160", "Qwen/Qwen3-14B", "0.16.0",
     VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192), 41.94),
    ("lld-vllm-qwen3-14b-h100-v0170", "Qwen/Qwen3-14B", "0.17.0",
     VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192), 45.34),
]


@pytest.mark.parametrize("case_id,model,version,flags,printed", H100_CASES, ids=[c[0] for c in H100_CASES])
def test_available_kv_within_3_percent(case_id, model, version, flags, printed, cases):
    assert f"{printed:.2f} GiB" == cases[case_id]["observed"]["available_kv_cache_gib"]
    t = plan_vllm(spec_of(model), get_gpu("h100-sxm"), flags, version)
    predicted = t.extra.available_kv_cache_bytes / GiB
    assert abs(predicted - printed) / printed < 0.03, (predicted, printed)
    assert t.starts and "available_kv_cache_bytes" in t.estimated


def test_requested_memory_matches_logs():
    """'Requested memory: 0.950000 (util), 75.23 GiB' and '0.900000 (util), 71.27 GiB' on 79.19 GiB."""
    t95 = plan_vllm(spec_of("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("h100-sxm"),
                    VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192), "0.19.0")
    t90 = plan_vllm(spec_of("openai/gpt-oss-20b"), get_gpu("h100-sxm"),
                    VllmFlags(tensor_parallel_size=2, max_model_len=8192), "0.19.0")
    assert round(t95.extra.requested_memory_bytes / GiB, 2) == 75.23
    assert round(t90.extra.requested_memory_bytes / GiB, 2) == 71.27
    assert t90.extra.gpu_memory_utilization == 0.9


def test_version_change_in_activation_peak_is_modelled():
    """0.16 -> 0.17: the triton top-k/top-p sampler dropped the profiled peak 5.64 -> 2.23 GiB."""
    spec = spec_of("Qwen/Qwen3-14B")
    f = VllmFlags(gpu_memory_utilization=0.95, max_model_len=8192)
    a16 = plan_vllm(spec, get_gpu("h100-sxm"), f, "0.16.0").ranks[0].decision.activation_peak_bytes / GiB
    a17 = plan_vllm(spec, get_gpu("h100-sxm"), f, "0.17.0").ranks[0].decision.activation_peak_bytes / GiB
    assert abs(a16 - 5.64) < 0.2 and abs(a17 - 2.23) < 0.2
