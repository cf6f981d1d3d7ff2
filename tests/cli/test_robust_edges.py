"""Issue #14's reproducers: each gives a correct answer, a one-line error with exit 2, or exit 1 for a
predicted failure (docs/exit-status.md)."""

from __future__ import annotations

import json
import os
import time

import pytest

from kvscope import cli
from kvscope.engines.sglang.release import LATEST as SGLANG_LATEST
from kvscope.engines.vllm.release import LATEST_VERSION as VLLM_LATEST
from kvscope.catalog import load_model_source
from kvscope.units import GiB


def run(argv, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, out, err, *needles):
    assert rc == 2, (rc, err)
    assert "Traceback" not in err and err.strip(), err
    last = err.strip().splitlines()[-1]
    for n in needles:
        assert n in last, (n, last)
    return last


# --- plan's exit status and the failing phase ---------------------------------------------------


def test_weights_larger_than_the_gpu_fail_loading_sglang(capsys):
    rc, out, err = run(["plan", "Qwen/Qwen3-32B", "--gpu", "l40s", "--json"], capsys)
    assert rc == 1 and err == ""
    d = json.loads(out)  # the full timeline is still printed
    assert d["starts"] is False and d["error"].startswith("torch.OutOfMemoryError: CUDA out of memory while loading")
    phases = d["ranks"][0]["phases"]
    assert [p["name"] for p in phases] == ["init", "load_weights"]
    load = phases[-1]
    assert load["used_bytes"] == d["weights_bytes"] and load["free_bytes_after"] < 0
    assert f"need {d['weights_bytes'] / GiB:.2f} GiB, {load['free_bytes_before'] / GiB:.2f} GiB is free" in d["error"]
    assert d["kv_cache_tokens"] == 0 and d["max_running_requests"] is None
    rc, out, _ = run(["plan", "Qwen/Qwen3-32B", "--gpu", "l40s"], capsys)
    assert rc == 1 and "verdict: FAILS at weight loading" in out and "ValueError" not in out


def test_weights_larger_than_the_gpu_fail_loading_vllm(capsys):
    rc, out, _ = run(["plan", "Qwen/Qwen3-32B", "--gpu", "l40s", "--engine", "vllm", "--json"], capsys)
    d = json.loads(out)
    assert rc == 1 and d["error"].startswith("torch.OutOfMemoryError: CUDA out of memory while loading weights")
    assert [p["name"] for p in d["ranks"][0]["phases"]] == ["init", "load_weights"]
    assert any(f["flag"] == "--tensor-parallel-size" and f["value"] == 2 for f in d["fix"])


def test_graph_capture_beyond_free_memory_fails_at_capture(capsys):
    rc, out, _ = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--mem-fraction-static", "0.99", "--json"], capsys)
    d = json.loads(out)
    assert rc == 1 and d["starts"] is False
    assert d["error"].startswith("Exception: Capture cuda graph failed: CUDA out of memory")
    graph = d["ranks"][0]["phases"][-1]
    assert graph["name"] == "cuda_graph" and graph["free_bytes_after"] < 0 <= graph["free_bytes_before"]
    fix = next(f for f in d["fix"] if f["flag"] == "--mem-fraction-static")
    assert fix["value"] < 0.99
    # the fix it names starts, with no negative row
    rc, out, _ = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--mem-fraction-static", str(fix["value"]),
                      "--json"], capsys)
    d2 = json.loads(out)
    assert rc == 0 and d2["starts"] is True
    assert min(p["free_bytes_after"] for p in d2["ranks"][0]["phases"]) >= 0
    rc, out, _ = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--mem-fraction-static", "0.99"], capsys)
    assert "verdict: FAILS at CUDA graph capture" in out
    # without decode graphs there is nothing to capture
    rc, out, _ = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--mem-fraction-static", "0.99",
                      "--disable-cuda-graph", "--json"], capsys)
    assert rc == 0 and json.loads(out)["starts"] is True


@pytest.mark.parametrize("argv", [
    ["Qwen/Qwen3-8B", "--gpu", "h100"],
    ["Qwen/Qwen3-8B", "--gpu", "h100", "--mem-fraction-static", "0.95"],
    ["Qwen/Qwen3-8B", "--gpu", "h100", "--mem-fraction-static", "0.99"],
    ["Qwen/Qwen3-32B", "--gpu", "l40s"],
    ["Qwen/Qwen3-32B", "--gpu", "l40s", "--mem-fraction-static", "0.95"],
    ["deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--tp", "8", "--mem-fraction-static", "0.97"],
    ["Qwen/Qwen3-8B", "--gpu", "h100", "--engine", "vllm", "--gpu-memory-utilization", "0.99"],
    ["Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--engine", "vllm"],
    ["Qwen/Qwen3-32B", "--gpu", "rtx-4090", "--engine", "vllm"],
])
def test_no_starts_verdict_above_a_negative_row(capsys, argv):
    rc, out, _ = run(["plan", *argv, "--json"], capsys)
    d = json.loads(out)
    assert rc == (0 if d["starts"] else 1)
    lowest = min(p["free_bytes_after"] for r in d["ranks"] for p in r["phases"] if p["free_bytes_after"] is not None)
    assert not (d["starts"] and lowest < 0)


# --- impossible values -----------------------------------------------------------------------------


def _config(tmp_path, **patch):
    cfg = dict(load_model_source("Qwen/Qwen3-8B").config)
    for k, v in patch.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize("patch,needles", [
    (dict(head_dim=-8), ("head_dim", "got -8", ">= 1")),
    (dict(num_attention_heads=12.5), ("num_attention_heads", "got 12.5", "an integer")),
    (dict(hidden_size=16, head_dim=None), ("hidden_size=16", "num_attention_heads=32")),
    (dict(num_key_value_heads=7), ("num_key_value_heads=7",)),
    (dict(num_hidden_layers=1_000_000), ("num_hidden_layers", "got 1000000", "<= 10000")),
    (dict(num_hidden_layers=10_001), ("num_hidden_layers", "<= 10000")),
    (dict(hidden_size=10**7 + 1), ("hidden_size", "<= 10000000")),
    (dict(num_hidden_layers="36"), ("num_hidden_layers", "got '36'")),
    (dict(vocab_size=True), ("vocab_size", "got True")),
    (dict(rope_scaling={"rope_type": "yarn", "factor": "x"}), ("rope_scaling.factor",)),
    (dict(layer_types=[1, 2]), ("layer_types[0]",)),
    (dict(head_dim=100_000), ("head_dim",)),
])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_impossible_config_values_are_refused(tmp_path, capsys, patch, needles, engine):
    t0 = time.monotonic()
    rc, out, err = run(["plan", _config(tmp_path, **patch), "--gpu", "h100", "--engine", engine], capsys)
    one_line_error(rc, out, err, *needles)
    assert time.monotonic() - t0 < 5  # a million layers is refused at once, not planned


@pytest.mark.parametrize("text,needle", [
    ("{nope", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ("[" * 100_000 + "]" * 100_000, "not a readable JSON config"),
    ('{"hidden_size": 1' + "0" * 5000 + "}", "not a readable JSON config"),
    ('{"model_type": "qwen3", "hidden_size": NaN}', "hidden_size"),
])
def test_broken_json_files_are_one_line(tmp_path, capsys, text, needle):
    path = tmp_path / "config.json"
    path.write_text(text)
    rc, out, err = run(["plan", str(path), "--gpu", "h100"], capsys)
    one_line_error(rc, out, err, needle)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_is_not_read(tmp_path, capsys):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    rc, out, err = run(["plan", str(fifo), "--gpu", "h100"], capsys)
    assert rc == 2 and time.monotonic() - t0 < 5


@pytest.mark.parametrize("argv,needles", [
    (["--engine-version", "9.9"], ("--engine-version", "SGLang 9.9", SGLANG_LATEST, "--allow-unmodelled-version")),
    (["--engine-version", "0.5.24"], ("newer than", SGLANG_LATEST)),
    (["--engine", "vllm", "--engine-version", "9.9"], ("vLLM 9.9", VLLM_LATEST)),
    (["--engine", "vllm", "--engine-version", "0.34.0"], ("vLLM 0.34.0", VLLM_LATEST)),
    (["--attention-backend", "nope"], ("--attention-backend", "got 'nope'", "flashinfer", "triton")),
    (["--context-length", "-1"], ("--context-length", "got -1")),
    (["--tp", "0"], ("--tp", "got 0")),
    (["--pre-load-free-gib", "200"], ("--pre-load-free-gib", "200.00 GiB", "79.65 GiB")),
    (["--pre-load-free-gib", "70", "--post-load-free-gib", "75"], ("--post-load-free-gib", "75.00", "70.00")),
    (["--pre-load-free-gib", "0"], ("--pre-load-free-gib", "got 0")),
    (["--pre-load-free-gib", "nan"], ("--pre-load-free-gib", "nan")),
    (["--post-load-free-gib", "inf"], ("--post-load-free-gib", "inf")),
    (["--gpu-memory-utilization", "0.9"], ("--gpu-memory-utilization is a vLLM flag", "--mem-fraction-static")),
    (["--max-model-len", "8192"], ("--max-model-len is a vLLM flag", "--context-length")),
    (["--engine", "vllm", "--mem-fraction-static", "0.8"], ("--mem-fraction-static is a SGLang flag",
                                                           "--gpu-memory-utilization")),
    (["--engine", "vllm", "--context-length", "8192"], ("--context-length", "--max-model-len")),
    (["--engine", "vllm", "--max-model-len", "inf"], ("--max-model-len", "'inf'")),
    (["--engine", "vllm", "--available-kv-cache-gib", "nan"], ("--available-kv-cache-gib",)),
    (["--engine", "vllm", "--weights-gib", "inf"], ("--weights-gib",)),
    (["--engine", "vllm", "--initial-free-gib", "500"], ("--initial-free-gib", "500")),
    (["--engine", "vllm", "--gpu-memory-utilization", "inf"], ("--gpu-memory-utilization", "'inf'")),
    (["--gpu-memory-mib", "2"], ("--gpu-memory-mib", "2 MiB is outside 1024..1048576")),
    (["--engine", "vllm", "--gpu-memory-mib", "2"], ("--gpu-memory-mib",)),
])
def test_bad_flags_are_one_line_exit_2(capsys, argv, needles):
    rc, out, err = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", *argv], capsys)
    one_line_error(rc, out, err, *needles)


def test_ambiguous_gpu_name_is_refused_with_the_choices(capsys):
    rc, out, err = run(["plan", "Qwen/Qwen3-8B", "--gpu", "a100"], capsys)
    one_line_error(rc, out, err, "--gpu", "a100-40g", "a100-80g")
    rc, out, _ = run(["plan", "Qwen/Qwen3-8B", "--gpu", "a100-80g", "--json"], capsys)
    assert rc == 0 and json.loads(out)["gpu"] == "a100-80g"
    rc, out, _ = run(["plan", "Qwen/Qwen3-8B", "--gpu", "NVIDIA A100-SXM4-40GB", "--json"], capsys)
    assert rc == 0 and json.loads(out)["gpu"] == "a100-40g"


def test_unmodelled_version_override_plans_the_nearest_release_with_a_warning(capsys):
    rc, out, err = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--engine-version", "9.9",
                        "--allow-unmodelled-version", "--json"], capsys)
    assert rc == 0 and json.loads(out)["engine_version"] == SGLANG_LATEST
    assert "warning" in err and "9.9" in err and SGLANG_LATEST in err
    rc, out, err = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--engine", "vllm", "--engine-version", "0.40.0",
                        "--allow-unmodelled-version", "--json"], capsys)
    assert rc == 0 and json.loads(out)["engine_version"] == VLLM_LATEST and "0.40.0" in err
    # a modelled release is planned as itself, silently
    rc, out, err = run(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", "--engine-version", "0.5.9",
                        "--allow-unmodelled-version", "--json"], capsys)
    assert rc == 0 and json.loads(out)["engine_version"] == "0.5.9" and err == ""


# --- fit -------------------------------------------------------------------------------------------

FIT = ["fit", "Qwen/Qwen3-8B", "--gpu", "h100", "--context", "4096", "--concurrency", "4"]


@pytest.mark.parametrize("argv,needles", [
    (["--set", "page_size=abc"], ("--set page_size", "got 'abc'")),
    (["--set", "mem_fraction_static=nan"], ("--set mem_fraction_static", "nan")),
    (["--set", "mem_fraction_static=2"], ("--set mem_fraction_static", "got 2")),
    (["--engine", "vllm", "--set", "gpu_memory_utilization=inf"], ("--set gpu_memory_utilization", "inf")),
    (["--engine-version", "9.9"], ("--engine-version", SGLANG_LATEST)),
    (["--engine", "vllm", "--engine-version", "9.9"], ("--engine-version", VLLM_LATEST)),
    (["--tp", "1", "--pp", "1", "--pre-load-free-gib", "500"], ("--pre-load-free-gib", "500.00 GiB")),
    (["--tp", "1", "--pp", "1", "--pre-load-free-gib", "60", "--post-load-free-gib", "70"],
     ("--post-load-free-gib",)),
    (["--pre-load-free-gib", "0"], ("--pre-load-free-gib",)),
    (["--gpu", "a100"], ("--gpu", "a100-40g")),
])
def test_fit_input_errors_are_exit_2_not_nothing_fits(capsys, argv, needles):
    base = list(FIT)
    if "--gpu" in argv:
        base[base.index("--gpu") + 1] = argv[argv.index("--gpu") + 1]
        argv = [a for i, a in enumerate(argv) if a != "--gpu" and (i == 0 or argv[i - 1] != "--gpu")]
    rc, out, err = run(base + argv, capsys)
    one_line_error(rc, out, err, *needles)


def test_plan_accepts_the_attn_dp_size_fit_prints(capsys):
    rc, out, _ = run(["fit", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--context", "4096", "--concurrency", "4",
                      "--all"], capsys)
    assert rc == 0 and "--attn-dp-size 8" in out  # SGLang 0.5.23's flag, in the launch command
    same = ["plan", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--tp", "8", "--json"]
    rc1, a, _ = run(same + ["--attn-dp-size", "8"], capsys)
    rc2, b, _ = run(same + ["--dp", "8", "--enable-dp-attention"], capsys)
    assert rc1 == rc2 == 0 and json.loads(a) == json.loads(b) and json.loads(a)["enable_dp_attention"] is True
    rc, out, err = run(same + ["--attn-dp-size", "8", "--dp", "4"], capsys)
    one_line_error(rc, out, err, "--attn-dp-size 8 and --dp 4 disagree")
    rc, out, err = run(same + ["--engine", "vllm", "--attn-dp-size", "8"], capsys)
    one_line_error(rc, out, err, "--attn-dp-size is a SGLang flag")


def test_short_hybrid_pattern_beside_layer_types_is_one_line(tmp_path, capsys):
    """Found by the fuzz tier: a gpt-oss config whose layer_types give the attention kinds and a one-character
    hybrid_override_pattern reached an IndexError in the weights (exit 3)."""
    import json

    from kvscope.cli import main

    cfg = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "head_dim": 64,
           "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 4,
           "layer_types": ["sliding_attention", "full_attention"] * 2, "sliding_window": 128,
           "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
           "max_position_embeddings": 131072, "hybrid_override_pattern": "0"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["plan", str(path), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hybrid_override_pattern has 1 entries for 4 layers" in err
