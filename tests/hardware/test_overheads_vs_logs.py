"""Startup overhead estimates (hardware/overhead.py, vLLM profile-term estimates) against real logs.

Data: tests/hardware/overhead_logs.jsonl — one row per (log, quantity), the exact logged lines, the
figures read from them, split train / heldout / excluded, and the check each row gets with its
justification (``check_reason``): "point" (every rank within ``tolerance_gib`` or
``tolerance_rel``), "bounds" (every rank within the estimate's [low, high]) or "report" (in the
accuracy table only). Table: docs/overheads-accuracy.md.
"""

from __future__ import annotations

import json
import statistics
import warnings
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvscope.engines.vllm import memory as vmem
from kvscope.engines.vllm.plan import VllmFlags, plan_vllm
from kvscope.hardware import overhead as ov
from kvscope.hardware.gpus import get_gpu
from kvscope.units import GiB, KiB, MiB

ROWS = [json.loads(line) for line in (Path(__file__).parent / "overhead_logs.jsonl").read_text().splitlines()
        if line.strip()]


@lru_cache(maxsize=None)
def _spec(model: str):
    from kvscope.catalog import load_model_source
    from kvscope.model.spec import ModelSpec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = load_model_source(model)
        return ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)


def _args(tp: int) -> SimpleNamespace:
    return SimpleNamespace(tp=tp, pp=1, dp=1, enforce_eager=False)


def estimate(row: dict) -> tuple[float, float, float]:
    """(estimate, low, high) in GiB for one row, from kvscope's estimators."""
    q = row["quantity"]
    gpu = get_gpu(row["gpu"]) if row.get("gpu") else None
    tp = row.get("tp") or 1
    if q == "sglang_context":
        o = ov.cuda_context(gpu)
        return o.estimate_bytes / GiB, o.low_bytes / GiB, o.high_bytes / GiB
    if q == "sglang_init_mem_usage":
        o = ov.communicators(gpu, tp, ov.custom_all_reduce_enabled(gpu, tp))
        return o.estimate_bytes / GiB, o.low_bytes / GiB, o.high_bytes / GiB
    if q == "vllm_init_used":
        c = ov.cuda_context(gpu)
        m = ov.communicators(gpu, tp, ov.custom_all_reduce_enabled(gpu, tp), engine="vllm")
        return ((c.estimate_bytes + m.estimate_bytes) / GiB, (c.low_bytes + m.low_bytes) / GiB,
                (c.high_bytes + m.high_bytes) / GiB)
    if q == "vllm_non_torch":
        e = vmem.non_torch_estimate(gpu, _args(tp))
        return e.bytes / GiB, e.low_bytes / GiB, e.high_bytes / GiB
    if q == "vllm_non_torch_tp_delta":
        d = vmem.non_torch_estimate(gpu, _args(tp)).bytes - vmem.non_torch_estimate(gpu, _args(1)).bytes
        return d / GiB, d / GiB, d / GiB
    if q == "vllm_cudagraph":
        e = vmem.cudagraph_estimate(None, _args(tp))
        return e.bytes / GiB, e.low_bytes / GiB, e.high_bytes / GiB
    if q == "vllm_activation_peak":
        flags = VllmFlags(**row["flags"])
        d = plan_vllm(_spec(row["model"]), gpu, flags, row["engine_version"]).ranks[0].decision
        lo, hi = d.activation_peak_bounds
        return d.activation_peak_bytes / GiB, lo / GiB, hi / GiB
    if q == "cuda_total":
        return gpu.cuda_total_bytes / GiB, gpu.cuda_total_bytes / GiB, gpu.cuda_total_bytes / GiB
    raise AssertionError(f"unknown quantity {q}")


CHECKED = [r for r in ROWS if r["check"] in ("point", "bounds")]


@pytest.mark.parametrize("row", CHECKED, ids=[r["id"] for r in CHECKED])
def test_row_within_tolerance(row):
    est, low, high = estimate(row)
    for rank, obs in row["observed_gib"].items():
        if row["check"] == "bounds":
            assert low <= obs <= high, (rank, obs, low, high, row["check_reason"])
            continue
        tol = row["tolerance_gib"] if row["tolerance_gib"] is not None else row["tolerance_rel"] * obs
        assert abs(est - obs) <= tol + 1e-9, (rank, obs, est, tol, row["check_reason"])


def test_rows_are_well_formed():
    """Every row names its source and quotes the lines its figures come from; figures used as
    observations appear verbatim in those lines (or are the stated difference of such figures)."""
    ids = set()
    for r in ROWS:
        assert r["id"] not in ids
        ids.add(r["id"])
        assert r["source"] and r["logged"] and r["split"] in ("train", "heldout", "excluded")
        assert r["check"] in ("point", "bounds", "report") and r["check_reason"]
        if r["quantity"] in ("sglang_init_mem_usage", "vllm_cudagraph", "cuda_total"):
            text = "\n".join(r["logged"])
            for obs in r["observed_gib"].values():
                assert f"{obs:.2f}" in text or f"{obs:g}" in text, (r["id"], obs)


def test_heldout_rows_exist_for_each_fitted_constant():
    """Every fitted constant has held-out rows: context (fixed part), NCCL NVLink / PCIe, non-torch."""
    held = {(r["quantity"], r.get("fabric")) for r in ROWS if r["split"] == "heldout"}
    assert ("sglang_context", "pcie") in held and ("sglang_context", "nvlink") in held
    assert ("sglang_init_mem_usage", "nvlink") in held and ("vllm_init_used", "nvlink") in held
    assert ("vllm_init_used", "pcie") in held and ("vllm_non_torch", "pcie") in held
    assert ("vllm_non_torch_tp_delta", "nvlink") in held


# ------------------------------------------------------------------------------------------------
# Exact formula tests


def test_nccl_connection_bytes():
    """SIMPLE 4 MiB + LL128 120x640x8x8 + LL 8x512x8x16 (NCCL device.h defaults)."""
    assert ov.NCCL_SIMPLE_BUFFSIZE == 4_194_304
    assert ov.NCCL_LL128_BUFFSIZE == 4_915_200
    assert ov.NCCL_LL_BUFFSIZE == 524_288
    assert ov.nccl_connection_bytes() == 9_633_792


def test_custom_all_reduce_bytes():
    """meta (8 MiB + meta_size -> 10 MiB of 2 MiB pages) + 8 MiB buffer + 8 MiB rank_data."""
    assert ov.custom_all_reduce_bytes(ov.CAR_MAX_SIZE_CUDA) == 26 * MiB
    assert ov.custom_all_reduce_bytes(ov.CAR_MAX_SIZE_ROCM) == 18 * MiB + 16 * MiB + 8 * MiB
    assert ov.custom_all_reduce_bytes(ov.CAR_MAX_SIZE_ROCM, rank_data_bytes=ov.CAR_MAX_SIZE_ROCM) == 50 * MiB


def test_vllm_allreduce_buffers_bytes():
    """vLLM 0.19 all_reduce_utils.py tables: sm90 TP2 custom AR capped at 8 MiB + 64 MiB symm mem;
    sm90 TP8 custom AR 256 KiB (2 + 2 MiB pages + 8 MiB rank_data) + 64 MiB; sm100 TP4 2 MiB + 32 MiB."""
    assert ov.vllm_allreduce_buffers_bytes("sm90", 2) == 26 * MiB + 64 * MiB
    assert ov.vllm_allreduce_buffers_bytes("sm90", 8) == 12 * MiB + 64 * MiB
    assert ov.vllm_allreduce_buffers_bytes("sm100", 4) == (4 + 2 + 8) * MiB + 32 * MiB
    assert ov.vllm_allreduce_buffers_bytes("sm120", 2) == 26 * MiB  # no table entry: no symm mem


def test_cuda_context_formula():
    """fixed 0.162 GiB + SMs x threads/SM x 1 KiB: H100/H200 132 x 2048 (264 MiB), L4 58 x 1536."""
    assert ov.cuda_local_memory_reserve_bytes(132, 2048) == 264 * MiB
    assert ov.cuda_local_memory_reserve_bytes(58, 1536) == 58 * 1536 * KiB
    assert ov.cuda_context(get_gpu("h200")).estimate_bytes == ov.CUDA_CONTEXT_FIXED_BYTES_EST + 264 * MiB
    assert ov.cuda_context(get_gpu("h100")).estimate_bytes == ov.cuda_context(get_gpu("h200")).estimate_bytes
    assert ov.cuda_context(get_gpu("l4")).estimate_bytes == ov.CUDA_CONTEXT_FIXED_BYTES_EST + 58 * 1536 * KiB
    assert "estimated" in ov.cuda_context(get_gpu("l4")).source


def test_communicators_do_not_scale_with_peers():
    """Ring/tree neighbours, not peers: TP2 and TP8 on NVLink get the same NCCL figure."""
    h200 = get_gpu("h200")
    assert ov.communicators(h200, 2, True).estimate_bytes == ov.communicators(h200, 8, True).estimate_bytes
    assert ov.communicators(h200, 8, True).estimate_bytes == (
        ov.DIST_INIT_FIXED_BYTES_EST + ov.NCCL_INIT_BYTES_EST["nvlink"] + 26 * MiB)
    assert ov.communicators(get_gpu("l4"), 4, False).estimate_bytes == (
        ov.DIST_INIT_FIXED_BYTES_EST + ov.NCCL_INIT_BYTES_EST["pcie"])
    assert ov.communicators(h200, 1, False).estimate_bytes == ov.DIST_INIT_FIXED_BYTES_EST
    assert "estimated" in ov.communicators(h200, 8, True).source


def test_vllm_h100_tp1_initial_free_reproduced():
    """Held out: 'Initial free memory: 78.68 GiB' of 79.19 GiB at TP1 (llm-d, vLLM 0.19) = context
    0.42 GiB + 0.09 GiB distributed init, to the printed 0.01 GiB."""
    h100 = get_gpu("h100-sxm")
    used = ov.cuda_context(h100).estimate_bytes + ov.communicators(h100, 1, False).estimate_bytes
    assert round((h100.cuda_total_bytes - used) / GiB, 2) == 78.68


def test_vllm_forward_copies_dense_vs_moe():
    """Dense 3 hidden copies (mechanism, V0 3090 logs held out), MoE 7 (fit on Mixtral)."""
    assert vmem.FORWARD_HIDDEN_COPIES_DENSE == 3 and vmem.FORWARD_HIDDEN_COPIES_MOE == 7


def test_heldout_median_errors_summary():
    """Median absolute held-out error of the checked CUDA overhead rows stays under 0.15 GiB."""
    errs = []
    for r in ROWS:
        if r["split"] != "heldout" or r["check"] != "point" or r["quantity"] == "vllm_activation_peak":
            continue
        est = estimate(r)[0]
        errs += [abs(est - o) for o in r["observed_gib"].values()]
    assert len(errs) >= 8
    assert statistics.median(errs) < 0.15, errs
