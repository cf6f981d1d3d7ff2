"""``kvscope doctor PATH|-|DIR [--json] [--against plan.json] [--engine E] [--model HF_ID] [--set FLAG=VALUE]``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import FlagError
from ._outputs import add_output_options, write_reports


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="explain an SGLang or vLLM startup log: timeline, recomputed figures, findings with fixes",
        description="Read an SGLang or vLLM log (a file, '-' for stdin, or a probe directory), rebuild the "
                    "per-rank startup timeline it printed, recompute the engine's numbers and report findings.",
    )
    p.add_argument("path", metavar="PATH|-|DIR", help="log file (plain or .gz), '-' for stdin, or a probe directory")
    p.add_argument("--json", action="store_true", help="machine-readable output (same timeline schema as plan --json)")
    p.add_argument("--against", metavar="PLAN_JSON", help="compare with a `kvscope plan --json` prediction, phase by phase")
    p.add_argument("--engine", choices=("sglang", "vllm"), help="skip auto-detection")
    p.add_argument("--model", metavar="HF_ID", help="the model, when the log does not name it")
    p.add_argument("--set", metavar="FLAG=VALUE", action="append", default=[],
                   help="a flag the log does not print (e.g. tp_size=4, mem_fraction_static=0.93); the log wins")
    p.add_argument("--max-log-gib", type=_max_log_gib, default=None, metavar="GIB",
                   help="refuse a log larger than this (decompressed; default 1)")
    add_output_options(p)
    p.set_defaults(func=run)


def _max_log_gib(text: str) -> int:
    """``--max-log-gib``: a positive number of GiB (0.001 .. 1024), as bytes."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.001 <= value <= 1024:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of GiB in 0.001..1024, got {text!r}")
    return int(value * 2**30)


def _assumed(items: list[str]) -> dict[str, Any]:
    """``--set FLAG=VALUE`` items as ServerArgs-style names and Python values."""
    from ..logs.grammar import literal

    assume = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FlagError(f"--set expects FLAG=VALUE, got {item!r}", field="--set")
        assume[key.strip().lstrip("-").replace("-", "_")] = literal(value)
    return assume


def run(args: argparse.Namespace) -> int:
    from ..doctor import diagnose_path, load_against  # imported here: `doctor --help` starts at once
    from ..progress import progress
    from ..report.doctor_text import render_doctor

    against = load_against(args.against) if args.against else None
    assume = _assumed(args.set)
    limit = {"max_bytes": args.max_log_gib} if args.max_log_gib else {}
    with progress(f"kvscope doctor: reading {args.path}"):
        report = diagnose_path(args.path, engine=args.engine, model=args.model, against=against, assume=assume,
                               **limit)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_doctor(report))
    _write_reports(args, report, against)
    return 1 if any(f.severity == "error" for f in report.findings) else 0


def _write_reports(args: argparse.Namespace, report: Any, against: Any) -> None:
    """``--html`` (printed vs predicted with ``--against``, findings with evidence), ``--svg``/``--png``."""
    d = report.to_dict()

    def html(command: str, version: str) -> str:
        from ..report.html import render_doctor_html
        return render_doctor_html(d, command, version, against.to_dict() if against is not None else None)

    write_reports(args, html, d)
