from __future__ import annotations

import json

from kvscope.cli import main

KEYS = ("decode_tokens_per_s", "step_time_s", "allreduce_count", "allreduce_time_s",
        "weight_bytes_per_gpu_per_step", "kv_bytes_per_gpu_per_step", "prefill_tokens_per_s")


def test_json_keys(capsys):
    assert main(["perf", "moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8",
                 "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "4",
                 "--accept-length", "2.3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in KEYS:
        assert k in d
    for k in ("accepted_tokens_per_step", "decode_tokens_per_s", "speedup"):
        assert k in d["speculative"]
    assert d["allreduce_count"] == 123


def test_batches_and_text(capsys):
    assert main(["perf", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--tp", "4", "--batch", "1,8,64",
                 "--context", "8192", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [b["batch"] for b in d["by_batch"]] == [1, 8, 64]
    assert d["by_batch"][2]["decode_tokens_per_s"] > d["by_batch"][0]["decode_tokens_per_s"]
    assert main(["perf", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "rtx-4090", "--tp", "4",
                 "--allreduce", "custom"]) == 0
    out = capsys.readouterr().out
    assert "peer-to-peer" in out and "cannot load" in out


def test_bad_flags_exit_2(capsys):
    assert main(["perf", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--tp", "3"]) == 2
    assert main(["perf", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--accept-length", "2"]) == 2
    assert main(["perf", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--speculative-algorithm", "MEDUSA"]) == 2
    assert main(["perf", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--tp", "4", "--ep", "3"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_assumed_accept_length_and_range(capsys):
    assert main(["perf", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--engine", "vllm",
                 "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    s = d["speculative"]
    assert s["accept_length_assumed"] and "vllm-project/vllm/pull/16035" not in s["accepted_tokens_source"]
    assert "pull/24243" in s["accepted_tokens_source"]
    lo, hi = d["decode_tokens_per_s_range"]
    assert lo < d["decode_tokens_per_s"] < hi
    assert d["engine"] == "vllm" and d["gpu_family"] == "nvidia-hbm"
