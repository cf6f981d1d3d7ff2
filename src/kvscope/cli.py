"""Command line: ``kvscope plan | fit | doctor | probe | perf | sweep | ...`` (:data:`COMMANDS`).

Each subcommand lives in ``kvscope.commands.<name>`` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (args -> exit code); only the chosen command's module is imported
(``register`` stays cheap: heavy imports sit inside ``run``). This module only dispatches and renders
typed errors as one line with exit code 2, and any other exception as one "internal error" line
with exit code 3 (never a traceback; ``KVSCOPE_DEBUG=1`` re-raises).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .errors import KvscopeError

COMMANDS = ("plan", "fit", "doctor", "probe", "perf", "serve", "completion", "compare", "models", "sweep")


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first argument that is not an option (the top-level
    options, ``-h`` and ``--version``, take no value), when it is one of :data:`COMMANDS`."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or with ``only`` that one: a command line imports only the
    module of the command it runs (the top-level help and unknown commands import them all)."""
    parser = argparse.ArgumentParser(
        prog="kvscope",
        description="Predict, explain and measure how SGLang and vLLM size GPU memory at startup.",
    )
    parser.add_argument("--version", action="version", version=f"kvscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only else COMMANDS:
        importlib.import_module(f"kvscope.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # parsing too: an argument type that raises reaches the same one-line edges
        parser = build_parser(chosen_command(argv))
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
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
