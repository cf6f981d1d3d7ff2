"""Command line: ``kvscope plan | fit | doctor | probe | perf``.

Each subcommand lives in ``kvscope.commands.<name>`` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (args -> exit code). This module only dispatches and renders
typed errors as one line with exit code 2, and any other exception as one "internal error" line
with exit code 3 (never a traceback; ``KVSCOPE_DEBUG=1`` re-raises).
"""

from __future__ import annotations

import argparse
import importlib
import os
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
        importlib.import_module(f"kvscope.commands.{name}").register(sub)
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
    except Exception as exc:  # noqa: BLE001 -- the CLI edge: one line, never a traceback
        if os.environ.get("KVSCOPE_DEBUG"):
            raise
        where = getattr(exc, "__traceback__", None)
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        loc = f" at {os.path.basename(where.tb_frame.f_code.co_filename)}:{where.tb_lineno}" if where else ""
        print(f"kvscope: internal error: {type(exc).__name__}: {exc}{loc} -- this input reached a case kvscope "
              "does not handle; please report the command line (KVSCOPE_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
