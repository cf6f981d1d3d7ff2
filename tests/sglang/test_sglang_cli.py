"""CLI: the README command works; bad input is one line on stderr with exit code 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvscope.cli import main


def run(args):
    return subprocess.run([sys.executable, "-m", "kvscope.cli", *args], capture_output=True, text=True, timeout=60)


def test_readme_main_command_starts():
    """The README's first command: the origin case at the fraction plan recommends for it."""
    r = run(["plan", "moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8", "--mem-fraction-static", "0.952",
             "--pre-load-free-gib", "94", "--post-load-free-gib", "21.7"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("verdict: starts — 261,136 KV tokens per rank")
    assert "70,272 B/token" in r.stdout and "14,363 tokens" in r.stdout


def test_readme_origin_command():
    r = run(["plan", "moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8", "--mem-fraction-static", "0.55",
             "--pre-load-free-gib", "94", "--post-load-free-gib", "21.7"])
    assert r.returncode == 1  # a predicted failure (docs/exit-status.md); the report is still printed in full
    assert "Raise --mem-fraction-static above 0.770" in r.stdout
    assert "70,272 B/token" in r.stdout and "14,363 tokens" in r.stdout


def test_json_contract(capsys):
    assert main(["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("engine", "engine_version", "model", "gpu", "starts", "error", "kv_cache_tokens",
                "max_running_requests", "kv_cell_bytes", "kv_cache_bytes", "weights_bytes", "mem_fraction_static",
                "mem_fraction_static_source", "min_mem_fraction_static", "fix", "ranks"):
        assert key in d
    assert d["kv_cell_bytes"] == 163840 and d["starts"] is True
    r0 = d["ranks"][0]
    assert {"rank", "phases", "decision"} <= set(r0)
    assert {"name", "free_bytes_before", "free_bytes_after", "estimated"} <= set(r0["phases"][0])
    # tokens x cell never exceeds the budget
    assert d["kv_cache_tokens"] * d["kv_cell_bytes"] <= d["rest_memory_bytes"]


def test_per_rank_measured_lists(capsys):
    assert main(["plan", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--tp", "2", "--json",
                 "--pre-load-free-gib", "78.5,77.9", "--post-load-free-gib", "47.0,46.1"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ranks"][0]["decision"]["available_gpu_bytes"] == int(round(46.1 * 2**30))


@pytest.mark.parametrize("args,needle", [
    (["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--tp", "3"], "--tp"),
    (["plan", "Qwen/Qwen3-14B", "--gpu", "nonexistent-gpu"], "--gpu"),
    (["plan", "no/such-model", "--gpu", "h100-sxm"], "model"),
    (["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--mem-fraction-static", "1.5"], "--mem-fraction-static"),
    (["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--tp", "2", "--pre-load-free-gib", "1,2,3"], "--pre-load-free-gib"),
    (["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--kv-cache-dtype", "int3"], "--kv-cache-dtype"),
    (["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--context-length", "10000000"], "--context-length"),
    (["plan", "Qwen/Qwen3-14B", "--gpu", "h100-sxm", "--engine-version", "banana"], "--engine-version"),
])
def test_bad_input_one_line_exit_2(args, needle):
    r = run(args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0]


def test_bad_config_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "hidden_size": 4096')
    r = run(["plan", str(p), "--gpu", "h100-sxm"])
    assert r.returncode == 2 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr


def test_corrupt_checkpoint_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                                      "num_attention_heads": 4, "vocab_size": 100}))
    (tmp_path / "model.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad")
    r = run(["plan", str(tmp_path), "--gpu", "h100-sxm"])
    assert r.returncode == 2 and "model.safetensors" in r.stderr and "Traceback" not in r.stderr


def _plan_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_parallel_flags_accept_either_engines_spelling(capsys):
    base = ["plan", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100", "--json"]
    v_short = _plan_json(capsys, base + ["--engine", "vllm", "--tp", "4"])
    v_long = _plan_json(capsys, base + ["--engine", "vllm", "--tensor-parallel-size", "4"])
    assert v_short["kv_cache_tokens"] == v_long["kv_cache_tokens"] and v_short["tensor_parallel_size"] == 4
    s_long = _plan_json(capsys, base + ["--tensor-parallel-size", "4"])
    s_short = _plan_json(capsys, base + ["--tp", "4"])
    assert len(s_long["ranks"]) == len(s_short["ranks"]) == 4
    assert main(base + ["--tp", "2", "--tensor-parallel-size", "4"]) == 2
    assert "disagree" in capsys.readouterr().err
