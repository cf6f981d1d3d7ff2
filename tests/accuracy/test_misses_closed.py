"""The misses issue #15 names, closed against the engines' released source and real logs.

- vLLM pipeline parallel: the pool is sized from the tightest stage (``get_kv_cache_configs`` takes the
  fewest blocks over the workers, v1/core/kv_cache_utils.py @ v0.19.1), in measured mode too, where
  only PP stage 0 prints "Available KV cache memory" (``info_once(scope="local")``). Real logs: the
  llm-d planner sweep, vLLM 0.19.0 on H100, Llama-3.1-8B PP2 / PP4 (tests/accuracy/llm_d_planner.jsonl).
- SGLang DeepSeek DSA (V3.2, GLM-5): ``--kv-cache-dtype auto`` is fp8_e4m3 on SM >= 10 and bfloat16
  on SM90 (server_args.py @ v0.5.6 ... arg_groups/overrides.py @ v0.5.23); 0.5.3/0.5.4 force fp8 on
  SM >= 10.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvscope
from kvscope.units import GiB, gib_to_bytes

HERE = Path(__file__).parent
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ROWS = {json.loads(line)["id"]: json.loads(line) for line in (HERE / "llm_d_planner.jsonl").open(encoding="utf-8")}
PP = {2: "lld19-meta-llama-llama-3-1-8b--tp1pp2dp1--8192", 4: "lld19-meta-llama-llama-3-1-8b--tp1pp4dp1--8192"}


def _pp_plan(pp: int, **measured):
    return kvscope.plan(LLAMA, "h100-sxm", engine="vllm", engine_version="0.19.0", max_model_len=8192,
                        pipeline_parallel_size=pp, gpu_memory_utilization=0.95, enable_prefix_caching=False, **measured)


@pytest.mark.parametrize("pp", [2, 4])
def test_pp_measured_budgets_follow_the_printed_stage(pp):
    """Stage 0's budget is the printed figure; every other stage differs from it by kvscope's estimated
    per-stage difference; the pool is the tightest stage's block count (the last stage: lm_head +
    sampler), not the printed stage's."""
    row = ROWS[PP[pp]]
    printed = row["measured"]["available_kv_cache_gib"]
    assert f"Available KV cache memory: {printed} GiB" in row["log_excerpt"]
    est, meas = _pp_plan(pp), _pp_plan(pp, available_kv_cache_gib=printed)
    stage_rank = [r for r in meas.ranks]  # TP1: one rank per stage
    avail = [r.decision.available_kv_cache_bytes for r in stage_rank]
    est_avail = [r.decision.available_kv_cache_bytes for r in est.ranks]
    assert avail[0] == gib_to_bytes(printed)
    assert [a - avail[0] for a in avail] == [e - est_avail[0] for e in est_avail]
    bytes_per_block = meas.ranks[-1].decision.bytes_per_block
    assert min(avail) == avail[-1] < avail[0]
    assert meas.extra.num_gpu_blocks == min(a // bytes_per_block for a in avail)
    # before: the printed stage-0 figure on every stage gave +1.4 % (PP2) / +1.3 % (PP4) tokens
    assert meas.kv_cache_tokens < gib_to_bytes(printed) // bytes_per_block * 16
    observed = row["observed"]["kv_tokens"]
    assert abs(meas.kv_cache_tokens - observed) / observed < 0.003


@pytest.mark.parametrize("pp", [2, 4])
def test_pp_prediction_from_flags_alone(pp):
    """PP-only layouts never all-reduce: no NCCL first-use buffers in the non-torch estimate (the logs
    print 0.07 GiB per stage), so the prediction lands on the printed pool."""
    row = ROWS[PP[pp]]
    assert "non-torch forward increase memory: 0.07GiB" in row["log_excerpt"]
    t = _pp_plan(pp)
    observed = row["observed"]["kv_tokens"]
    assert abs(t.kv_cache_tokens - observed) / observed < 0.001
    assert all(r.decision.non_torch_bytes < int(0.4 * GiB) for r in t.ranks)


CELL_FP8_576 = (576 + 132) * 61  # profile divides by the 576-wide latent + the 132-byte fp8 indexer (< 0.5.18)
CELL_FP8_656 = (656 + 132) * 61  # 0.5.18+: the 656-wide fp8 buffer (latent + scales + bf16 rope)
CELL_BF16 = (576 * 2 + 132) * 61


@pytest.mark.parametrize("version, gpu, flag, cell", [
    ("0.5.4", "b200", "auto", CELL_FP8_576),
    ("0.5.4", "b200", "bf16", CELL_FP8_576),  # 0.5.3/0.5.4: SM >= 10 forces fp8 whatever was passed
    ("0.5.6", "b200", "bf16", CELL_BF16),  # from 0.5.5 only `auto` is replaced
    ("0.5.9", "b200", "auto", CELL_FP8_576),
    ("0.5.9", "h200", "auto", CELL_BF16),  # SM90: bfloat16
    ("0.5.13", "h100-sxm", "fp8_e4m3", CELL_FP8_576),
    ("0.5.18", "b200", "auto", CELL_FP8_656),
    ("0.5.23", "b200", "auto", CELL_FP8_656),
    ("0.5.23", "h200", "auto", CELL_BF16),
    ("0.5.9", "mi355x", "auto", CELL_BF16),  # ROCm: get_device_capability() major 9
])
def test_dsa_kv_dtype_default_by_sm_and_release(version, gpu, flag, cell):
    t = kvscope.plan("deepseek-ai/DeepSeek-V3.2", gpu, engine="sglang", engine_version=version, tp_size=8,
                     kv_cache_dtype=flag)
    assert t.kv_cell_bytes == cell


def test_dense_models_keep_auto():
    """The DSA default does not touch other models: Llama on a B200 keeps bf16 under auto."""
    t = kvscope.plan(LLAMA, "b200", engine="sglang", engine_version="0.5.23")
    assert t.kv_cell_bytes == 2 * 8 * 128 * 2 * 32
