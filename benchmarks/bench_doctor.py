"""Throughput of ``kvscope doctor`` on a large log: one SGLang start followed by request traffic.

    python benchmarks/bench_doctor.py [--size-mb 512] [--engine sglang|vllm] [--keep PATH]

Writes a synthetic log of the requested size to a temporary file (request lines, retraction
warnings, interleaved ranks, ANSI colours), reads it once with ``diagnose_path`` and prints MB/s
and the growth of the process's max RSS (tracemalloc would slow it tenfold).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import resource
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvscope.doctor import diagnose_path  # noqa: E402

ORIGIN = ROOT / "tests" / "doctor" / "data" / "origin_kimi_k25_8x_rtxpro6000.log"
SGLANG_TRAFFIC = [
    b"[2026-03-01 10:10:00 TP0] Prefill batch. #new-seq: 1, #new-token: 812, #cached-token: 0, token usage: 0.01, #running-req: 3, #queue-req: 0\n",
    b"[2026-03-01 10:10:00 TP0] Decode batch. #running-req: 12, #token: 3000, token usage: 0.02, cuda graph: True, gen throughput (token/s): 900.10, #queue-req: 0\n",
    b'[2026-03-01 10:10:00] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    b"\x1b[32m[2026-03-01 10:10:00 TP3]\x1b[0m Decode batch. #running-req: 12, #token: 3000, token usage: 0.02, gen throughput (token/s): 899.70\n",
    b"[2026-03-01 10:10:01 TP0] Cache flushed successfully!\n",
]
VLLM_TRAFFIC = [
    b"(APIServer pid=1) INFO 04-22 01:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 812.3 tokens/s, Avg generation throughput: 901.1 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.1%, Prefix cache hit rate: 0.0%\n",
    b'(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    b"(EngineCore_DP0 pid=10) DEBUG 04-22 01:00:00 [core.py:1] EngineCore loop active.\n",
]


def write_log(path: str, size_mb: int, engine: str) -> int:
    traffic = SGLANG_TRAFFIC if engine == "sglang" else VLLM_TRAFFIC
    head = ORIGIN.read_bytes() if engine == "sglang" else (
        ROOT / "tests" / "doctor" / "data" / "cases.jsonl").read_bytes()[:0]
    if engine == "vllm":
        import json

        with open(ROOT / "tests" / "doctor" / "data" / "cases.jsonl", encoding="utf-8") as f:
            case = next(c for c in map(json.loads, f) if c["id"] == "lld-vllm-mixtral-8x7b-h100-tp2")
        head = (case["log_excerpt"] + "\n").encode()
    block = b"".join(traffic) * 2000
    target = size_mb * 1_000_000
    written = 0
    with open(path, "wb") as f:
        f.write(head)
        written += len(head)
        while written < target:
            f.write(block)
            written += len(block)
    return written


def _grep_seconds(path: str) -> float | None:
    """Best of three ``grep -c avail`` over ``path`` (None without grep)."""
    import shutil
    import subprocess

    grep = shutil.which("grep")
    if grep is None:
        return None
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([grep, "-c", "avail", path], stdout=subprocess.DEVNULL, check=False)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    ap.add_argument("--keep", help="write the log here and keep it")
    args = ap.parse_args()
    path = args.keep or tempfile.mktemp(suffix=".log")
    try:
        size = write_log(path, args.size_mb, args.engine)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        report = diagnose_path(path)
        dt = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        print(f"{args.engine}: {size / 1e6:.0f} MB, {report.stats.lines:,} lines in {dt:.2f} s = "
              f"{size / 1e6 / dt:.0f} MB/s; max RSS {rss1 / 1024:.0f} MiB (grew {(rss1 - rss0) / 1024:.0f} MiB); "
              f"findings {report.codes()}")
        ref = _grep_seconds(path)  # the physical reference: one pass of grep -c over the same file
        if ref:
            print(f"grep -c on the same file: {ref:.2f} s = {size / 1e6 / ref:.0f} MB/s; doctor takes x{dt / ref:.1f}")
    finally:
        if not args.keep and os.path.exists(path):
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
