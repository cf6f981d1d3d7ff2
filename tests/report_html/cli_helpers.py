"""What the report, serve and browser tests share: the origin case's command line and log, and
``kvscope`` run in-process with sys.argv as the shell sets it (the report quotes it)."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from kvscope.cli import main

LOG = Path(__file__).resolve().parents[1] / "doctor" / "data" / "origin_kimi_k25_8x_rtxpro6000.log"
KIMI = ["moonshotai/Kimi-K2.5", "--gpu", "rtx-pro-6000", "--tp", "8", "--mem-fraction-static", "0.55",
        "--pre-load-free-gib", "94", "--post-load-free-gib", "21.7"]


def cli(argv: list[str]) -> tuple[int, str, str]:
    """``kvscope ARGV`` in-process: (exit status, stdout, stderr); argparse's usage errors included."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["kvscope", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.argv = saved
    return rc, out.getvalue(), err.getvalue()
