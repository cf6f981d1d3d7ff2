"""Benchmark: ``kvscope.sweep`` points per second, against one evaluation of the engine's budget formula.

    python benchmarks/bench_sweep.py [--repeat 5]

Grids (one process, best of ``--repeat``; wall clock and CPU time):

* SGLang: ``mem_fraction_static=0.50:0.95:0.001`` x 8 context lengths (3,608 points), Qwen3-32B on one H100;
* vLLM: ``gpu_memory_utilization=0.50:0.95:0.001`` x 8 ``max_model_len`` (3,608 points), the same;
* the issue's grid: fraction 0.5:0.95:0.01 x 8k,32k,128k x tp 1,2,4,8 x two KV dtypes (Llama 3.1 70B).

The reference is the in-process cost of one formula evaluation -- SGLang ``memory.profile`` (the
budget and the token count) and vLLM ``memory.available_kv_cache_bytes`` -- so "x N" is how many
formula evaluations one sweep point costs; and ``kvscope.plan`` per point, what a loop of plans costs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import kvscope  # noqa: E402

CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 40960]
GRIDS = [
    ("SGLang fraction x context", "Qwen/Qwen3-32B", "sglang",
     {"mem_fraction_static": "0.50:0.95:0.001", "context_length": CONTEXTS}),
    ("vLLM utilization x max_model_len", "Qwen/Qwen3-32B", "vllm",
     {"gpu_memory_utilization": "0.50:0.95:0.001", "max_model_len": CONTEXTS}),
    ("SGLang issue grid", "meta-llama/Llama-3.1-70B-Instruct", "sglang",
     {"mem_fraction_static": "0.5:0.95:0.01", "context_length": "8k,32k,128k", "tp": [1, 2, 4, 8],
      "kv_cache_dtype": ["auto", "fp8_e4m3"]}),
    ("vLLM issue grid", "meta-llama/Llama-3.1-70B-Instruct", "vllm",
     {"gpu_memory_utilization": "0.5:0.95:0.01", "max_model_len": "8k,32k,128k", "tp": [1, 2, 4, 8],
      "kv_cache_dtype": ["auto", "fp8"]}),
]


def _best(fn, repeat: int) -> tuple[float, float, object]:
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), out


def formula_seconds() -> tuple[float, float]:
    """One SGLang ``memory.profile`` and one vLLM ``memory.available_kv_cache_bytes``, in process."""
    from kvscope.engines.sglang.memory import profile
    from kvscope.engines.sglang.release import release
    from kvscope.engines.vllm.memory import available_kv_cache_bytes
    from kvscope.engines.vllm.release import version_traits

    rel, traits, n = release(None), version_traits(None), 20000
    t0 = time.process_time()
    for i in range(n):
        profile(rel, pre_model_load_gib=78.5, available_gpu_gib=17.2, mem_fraction_static=0.5 + i * 1e-6,
                cell_bytes=262144)
    sg = (time.process_time() - t0) / n
    t0 = time.process_time()
    for i in range(n):
        available_kv_cache_bytes(80 * 2**30 - i, 65 * 2**30, 2**30, 2**29, 0, traits, None)
    return sg, (time.process_time() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    repeat = ap.parse_args().repeat
    sg_formula, vl_formula = formula_seconds()
    print(f"reference: SGLang memory.profile {sg_formula * 1e6:.2f} us, vLLM available_kv_cache_bytes "
          f"{vl_formula * 1e6:.2f} us (CPU, in process)")
    for label, model, engine, grid in GRIDS:
        wall, cpu, s = _best(lambda: kvscope.sweep(model, "h100-sxm", engine=engine, grid=grid), repeat)
        n = len(s.rows)
        ref = sg_formula if engine == "sglang" else vl_formula
        point = kvscope.sweep.point_outcome
        probe = s.rows[: min(n, 40)]
        names = [a for a, _ in s.axes]
        t0 = time.process_time()
        for r in probe:
            point(model, "h100-sxm", engine=engine, **dict(zip(names, r)))
        plan_cpu = (time.process_time() - t0) / len(probe)
        print(f"{label}: {n:,} points ({model}) in {wall * 1e3:.0f} ms wall / {cpu * 1e3:.0f} ms CPU = "
              f"{n / wall:,.0f} points/s wall, {n / cpu:,.0f} points/s CPU; {cpu / n * 1e6:.1f} us per point = "
              f"x{cpu / n / ref:.1f} one formula evaluation; a plan() per point costs x{plan_cpu / (cpu / n):,.0f} "
              "a sweep point")


if __name__ == "__main__":
    main()
