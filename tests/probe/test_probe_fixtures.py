"""`kvscope probe` on fixture engines launched as multi-process programs (spawn children).

The fixtures (tests/probe/fixtures/) mirror the real module paths and signatures of SGLang 0.5.9
and 0.5.23 and vLLM 0.11.0 and 0.19.1 on a fake 80 GiB device; the expected figures below are
the engines' own arithmetic on that device, written out.
"""

from __future__ import annotations

import jsonschema
import pytest

from kvscope.hooks import Target
from kvscope.schema import output_schema
from kvscope.hooks.sglang import TARGETS as SGLANG_TARGETS
from kvscope.report.probe_text import render_attachment

from .conftest import run_fixture, run_plain

GiB = 1 << 30
MiB = 1 << 20
# Fake device: 80 GiB; 1 GiB CUDA context + NCCL; GPU i has i x 256 MiB less; TP=2.
PRE_GIB = (80 * GiB - GiB - 256 * MiB) / GiB  # MIN over ranks -> 78.75
WEIGHTS_PER_RANK = 16384000000 // 2
AVAILABLE_GIB = (80 * GiB - GiB - WEIGHTS_PER_RANK - 256 * MiB) / GiB
CELL = 8 // 2 * 128 * 36 * 2 * 2  # kv heads per rank x head_dim x layers x (K,V) x bf16
TOKENS = int((AVAILABLE_GIB - PRE_GIB * (1 - 0.8)) * (1 << 30)) // CELL


def _calls(proc, target):
    return [r for r in proc.records if r.get("event") == "call" and r["target"] == target]


def _returns(proc, target):
    return [r for r in proc.records if r.get("event") in ("return", "raise")
            and r["target"] == target]


@pytest.mark.parametrize("engine_dir,version", [("sglang_0_5_9", "0.5.9"),
                                                ("sglang_0_5_23", "0.5.23")])
def test_sglang_records_every_rank(tmp_path, model_path, engine_dir, version):
    run = run_fixture(tmp_path, engine_dir, model_path, "--tp", "2")
    assert run.returncode == 0
    assert TOKENS == 806392 and f"'max_total_num_tokens': {TOKENS}" in run.stdout
    procs = run.processes
    assert len(procs) == 3  # launcher + one scheduler process per TP rank, one file each
    ranks = {p.rank.get("tp_rank"): p for p in procs if p.rank}
    assert sorted(ranks) == [0, 1]
    for tp_rank, proc in ranks.items():
        assert proc.rank["gpu_id"] == tp_rank and proc.rank["tp_size"] == 2
        assert proc.engine_version == version
    tl = run.timeline
    assert tl.source == "probe" and tl.engine == "sglang" and tl.engine_version == version
    jsonschema.validate(tl.to_dict(), output_schema())  # the one schema of every --json output
    assert tl.kv_cache_tokens == TOKENS and tl.kv_cell_bytes == CELL and tl.starts is True
    assert [r.rank for r in tl.ranks] == [0, 1]
    for r in tl.ranks:
        d = r.decision
        assert d["pre_model_load_memory_gib"] == PRE_GIB == 78.75
        assert d["available_gpu_memory_gib"] == AVAILABLE_GIB
        assert d["mem_fraction_static"] == 0.8
        assert d["cell_size_bytes"] == CELL
        assert d["max_total_num_tokens"] == TOKENS
        assert d["available_bytes"] == int((AVAILABLE_GIB - PRE_GIB * 0.2) * (1 << 30))
        assert d["weight_load_mem_usage_gib"] == WEIGHTS_PER_RANK / GiB
        names = [p.name for p in r.phases]
        assert names[:2] == ["init", "load_weights"] and "profile" in names
        load = r.phase("load_weights")
        assert load.used_bytes == WEIGHTS_PER_RANK  # torch.cuda.mem_get_info around load_model
        assert load.free_bytes_before == 80 * GiB - GiB - r.rank * 256 * MiB
    report = run.report
    assert report.ok, report.not_found
    for p in report.processes:
        if p.label.startswith("TP"):
            assert {"get_available_gpu_memory", "load_model", "init_torch_distributed"} <= set(p.fired)
        else:
            assert p.fired == {}  # the launcher imports the scheduler module but runs nothing


def test_sglang_probe_records_the_refusal(tmp_path, model_path):
    run = run_fixture(tmp_path, "sglang_0_5_23", model_path, "--tp", "2",
                      "--mem-fraction-static", "0.05")
    assert run.returncode == 1
    tl = run.timeline
    assert tl.starts is False and tl.error.startswith("Loaded weights leave no GPU memory")
    for r in tl.ranks:
        d = r.decision
        assert d["rest_memory_gib"] == AVAILABLE_GIB - PRE_GIB * (1 - 0.05) < 0
        assert d["slack_gib"] == PRE_GIB * (1 - 0.05)
        assert d["min_mem_fraction_static"] == pytest.approx(1 - AVAILABLE_GIB / PRE_GIB)
        assert d["error_type"] == "ValueError"


@pytest.mark.parametrize("engine_dir,version", [("vllm_0_11_0", "0.11.0"),
                                                ("vllm_0_19_1", "0.19.1")])
def test_vllm_records_every_rank(tmp_path, engine_dir, version):
    run = run_fixture(tmp_path, engine_dir, "--tp", "2")
    assert run.returncode == 0
    requested = 80 * GiB * 0.9
    non_kv = 16 * GiB // 2 + 2 * GiB + 64 * MiB  # weights + activation peak + non-torch growth
    available = int(requested - non_kv)
    page = 16 * (8 // 2) * 128 * 2 * 2
    blocks = available // page // 36
    assert f"num_gpu_blocks=[{blocks}, {blocks}]" in run.stdout
    tl = run.timeline
    assert tl.engine == "vllm" and tl.engine_version == version
    jsonschema.validate(tl.to_dict(), output_schema())
    assert tl.extra["num_gpu_blocks"] == blocks == 56376
    assert tl.kv_cache_tokens == blocks * 16
    assert [r.rank for r in tl.ranks] == [0, 1]
    for r in tl.ranks:
        d = r.decision
        assert d["requested_memory_bytes"] == requested
        assert d["non_kv_cache_memory_bytes"] == non_kv
        assert d["available_kv_cache_memory_bytes"] == available
        assert d["weights_memory_bytes"] == 8 * GiB
        assert d["init_free_bytes"] == 80 * GiB - GiB - r.rank * 256 * MiB
        assert d["num_blocks"] == blocks
        assert d["num_blocks_per_worker"] == [blocks, blocks]  # from the EngineCore process
        assert d["available_memory_bytes_per_worker"] == [available, available]
        if version == "0.19.1":
            assert d["cudagraph_memory_estimate_bytes"] == 3 * MiB * 67
        assert r.phase("load_weights").used_bytes == 8 * GiB
        assert r.phase("init").free_bytes_before is None  # CUDA not initialised at entry
    worker = next(p for p in run.processes if p.rank.get("rank") == 1)
    first = _calls(worker, "init_device")[0]
    assert first["mem"] is None  # never reads the device before the engine initialised CUDA
    assert _returns(worker, "init_device")[0]["mem"]["free_bytes"] == 80 * GiB - GiB - 256 * MiB
    assert run.report.ok, run.report.not_found


def test_missing_target_is_reported_loudly(tmp_path, model_path):
    renamed = Target(id="profile_renamed", engine="sglang",
                     module="sglang.srt.model_executor.model_runner_kv_cache_mixin",
                     qualname="ModelRunnerKVCacheMixin.profile_max_num_token_v2",
                     versions=">=0.5.7,<0.5.14", phase="profile")
    never = Target(id="never_imported", engine="sglang", module="sglang.srt.not_a_module",
                   qualname="f")
    run = run_fixture(tmp_path, "sglang_0_5_9", model_path, "--tp", "2",
                      targets=SGLANG_TARGETS + (renamed, never))
    assert run.returncode == 0 and run.timeline.kv_cache_tokens == TOKENS
    report = run.report
    assert not report.ok
    assert "ModelRunnerKVCacheMixin has no attribute 'profile_max_num_token_v2'" in \
        report.not_found["profile_renamed"]
    assert "sglang 0.5.9" in report.not_found["profile_renamed"]
    assert "never imported" in report.not_found["never_imported"]
    text = render_attachment(report)
    assert "NOT FOUND: target profile_renamed" in text
    for p in report.processes:  # every process that loaded the module says so
        assert "profile_renamed" in p.missing


@pytest.mark.parametrize("fault", ["enter", "exit", "attach", "write"])
def test_agent_fault_changes_nothing(tmp_path, model_path, fault):
    args = (model_path, "--tp", "2")
    rc, out = run_plain("sglang_0_5_9", *args)
    run = run_fixture(tmp_path, "sglang_0_5_9", *args, extra_env={"KVSCOPE_PROBE_FAULT": fault})
    assert (run.returncode, run.stdout) == (rc, out) == (0, out)
    if fault != "write":
        errors = [r for p in run.processes for r in p.records if r["event"] == "agent_error"]
        assert errors and all("injected" in r["error"] for r in errors)


def test_agent_fault_keeps_failure_exit_code(tmp_path, model_path):
    args = (model_path, "--tp", "2", "--mem-fraction-static", "0.05")
    rc, out = run_plain("sglang_0_5_9", *args)
    run = run_fixture(tmp_path, "sglang_0_5_9", *args, extra_env={"KVSCOPE_PROBE_FAULT": "exit"})
    assert rc == 1 and (run.returncode, run.stdout) == (rc, out)


def test_rank_dying_mid_start_keeps_its_records(tmp_path, model_path):
    run = run_fixture(tmp_path, "sglang_0_5_9", model_path, "--tp", "2",
                      extra_env={"KVSCOPE_FIXTURE_DIE_IN": "load_model"})
    assert run.returncode == 1
    ranks = [p for p in run.processes if p.rank]
    assert len(ranks) == 2
    for proc in ranks:
        assert not proc.events("exit")  # os._exit: no atexit
        assert _returns(proc, "init_torch_distributed")[0]["outputs"] == {
            "pre_model_load_memory_gib": PRE_GIB}
        assert _calls(proc, "load_model") and not _returns(proc, "load_model")
    tl = run.timeline
    for r in tl.ranks:
        assert r.decision["pre_model_load_memory_gib"] == PRE_GIB
        assert "no return record" in r.phase("load_weights").note
