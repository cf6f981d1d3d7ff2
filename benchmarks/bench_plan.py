"""Benchmark: ``kvscope plan`` start-to-answer against bare Python start-up (the physical reference).

    python benchmarks/bench_plan.py [--runs 9]

Each figure is a ratio to ``python -c pass`` measured in the same run, interleaved with it, best of
``--runs`` (wall clock) and also in CPU seconds of the child (steadier on a shared machine). The
bytecode is compiled first, as ``pip install`` does. Also the CLI start of fit / doctor / probe /
sweep (``--help``: their import cost) and in-process ``plan()`` calls per second.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
CASES = [
    ("plan (SGLang)", ["plan", "moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8", "--mem-fraction-static",
                       "0.55", "--pre-load-free-gib", "94", "--post-load-free-gib", "21.7"]),
    ("plan (vLLM)", ["plan", "meta-llama/Llama-3.1-8B-Instruct", "--engine", "vllm", "--gpu", "h100-sxm",
                     "--max-model-len", "8192"]),
    ("fit --help", ["fit", "--help"]),
    ("doctor --help", ["doctor", "--help"]),
    ("probe --help", ["probe", "--help"]),
    ("sweep --help", ["sweep", "--help"]),
]


def _run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one fresh process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def startup_ratios(runs: int) -> None:
    compileall.compile_dir(str(ROOT / "src" / "kvscope"), quiet=1)
    bare = [sys.executable, "-c", "pass"]
    print(f"{'command':<16} {'wall ms':>8} {'x bare':>7} {'cpu ms':>8} {'x bare':>7}   (bare = python -c pass)")
    for label, argv in CASES:
        cmd = [sys.executable, "-m", "kvscope.cli", *argv]
        pairs = [(_run(bare), _run(cmd)) for _ in range(runs)]
        bw, bc = min(p[0][0] for p in pairs), min(p[0][1] for p in pairs)
        cw, cc = min(p[1][0] for p in pairs), min(p[1][1] for p in pairs)
        print(f"{label:<16} {cw * 1e3:8.0f} {cw / bw:7.2f} {cc * 1e3:8.0f} {cc / bc:7.2f}   "
              f"(bare {bw * 1e3:.0f} ms wall, {bc * 1e3:.0f} ms cpu)")


def in_process() -> None:
    import kvscope

    kw = dict(tp_size=8, mem_fraction_static=0.55, pre_load_free_gib=94, post_load_free_gib=21.7)
    kvscope.plan("moonshotai/Kimi-K2.5", "rtx-pro-6000", **kw)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        kvscope.plan("moonshotai/Kimi-K2.5", "rtx-pro-6000", **kw)
        n += 1
    dt = (time.perf_counter() - t0) / n
    print(f"kvscope.plan() in process: {1 / dt:,.0f} calls/s ({dt * 1e3:.2f} ms per call, Kimi K2.5, 8 ranks)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9)
    startup_ratios(ap.parse_args().runs)
    in_process()


if __name__ == "__main__":
    main()
