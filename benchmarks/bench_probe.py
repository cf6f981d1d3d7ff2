"""Overhead of one hooked call under the probe agent (goal: < 1 ms; nothing on the request path).

    python benchmarks/bench_probe.py            # prints µs per call, plain vs hooked
    pytest benchmarks/bench_probe.py            # the same through pytest-benchmark

Measures the agent's wrapper around a function shaped like SGLang's ``get_available_gpu_memory``
(4 bound arguments, a float return; 2 JSONL records written per call) and like
``profile_max_num_token`` (inputs from ``self``, locals captured through ``sys.setprofile``), and
the pass-through cost once startup has ended.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from kvscope.probe._boot import _kvscope_probe_agent as agent  # noqa: E402


def get_available_gpu_memory(device, gpu_id, distributed=False, empty_cache=True, cpu_group=None):
    return 71.0


class Runner:
    mem_fraction_static = 0.8
    is_draft_worker = False

    def profile_max_num_token(self, total_gpu_memory):
        available_gpu_memory = get_available_gpu_memory("cuda", 0)
        cell_size = 73728
        rest_memory = available_gpu_memory - total_gpu_memory * (1 - self.mem_fraction_static)
        num_layers = 36
        return int(rest_memory * (1 << 30)) // cell_size


GAGM = {"id": "get_available_gpu_memory", "key": "b:g@*", "engine": "sglang",
        "inputs": {"device": "arg.device", "gpu_id": "arg.gpu_id",
                   "distributed": "arg.distributed", "empty_cache": "arg.empty_cache"},
        "outputs": {"free_gib": "ret"}}
PROFILE = {"id": "profile_max_num_token", "key": "b:p@*", "engine": "sglang", "phase": "profile",
           "inputs": {"pre": "arg.total_gpu_memory", "mfs": "self.mem_fraction_static",
                      "is_draft_worker": "self.is_draft_worker"},
           "outputs": {"max_total_num_tokens": "ret"},
           "locals": {"available_gpu_memory_gib": "available_gpu_memory",
                      "cell_size_bytes": "cell_size", "rest_memory_gib": "rest_memory",
                      "num_layers": "num_layers"}}


def _per_call_us(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def measure(n: int = 20000) -> dict[str, float]:
    out_dir = tempfile.mkdtemp(prefix="kvscope-bench-")
    agent._S.out_dir, agent._S.fd, agent._S.serving = out_dir, None, False
    hooked = agent._make_wrapper(get_available_gpu_memory, GAGM)
    runner = Runner()
    hooked_profile = agent._make_wrapper(Runner.profile_max_num_token, PROFILE)
    res = {
        "plain_us": _per_call_us(lambda: get_available_gpu_memory("cuda", 0), n),
        "hooked_us": _per_call_us(lambda: hooked("cuda", 0), n),
        "hooked_formula_with_locals_us": _per_call_us(lambda: hooked_profile(runner, 78.75),
                                                      n // 10),
    }
    agent._S.serving = True  # after startup: the pass-through path
    res["after_startup_us"] = _per_call_us(lambda: hooked("cuda", 0), n)
    agent._S.serving = False
    os.close(agent._S.fd)
    agent._S.fd = None
    return res


def test_overhead_per_hooked_call_under_1ms(benchmark):
    res = measure(5000)
    assert res["hooked_us"] - res["plain_us"] < 1000
    assert res["hooked_formula_with_locals_us"] < 1000
    assert res["after_startup_us"] - res["plain_us"] < 5
    agent._S.out_dir, agent._S.fd = tempfile.mkdtemp(prefix="kvscope-bench-"), None
    hooked = agent._make_wrapper(get_available_gpu_memory, GAGM)
    benchmark(lambda: hooked("cuda", 0))
    os.close(agent._S.fd)
    agent._S.fd = None


if __name__ == "__main__":
    for k, v in measure().items():
        print(f"{k:32s} {v:8.2f} µs")
