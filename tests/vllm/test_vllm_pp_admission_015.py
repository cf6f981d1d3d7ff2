"""vLLM 0.14.1-0.16.0 check one request against the whole model's KV under pipeline parallelism.

``get_kv_cache_configs`` (vllm/v1/core/kv_cache_utils.py @ v0.14.1 l.1513, v0.15.1 l.1515, v0.16.0
l.1515) runs ``_check_enough_kv_cache_memory(min(available_memory), ...)`` on the *global* KV cache
groups -- every PP stage's layers -- before projecting them to the workers; from v0.17.0 each worker
checks its own projected groups. Real log: vllm-project/vllm#34076 (0.15.2rc1, PP 2, Qwen3-Coder-30B-A3B
FP8: 48 layers x 4 KV heads x 128, bf16 KV; printed "(24.0 GiB KV cache is needed ... (3.18 GiB) ...
estimated maximum model length is 34736"), tests/doctor/real_logs/vllm-34076-pp2-qwen3-coder-fail.log.

Worked by hand: a bf16-KV page holds 16 tokens x 4 heads x 128 x 2 (K, V) x 2 B = 32,768 B, one
request at 262,144 tokens needs 16,384 blocks per layer, so 48 layers need 48 x 16,384 x 32,768 B =
24 GiB and each PP-2 stage (24 layers) 12 GiB.
"""
from __future__ import annotations

from kvscope.engines.vllm import kv_cache as kvc
from kvscope.engines.vllm.release import version_traits
from kvscope.units import GiB

PAGE = 16 * 4 * 128 * 2 * 2  # block 16, 4 KV heads x 128, K and V, bf16
AVAILABLE = int(3.18 * GiB)


def _configs(version: str):
    spec = kvc.KVCacheSpec(kvc.FULL_ATTN, 16, PAGE, geometry=(4, 128, 2))
    groups, padding = kvc.get_kv_cache_groups({i: spec for i in range(48)}, version_traits(version))
    plans = [kvc.make_plan(kvc.project_to_worker(groups, set(range(s, s + 24))), padding) for s in (0, 24)]
    cfg = kvc.SchedulerView(max_model_len=262_144, max_num_batched_tokens=8192, in_flight_tokens=8192)
    return kvc.kv_cache_configs(plans, [AVAILABLE, AVAILABLE], cfg, version_traits(version))


def test_015_checks_all_layers_under_pp():
    res = _configs("0.15.1")
    assert res.needed_memory_bytes == (24 * GiB,)  # one check, the whole model
    assert res.check_memory_bytes == (AVAILABLE,)
    assert "(24.0 GiB KV cache is needed" in res.error
    # 3.18 GiB // (48 layers x 32,768 B) = 2,170 blocks -> 34,720 tokens (the log's 34,736 is within
    # the +-0.005 GiB rounding of the printed 3.18)
    assert res.estimated_max_model_len == 34_720


def test_017_checks_each_stage():
    res = _configs("0.17.0")
    assert res.needed_memory_bytes == (12 * GiB, 12 * GiB)
    assert "(12.0 GiB KV cache is needed" in res.error
    assert res.estimated_max_model_len == 69_456
