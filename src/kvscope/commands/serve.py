"""``kvscope serve [--host 127.0.0.1] [--port 8765]``: a local what-if page.

The page's inputs are ``kvscope plan``'s own options (``?model=…&gpu=h100&tp=2&mem-fraction-static=0.8``):
each request is parsed by the ``plan`` subcommand's parser and planned with the same library calls as
``kvscope plan --json`` (``flags_from_namespace`` + ``kvscope.plan``), so the page's numbers are the CLI's
and a bad value gets the CLI's one-line error. A pasted log goes through ``kvscope.doctor``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
import threading
from typing import Any, Mapping

# options of `plan` the page must not pass: they write files or change the output format
_BLOCKED = {"html", "svg", "png", "json", "help", "h"}
_TRUE = {"true", "on"}  # a checkbox (store_true flag); "1" is a value (--tp 1)
_PARSE_LOCK = threading.Lock()  # argparse reports errors on the (process-wide) stderr


def register(sub) -> None:
    p = sub.add_parser("serve", help="a local web page to explore what-ifs (timeline and curve update live)",
                       description="Serve the what-if page: choose model, GPU, engine, version and flags; the "
                                   "per-rank memory timeline and the fraction -> tokens curve update as values "
                                   "change; paste or upload a log to run doctor. Numbers are `plan --json`'s.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    p.set_defaults(func=run)


def plan_argv(query: Mapping[str, str]) -> list[str]:
    """The ``kvscope plan`` command line a page query stands for (``extra``: more flags, shell-quoted)."""
    from ..server import InputError
    model = (query.get("model") or "").strip()
    if not model:
        raise InputError("kvscope: error: no model given (field model)")
    argv = ["plan", model]
    for key, value in query.items():
        if key in ("model", "extra", "concurrency"):
            continue
        name = key.strip().lstrip("-")
        if name in _BLOCKED or not name.replace("-", "").replace("_", "").isalnum():
            raise InputError(f"kvscope: error: option --{name} is not available on the page")
        value = value.strip()
        if value == "" or value.lower() in ("false", "off"):
            continue
        argv += [f"--{name}"] if value.lower() in _TRUE else [f"--{name}", value]
    try:
        extra = shlex.split(query.get("extra") or "")
    except ValueError as exc:
        raise InputError(f"kvscope: error: extra flags: {exc}") from None
    if any(x.lstrip("-").split("=")[0] in _BLOCKED for x in extra if x.startswith("-")):
        raise InputError("kvscope: error: --html/--svg/--png/--json are not available on the page")
    return argv + extra


def parse_plan(argv: list[str]) -> argparse.Namespace:
    """``argv`` through the CLI's own parser; its error becomes the same one line the CLI prints."""
    from ..cli import build_parser
    from ..server import InputError
    err = io.StringIO()
    with _PARSE_LOCK, contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return build_parser().parse_args(argv)
        except SystemExit:
            pass
    lines = [x for x in err.getvalue().splitlines() if x.strip()]
    raise InputError(lines[-1] if lines else "kvscope: error: invalid input")


def _plan_json(args: argparse.Namespace) -> dict[str, Any]:
    """What ``kvscope plan … --json`` prints for these arguments: the command's own ``run``."""
    from . import plan as plan_cmd
    args.json = True
    out = io.StringIO()
    with _PARSE_LOCK, contextlib.redirect_stdout(out):
        plan_cmd.run(args)  # exit status 1 (does not start) still prints the full timeline
    return json.loads(out.getvalue())


def api_plan(query: Mapping[str, str]) -> dict[str, Any]:
    """One what-if: ``plan --json`` for the page's inputs, the curve, and both charts."""
    from ..curve import curve
    from ..report.svg import curve_svg, timeline_svg
    from .plan import flags_from_namespace
    argv = plan_argv(query)
    args = parse_plan(argv)
    t = _plan_json(args)
    conc = (query.get("concurrency") or "").strip()
    c = curve(args.model, args.gpu, engine=args.engine, engine_version=args.engine_version,
              gpu_memory_mib=args.gpu_memory_mib, concurrency=int(conc) if conc.isdigit() else None,
              **flags_from_namespace(args)).to_dict()
    return {"command": "kvscope " + shlex.join(argv) + " --json", "json": t, "curve": c,
            "timeline_svg": timeline_svg(t, "tl"), "curve_svg": curve_svg(c, "cv")}


def api_doctor(body: Mapping[str, Any]) -> dict[str, Any]:
    """A pasted or uploaded log through ``kvscope.doctor`` (what ``doctor --json`` prints)."""
    from ..doctor import diagnose_text
    from ..report.html import doctor_sections
    from ..server import InputError
    log = body.get("log")
    if not isinstance(log, str) or not log.strip():
        raise InputError("kvscope: error: no log given (paste a log or choose a file)")
    engine = body.get("engine") or None
    if engine not in (None, "sglang", "vllm"):
        raise InputError(f"kvscope: error: argument --engine: invalid choice: {engine!r} (choose from 'sglang', 'vllm')")
    report = diagnose_text(log, engine=engine, model=(body.get("model") or None)).to_dict()
    return {"json": report, "html": "".join(doctor_sections(report))}


def api_options() -> dict[str, Any]:
    from ..catalog import list_models
    from ..engines.sglang.release import KNOWN_VERSIONS as SGLANG_VERSIONS, LATEST as SGLANG_LATEST
    from ..engines.vllm.release import KNOWN_VERSIONS as VLLM_VERSIONS, LATEST_VERSION as VLLM_LATEST
    from ..hardware.gpus import gpu_names
    return {"models": sorted(list_models()), "gpus": gpu_names(),
            "engines": {"sglang": {"versions": list(SGLANG_VERSIONS), "latest": SGLANG_LATEST},
                        "vllm": {"versions": list(VLLM_VERSIONS), "latest": VLLM_LATEST}}}


def routes():
    from .. import __version__
    from ..report.serve_page import serve_page
    from ..server import Routes
    return Routes(page=lambda query: serve_page(api_options(), __version__), plan=api_plan, doctor=api_doctor,
                  options=api_options)


def run(args: argparse.Namespace) -> int:
    from ..errors import FlagError
    from ..server import make_server
    if not 0 <= args.port <= 65535:
        raise FlagError(f"--port {args.port} is out of range", field="--port", fix="use 0 .. 65535")
    try:
        server = make_server(routes(), args.host, args.port, quiet=args.quiet)
    except OSError as exc:
        raise FlagError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})", field="--port",
                        fix="choose another --port (0 picks a free one)") from None
    host, port = server.server_address[:2]
    print(f"kvscope serve: http://{host}:{port}/  (Ctrl-C to stop)", file=sys.stderr, flush=True)
    if host not in ("127.0.0.1", "::1", "localhost"):
        print("kvscope serve: note: listening beyond this machine; the page has no authentication",
              file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
