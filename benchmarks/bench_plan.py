"""Benchmark: `kvscope plan` wall time (fresh process) and in-process plan() calls per second.

Run: python benchmarks/bench_plan.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.plan import Measured, plan_sglang
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec


def main() -> None:
    cmd = [sys.executable, "-m", "kvscope.cli", "plan", "moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8",
           "--mem-fraction-static", "0.55"]
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    print(f"kvscope plan (CLI, fresh process): best {min(walls) * 1000:.0f} ms, median {sorted(walls)[2] * 1000:.0f} ms")
    spec, _ = load_spec("moonshotai/Kimi-K2.5")
    gpu = get_gpu("rtx-pro-6000")
    args = SGLangArgs(tp_size=8, mem_fraction_static=0.55)
    m = Measured((int(94 * 2**30),), (int(21.7 * 2**30),))
    for name, measured in (("predicted", None), ("measured-input", m)):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            plan_sglang(spec, gpu, args, "0.5.23", measured)
            n += 1
        dt = (time.perf_counter() - t0) / n
        print(f"plan_sglang() {name}: {1 / dt:,.0f} calls/s ({dt * 1000:.2f} ms per call, 8 ranks)")


if __name__ == "__main__":
    main()
