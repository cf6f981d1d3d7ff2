"""doctor reads failed starts for both engines: the phase, the engine's own error, its figures and the
fix for that phase (issue #15, deliverable 3).

The logs below are built line by line from the engines' released formats and messages: the log
prefixes of the real logs in tests/doctor/real_logs, torch's out-of-memory text, SGLang's
``Exception(f"Capture cuda graph failed: {e}\\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")``
(model_executor/cuda_graph_runner.py, 0.5.6) and vLLM's pydantic ``Value error, User-specified
max_model_len (…) is greater than the derived max_model_len (…)`` (config/model.py, 0.11.0 and 0.33.0).
"""

from __future__ import annotations

from kvscope.cli import main
from kvscope.doctor import diagnose_text

SG_HEAD = (
    "[2025-09-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-32B', tp_size=1, "
    "mem_fraction_static=0.88, page_size=1, context_length=None)\n"
    "[2025-09-01 10:00:20 TP0] Load weight begin. avail mem=78.44 GB\n"
)
SG_LOADED = (
    "[2025-09-01 10:01:10 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=17.20 GB, "
    "mem usage=61.24 GB.\n"
    "[2025-09-01 10:01:11 TP0] KV Cache is allocated. #tokens: 27136, K size: 3.31 GB, V size: 3.31 GB\n"
    "[2025-09-01 10:01:11 TP0] Memory pool end. avail mem=10.40 GB\n"
)
TORCH_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity "
             "of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory "
             "in use.\n")
SG_EXC = ("[2025-09-01 10:01:30 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2790, in run_scheduler_process\n'
          "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n")


def _only_error(r, code):
    errors = [f for f in r.findings if f.severity == "error"]
    assert [f.code for f in errors] == [code], [f.code for f in r.findings]
    return errors[0]


def test_sglang_oom_while_loading_weights():
    r = diagnose_text(SG_HEAD + SG_EXC + TORCH_OOM)
    f = _only_error(r, "load-oom")
    assert r.timeline.starts is False and r.timeline.extra.failed_at == "load_weights"
    assert f.message == ("SGLang failed at weight load: out of memory: GPU 0 tried to allocate 1.5 GiB with 1.02 GiB "
                         "free of 79.19 GiB")
    assert "--tp" in f.fix and r.timeline.error.startswith("L6: torch.OutOfMemoryError")


def test_sglang_oom_at_kv_allocation():
    head_loaded = SG_LOADED.splitlines(keepends=True)[0]  # weights loaded, the pool never printed
    r = diagnose_text(SG_HEAD + head_loaded + SG_EXC + TORCH_OOM)
    _only_error(r, "kv-alloc-oom")
    assert r.timeline.extra.failed_at == "kv_alloc" and r.timeline.starts is False


def test_sglang_graph_capture_failure_is_named_with_sglangs_advice():
    capture = ("[2025-09-01 10:01:12 TP0] Capture cuda graph begin. This can take up to several minutes. "
               "avail mem=10.38 GB\n")
    failed = ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
              "total capacity of 79.19 GiB of which 1.02 GiB is free.\n"
              "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n")
    r = diagnose_text(SG_HEAD + SG_LOADED + capture + SG_EXC + failed)
    f = _only_error(r, "cuda-graph-oom")
    assert r.timeline.starts is False and r.timeline.extra.failed_at == "cuda_graph"
    assert "tried to allocate 1.5 GiB with 1.02 GiB free" in f.message
    assert "--mem-fraction-static" in f.fix and "--cuda-graph-max-bs" in f.fix
    assert r.timeline.kv_cache_tokens == 27136  # the pool it had allocated is still reported


def test_sglang_oom_after_ready_is_a_runtime_error_not_a_failed_start():
    ready = "[2025-09-01 10:02:00] The server is fired up and ready to roll!\n"
    r = diagnose_text(SG_HEAD + SG_LOADED + ready + SG_EXC + TORCH_OOM)
    assert "runtime-oom" in r.codes() and r.timeline.starts is True
    assert r.timeline.extra.failed_at is None


VL_HEAD = (
    "(APIServer pid=1) INFO 08-20 10:00:00 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
    "(APIServer pid=1) INFO 08-20 10:00:00 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-8B', "
    "'max_model_len': 32768}\n"
)
VL_SIZED = (
    "(EngineCore_0 pid=9) INFO 08-20 10:00:30 [default_loader.py:262] Loading weights took 3.10 seconds\n"
    "(EngineCore_0 pid=9) INFO 08-20 10:00:31 [gpu_model_runner.py:2007] Model loading took 15.2683 GiB and "
    "3.704 seconds\n"
    "(EngineCore_0 pid=9) INFO 08-20 10:00:40 [gpu_worker.py:276] Available KV cache memory: 52.60 GiB\n"
    "(EngineCore_0 pid=9) INFO 08-20 10:00:40 [kv_cache_utils.py:849] GPU KV cache size: 383,040 tokens\n"
    "(EngineCore_0 pid=9) INFO 08-20 10:00:40 [kv_cache_utils.py:853] Maximum concurrency for 32,768 tokens per "
    "request: 11.69x\n"
)
VL_FAIL = (
    "(EngineCore_0 pid=9) ERROR 08-20 10:00:55 [core.py:700] EngineCore failed to start.\n"
    "(EngineCore_0 pid=9) ERROR 08-20 10:00:55 [core.py:700] Traceback (most recent call last):\n"
    "(EngineCore_0 pid=9) ERROR 08-20 10:00:55 [core.py:700] " + TORCH_OOM
)


def test_vllm_graph_capture_oom_is_a_failed_start_not_started():
    capture = ("(EngineCore_0 pid=9) INFO 08-20 10:00:41 [gpu_model_runner.py:2708] Capturing CUDA graphs "
               "(mixed prefill-decode, PIECEWISE): 40%|████      | 27/67 [00:02<00:03, 11.20it/s]\n")
    r = diagnose_text(VL_HEAD + VL_SIZED + capture + VL_FAIL)
    f = _only_error(r, "cuda-graph-oom")
    assert r.timeline.starts is False and r.timeline.extra.failed_at == "cuda_graph"
    assert f.message.startswith("vLLM failed at CUDA graph capture: out of memory: GPU 0 tried to allocate 1.5 GiB")
    assert "--gpu-memory-utilization" in f.fix


def test_vllm_oom_while_loading_weights():
    loading = "(EngineCore_0 pid=9) INFO 08-20 10:00:20 [gpu_model_runner.py:1953] Starting to load model Qwen/Qwen3-8B...\n"
    r = diagnose_text(VL_HEAD + loading + VL_FAIL)
    _only_error(r, "load-oom")
    assert r.timeline.extra.failed_at == "load_weights" and r.timeline.starts is False


def test_vllm_sampler_warmup_oom_uses_vllms_advice():
    warm = ("(EngineCore_0 pid=9) INFO 08-20 10:00:50 [gpu_model_runner.py:2567] Graph capturing finished in 9 secs, "
            "took 0.61 GiB\n"
            "(EngineCore_0 pid=9) ERROR 08-20 10:00:55 [core.py:700] RuntimeError: CUDA out of memory occurred when "
            "warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs` or "
            "`gpu_memory_utilization` when initializing the engine.\n")
    r = diagnose_text(VL_HEAD + VL_SIZED + warm)
    f = _only_error(r, "warmup-oom")
    assert r.timeline.extra.failed_at == "warmup" and "--max-num-seqs" in f.fix


PYDANTIC = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
    "  Value error, User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=40960 or model_max_length=None in model's config.json). To allow overriding this "
    "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
    "extreme caution. [type=value_error, input_value=ArgsKwargs((), {'model': 'Qwen/Qwen3-8B'}), "
    "input_type=ArgsKwargs]\n"
)


def test_vllm_config_validation_failure_is_read_as_vllm_even_alone():
    for text in (VL_HEAD + PYDANTIC, PYDANTIC):
        r = diagnose_text(text)
        assert r.timeline.engine == "vllm"
        f = _only_error(r, "config-invalid")
        assert r.timeline.starts is False and r.timeline.extra.failed_at == "config_validation"
        assert "max_model_len 65,536 > the model's max_position_embeddings=40960" in f.message
        assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in f.fix


def test_cli_exit_status_is_1_on_a_failed_start(tmp_path, capsys):
    log = tmp_path / "fail.log"
    log.write_text(SG_HEAD + SG_EXC + TORCH_OOM)
    assert main(["doctor", str(log)]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_an_exception_that_is_not_oom_names_the_phase_without_a_memory_fix():
    capture = "[2025-09-01 10:01:12 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=10.38 GB\n"
    r = diagnose_text(SG_HEAD + SG_LOADED + capture + SG_EXC + "RuntimeError: ninja build failed\n")
    f = _only_error(r, "startup-failed")
    assert r.timeline.extra.failed_at == "cuda_graph"
    assert f.message == "SGLang failed at CUDA graph capture: an error that is not out of memory"
    assert "mem-fraction" not in f.fix


def test_an_error_the_engine_got_past_is_not_fatal():
    """An OOM printed while loading (caught, retried) followed by a KV pool and the ready line: started."""
    ready = "[2025-09-01 10:02:00] The server is fired up and ready to roll!\n"
    r = diagnose_text(SG_HEAD + TORCH_OOM + SG_LOADED + ready)
    assert r.timeline.starts is True and "load-oom" not in r.codes()


def test_oom_with_no_phase_line_says_the_phase_is_unknown():
    r = diagnose_text("[2025-09-01 10:00:00] server_args=ServerArgs(model_path='x', tp_size=8)\n" + TORCH_OOM)
    f = _only_error(r, "startup-oom")
    assert r.timeline.extra.failed_at == "unknown" and "the phase decides the fix" in f.fix


# Real public SGLang failed starts (tests/accuracy/sglang_public_starts.jsonl: the excerpt as the source
# printed it, its URL in the row): the phase the source reports -> the phase doctor names.
REAL_FAILED = {
    "sgl-4330-l40s-eagle-not-enough-memory": ("kv_sizing", "kv-sizing-failed"),
    "sgl-5285-dsr1-2x8xh20-deepep-graph-capture-oom": ("cuda_graph", "cuda-graph-oom"),
    "sgl-mineru3375-mineru2-rtx4090-flashinfer-jit": ("cuda_graph", "startup-failed"),
    "sgl-1751-phi35-mini-graph-capture-failed": ("cuda_graph", "startup-failed"),
    "sgl-7227-qwen3-32gb-class-graph-capture-exception": ("cuda_graph", "startup-failed"),
    "sgl-5755-llama4-scout-8xh100-req-to-token-oom": ("unknown", "startup-oom"),  # the excerpt holds no phase line
}
# Not listed: sgl-748 (its excerpt shows rank 3 only up to its memory pool, so the least advanced rank,
# which is what doctor reports, is at KV allocation); sgl-6001 / sgl-18262 / sgl-4489 (the error text is
# outside the excerpt).


def test_real_sglang_failed_starts_name_their_phase():
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "accuracy" / "sglang_public_starts.jsonl"
    rows = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    for case, (phase, code) in REAL_FAILED.items():
        r = diagnose_text(rows[case]["log_excerpt"])
        assert r.timeline.engine == "sglang" and r.timeline.starts is False, case
        assert r.timeline.extra.failed_at == phase, case
        assert code in r.codes(), (case, r.codes())
