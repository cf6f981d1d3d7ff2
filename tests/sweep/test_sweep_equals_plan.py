"""Every sweep point equals ``kvscope.plan`` at that point: tokens, request limit, vLLM's max
concurrency, verdict and error text, on random grids of both engines (hypothesis). The models cover
each evaluation path of sweep/sglang.py and sweep/vllm.py: plain, MLA, MoE, multimodal, hybrid SWA,
mamba hybrids, DeepSeek-V4, pipeline stages, older releases, measured inputs and refused inputs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvscope
from kvscope.errors import KvscopeError
from kvscope.sweep import point_outcome
from kvscope.sweep.grid import axis_name

SGLANG_MODELS = ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V2-Lite", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-VL-8B-Instruct",
                 "openai/gpt-oss-20b", "Qwen/Qwen3-Next-80B-A3B-Thinking", "google/gemma-2-9b-it",
                 "deepseek-ai/DeepSeek-V4-Flash", "nvidia/Nemotron-H-56B-Base-8K", "meta-llama/Llama-4-Scout-17B-16E-Instruct")
VLLM_MODELS = ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V2-Lite", "Qwen/Qwen3-30B-A3B", "openai/gpt-oss-20b",
               "Qwen/Qwen3-Next-80B-A3B-Thinking", "google/gemma-2-9b-it", "deepseek-ai/DeepSeek-V4-Flash")
GPUS = ("h100-sxm", "a100-40gb", "mi300x", "rtx-pro-6000", "l4")
SGLANG_VERSIONS = (None, None, "0.4.6.post5", "0.5.6", "0.5.9", "0.5.13", "0.5.14", "0.5.18")
VLLM_VERSIONS = (None, None, "0.6.6", "0.10.2", "0.11.0", "0.14.1", "0.17.0", "0.19.0")

FRACTIONS = st.lists(st.sampled_from([None, 0.0, 0.05, 0.3, 0.5, 0.62, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.93, 0.95,
                                      0.99, 1.0, 1.3]), min_size=1, max_size=4, unique=True)
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(model, gpu, engine, version, grid, fixed):
    names = [axis_name(n) for n in grid]
    points = [dict(zip(names, values)) for values in itertools.product(*grid.values())]
    try:
        wants = [tuple(point_outcome(model, gpu, engine=engine, engine_version=version, **fixed, **p))
                 for p in points]
    except Exception as exc:  # noqa: BLE001 -- plan's own internal error: the sweep raises it too
        with pytest.raises(type(exc)):
            kvscope.sweep(model, gpu, grid=grid, engine=engine, engine_version=version, **fixed)
        return
    try:
        s = kvscope.sweep(model, gpu, grid=grid, engine=engine, engine_version=version, **fixed)
    except KvscopeError as exc:  # an input no point changes (model, GPU, --quantization): refused once
        assert all(w[3:] == ("invalid", str(exc)) for w in wants), (exc, wants[:2])
        return
    assert len(s.rows) == len(points)
    for row, point, want in zip(s.rows, points, wants):
        assert row[:len(names)] == tuple(point.values())
        assert row[len(names):] == want, (engine, model, gpu, version, fixed, point)


@SETTINGS
@given(model=st.sampled_from(SGLANG_MODELS), gpu=st.sampled_from(GPUS), version=st.sampled_from(SGLANG_VERSIONS),
       fractions=FRACTIONS,
       contexts=st.lists(st.sampled_from([None, 0, 1, 777, 4096, 32768, 131072, 10**8]), min_size=1, max_size=2,
                         unique=True),
       tps=st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=2, unique=True),
       dtypes=st.lists(st.sampled_from(["auto", "fp8_e4m3"]), min_size=1, max_size=2, unique=True),
       fixed=st.sampled_from([{}, {}, {"pp_size": 2}, {"max_running_requests": 48}, {"max_total_tokens": 20000},
                              {"page_size": 64}, {"pre_load_free_gib": 70.0, "post_load_free_gib": 40.0},
                              {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                               "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4},
                              {"enable_dp_attention": True, "dp_size": 2}, {"quantization": "fp8"}]))
def test_sglang_sweep_equals_plan(model, gpu, version, fractions, contexts, tps, dtypes, fixed):
    grid = {"mem_fraction_static": fractions, "context_length": contexts, "tp": tps, "kv_cache_dtype": dtypes}
    _check(model, gpu, "sglang", version, grid, fixed)


@SETTINGS
@given(model=st.sampled_from(VLLM_MODELS), gpu=st.sampled_from(GPUS), version=st.sampled_from(VLLM_VERSIONS),
       utils=FRACTIONS,
       lens=st.lists(st.sampled_from([None, -1, 1, 4096, 32768, 131072, 10**8]), min_size=1, max_size=2, unique=True),
       tps=st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=2, unique=True),
       dtypes=st.lists(st.sampled_from(["auto", "fp8"]), min_size=1, max_size=2, unique=True),
       fixed=st.sampled_from([{}, {}, {"pipeline_parallel_size": 2}, {"max_num_seqs": 48},
                              {"num_gpu_blocks_override": 500}, {"kv_cache_memory_bytes": "8G"},
                              {"available_kv_cache_gib": 20.0}, {"weights_gib": 30.0},
                              {"enforce_eager": True}, {"quantization": "fp8"}]))
def test_vllm_sweep_equals_plan(model, gpu, version, utils, lens, tps, dtypes, fixed):
    grid = {"gpu_memory_utilization": utils, "max_model_len": lens, "tp": tps, "kv_cache_dtype": dtypes}
    _check(model, gpu, "vllm", version, grid, fixed)


@pytest.mark.parametrize("engine,axis", [("sglang", "mem_fraction_static"), ("vllm", "gpu_memory_utilization")])
def test_no_fraction_axis_and_fixed_fraction(engine, axis):
    """Without a fraction axis the fixed flag (or the engine default) is the one value."""
    for fixed in ({}, {axis: 0.8}):
        _check("Qwen/Qwen3-8B", "h100-sxm", engine, None, {"tp": [1, 2]}, fixed)
