"""``kvscope doctor PATH|-|DIR [--json] [--against plan.json] [--engine E] [--model HF_ID] [--set FLAG=VALUE]``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..doctor import diagnose_path, load_against
from ..errors import FlagError
from ..logs.grammar import literal
from ..report.doctor_text import render_doctor


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
    p.set_defaults(func=run)


def _assumed(items: list[str]) -> dict[str, Any]:
    """``--set FLAG=VALUE`` items as ServerArgs-style names and Python values."""
    assume = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FlagError(f"--set expects FLAG=VALUE, got {item!r}", field="--set")
        assume[key.strip().lstrip("-").replace("-", "_")] = literal(value)
    return assume


def run(args: argparse.Namespace) -> int:
    against = load_against(args.against) if args.against else None
    assume = _assumed(args.set)
    report = diagnose_path(args.path, engine=args.engine, model=args.model, against=against, assume=assume)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_doctor(report))
    return 1 if any(f.severity == "error" for f in report.findings) else 0
