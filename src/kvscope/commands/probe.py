"""``kvscope probe``: run an engine with the probe agent loaded, or read a running server.

  kvscope probe --out run1/ -- python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2
  kvscope probe --out run2/ -- vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 4
  kvscope probe --url http://127.0.0.1:30000 --out run3/

Writes one JSONL file per probed process plus ``attachment.json`` and ``timeline.json`` into
``--out``; ``kvscope doctor DIR`` reads the same directory. Exit status: the command's own (a
command killed by a signal makes the probe die of the same signal); 124 when ``--timeout``
stopped it; an unusable ``--out`` or a failed report write is a warning, never a different status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kvscope.errors import KvscopeError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe",
        help="measure an engine start from inside its processes (no engine file modified)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the records")
    p.add_argument("--url", help="read a running server (SGLang /server_info, vLLM /metrics)")
    p.add_argument("--stop-after-startup", action="store_true",
                   help="stop the command once startup has ended and records have settled")
    p.add_argument("--settle", type=float, default=5.0, metavar="S",
                   help="seconds without new records before --stop-after-startup stops (5)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop the command after S seconds")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when a required hook target was not found")
    p.add_argument("--json", action="store_true", help="print the timeline as JSON")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvscope.probe.live import read_live, write_live
    from kvscope.probe.runner import exit_like, open_out_dir, release_out_dir, run_under_probe

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if args.url and cmd:
        raise KvscopeError("give either --url or a command, not both", field="--url")
    if args.url:
        write_live(args.out, read_live(args.url))
        return _report(args, args.out, 0)
    if not cmd:
        raise KvscopeError("no command given", field="CMD",
                           fix="kvscope probe --out DIR -- python -m sglang.launch_server ...")
    # The probe never changes what the command does: an unusable --out is a warning, not a stop.
    out, warning = open_out_dir(args.out)
    if warning:
        print(warning, file=sys.stderr)
    try:
        result = run_under_probe(cmd, out, stop_after_startup=args.stop_after_startup,
                                 settle_s=args.settle, timeout_s=args.timeout)
    finally:
        release_out_dir(out)
    if result.timed_out:
        rc = TIMEOUT_STATUS
    elif result.stopped_after_startup:
        rc = 0
    else:
        rc = result.returncode
    if out is not None:
        try:
            rc = _report(args, out, rc)
        except Exception as exc:  # noqa: BLE001 -- a report failure never changes the status
            _warn(f"kvscope probe: warning: no report written ({type(exc).__name__}: {exc}); "
                  f"the command's exit status is kept")
    return exit_like(rc)


TIMEOUT_STATUS = 124  # --timeout stopped the command (GNU timeout's status)


def _report(args: argparse.Namespace, out: str, rc: int) -> int:
    from kvscope.probe.records import report_for_dir
    from kvscope.probe.timeline import timeline_from_probe_dir
    from kvscope.report.probe_text import render_attachment, render_timeline

    report = report_for_dir(out)
    timeline = timeline_from_probe_dir(out)
    _dump(os.path.join(out, "attachment.json"), report.to_dict())
    _dump(os.path.join(out, "timeline.json"), timeline.to_dict())
    if args.json:
        print(json.dumps(timeline.to_dict(), indent=2, default=str))
    else:
        if not args.url:
            print(render_attachment(report), file=sys.stderr)
        print(render_timeline(timeline))
    if args.strict and not args.url and not report.ok and rc == 0:
        return 3
    return rc


def _warn(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except Exception:  # noqa: BLE001 -- stderr closed: nothing more to say
        pass


def _dump(path: str, data: Any) -> None:
    from kvscope.probe.runner import write_atomic

    write_atomic(path, json.dumps(data, indent=1, default=str))
