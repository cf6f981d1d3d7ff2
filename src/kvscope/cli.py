"""Command line: ``kvscope plan | fit | doctor | probe | perf``.

Each subcommand lives in ``kvscope.commands.<name>`` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (args -> exit code). This module only dispatches and renders
typed errors as one line with exit code 2 (never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import KvscopeError

COMMANDS = ("plan", "fit", "doctor", "probe", "perf")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvscope",
        description="Predict, explain and measure how SGLang and vLLM size GPU memory at startup.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"kvscope.commands.{name}")
        except ModuleNotFoundError as exc:  # a command not built yet in this checkout
            if exc.name != f"kvscope.commands.{name}":
                raise
            continue
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KvscopeError as exc:
        print(f"kvscope: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
