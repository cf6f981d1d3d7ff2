"""Doctor findings of a probe directory: a hook that never attached, a start-up hook never called
(``doctor/vllm_rules.probe_dir_findings``), from a real attachment report's shape."""

from __future__ import annotations

from kvscope.doctor.vllm_rules import PROBE_HOOK_MISSING, PROBE_HOOK_NEVER_FIRED, probe_dir_findings
from kvscope.record import Loose
from kvscope.timeline import Timeline


def _tl(probe, starts=True):
    return Timeline(source="probe", engine="vllm", engine_version="0.32.0", model="m", gpu=None, starts=starts,
                    error=None, kv_cache_tokens=None, max_running_requests=None, kv_cell_bytes=None,
                    kv_cache_bytes=None, weights_bytes=None, ranks=(), extra=Loose({"probe": probe}))


def test_a_target_found_nowhere_is_an_error():
    probe = {"not_found": {"get_kv_cache_configs": "vllm.v1.core.kv_cache_planning:get_kv_cache_configs "
                                                   "(module never imported) in vllm 0.32.0"},
             "never_fired": []}
    (f,) = probe_dir_findings(_tl(probe))
    assert f.code == PROBE_HOOK_MISSING and f.severity == "error"
    assert "kv_cache_planning" in f.message


def test_a_startup_hook_that_never_fired_in_a_started_run_is_a_warning():
    probe = {"not_found": {}, "never_fired": ["capture_model", "determine_available_memory"]}
    (f,) = probe_dir_findings(_tl(probe))
    assert f.code == PROBE_HOOK_NEVER_FIRED and "determine_available_memory" in f.message
    assert "capture_model" not in f.message  # CUDA graphs are not captured on every platform
    assert probe_dir_findings(_tl(probe, starts=None)) == []


def test_a_clean_report_has_no_findings():
    assert probe_dir_findings(_tl({"not_found": {}, "never_fired": ["MemorySnapshot.measure"]})) == []
