"""Benchmark: `kvscope fit` wall time (fresh process) as a ratio to bare Python start-up, and in-process
fit() time and plan calls. Target (issue #16): an 8-GPU question answered in <= 0.3 s wall.

Run: python benchmarks/bench_fit.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from kvscope.fit import FitRequest, candidates, fit
from kvscope.hardware.gpus import get_gpu
from kvscope.model.load import load_spec

CASES = (
    # (label, model, gpu, gpus, context, concurrency, engine)
    ("DeepSeek-V3 8xH200 SGLang", "deepseek-ai/DeepSeek-V3", "h200", 8, 32768, 32, "sglang"),
    ("Llama-3.1-70B 8xH100 SGLang", "meta-llama/Llama-3.1-70B-Instruct", "h100", 8, 32768, 16, "sglang"),
    ("Kimi-K2.5 8xRTX PRO 6000 SGLang", "moonshotai/Kimi-K2.5", "rtx-pro-6000", 8, 32768, 16, "sglang"),
    ("Qwen3-32B 8xH100 vLLM", "Qwen/Qwen3-32B", "h100", 8, 32768, 16, "vllm"),
    ("nothing fits: Llama-3.1-70B 2xH100 128k x 64", "meta-llama/Llama-3.1-70B-Instruct", "h100", 2, 131072, 64,
     "sglang"),
)


def _best_wall(cmd: list[str], n: int = 3) -> float:
    walls = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True)
        walls.append(time.perf_counter() - t0)
    return min(walls)


def main() -> None:
    bare = _best_wall([sys.executable, "-c", "pass"], 5)
    print(f"python -c pass: {bare * 1000:.0f} ms (the reference)")
    for label, model, gpu, gpus, ctx, conc, engine in CASES:
        cmd = [sys.executable, "-m", "kvscope.cli", "fit", model, "--gpu", gpu, "--gpus", str(gpus), "--context",
               str(ctx), "--concurrency", str(conc), "--engine", engine]
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True)
            walls.append(time.perf_counter() - t0)
        spec, _ = load_spec(model)
        req = FitRequest(spec, get_gpu(gpu), gpus, ctx, conc, engine=engine)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0 or n < 2:
            res = fit(req)
            n += 1
        dt = (time.perf_counter() - t0) / n
        print(f"{label}: CLI best {min(walls) * 1000:.0f} ms = {min(walls) / bare:.1f}x bare Python, median "
              f"{sorted(walls)[1] * 1000:.0f} ms; "
              f"fit() {dt * 1000:.0f} ms in-process, {res.plan_calls} plan calls for {len(candidates(req))} "
              f"candidates, fits={res.fits}")


if __name__ == "__main__":
    main()
