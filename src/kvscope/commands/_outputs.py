"""``--html FILE``, ``--svg FILE`` and ``--png FILE`` on plan, doctor, fit and sweep.

The reports are rendered from the same dicts ``--json`` prints; the files are written after the
command's normal output. A file that cannot be written is a one-line input error naming the option.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping

from .. import __version__
from ..errors import FlagError
from ..progress import progress

__all__ = ["add_output_options", "command_line", "write_reports"]


def add_output_options(parser: Any, charts: bool = True) -> None:
    g = parser.add_argument_group("reports (written besides the normal output)")
    g.add_argument("--html", metavar="FILE", default=None,
                   help="write a self-contained HTML report (inline CSS and SVG; no network)")
    if charts:
        g.add_argument("--svg", metavar="FILE", default=None, help="write the per-rank memory chart as SVG")
        g.add_argument("--png", metavar="FILE", default=None,
                       help="write the per-rank memory chart as PNG (needs: pip install 'kvscope[plots]')")


def command_line() -> str:
    """The command as the user typed it (``kvscope`` + its arguments)."""
    import shlex  # only when a report is written (import cost)

    return "kvscope " + shlex.join(sys.argv[1:])


def _write(path: str, text: str, option: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise FlagError(f"{option} {path}: cannot write ({exc.strerror or exc})", field=option,
                        fix="give a writable file path") from None


def write_reports(args: Any, html: Callable[[str, str], str] | None = None,
                  timeline: Mapping[str, Any] | None = None) -> None:
    """Write the files the options ask for: ``html(command, version)`` and the timeline chart."""
    if getattr(args, "html", None) and html is not None:
        with progress(f"kvscope: writing {args.html}"):
            text = html(command_line(), __version__)
        _write(args.html, text, "--html")
    if getattr(args, "svg", None) and timeline is not None:
        from ..report.svg import timeline_svg
        _write(args.svg, '<?xml version="1.0" encoding="UTF-8"?>\n' + timeline_svg(timeline) + "\n", "--svg")
    if getattr(args, "png", None) and timeline is not None:
        from ..report.png import timeline_png
        try:
            timeline_png(timeline, args.png)
        except OSError as exc:
            raise FlagError(f"--png {args.png}: cannot write ({exc.strerror or exc})", field="--png",
                            fix="give a writable file path") from None
