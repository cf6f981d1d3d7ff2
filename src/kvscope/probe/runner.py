"""Run a command under the probe: environment, process group, signals, and the attachment report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from kvscope.errors import KvscopeError
from kvscope.probe.targets import Target, all_targets, targets_to_json

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")
TARGETS_FILE = "targets.json"


def probe_env(out_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes every Python process load the agent at interpreter start."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + old if old else "")
    env["KVSCOPE_PROBE_OUT"] = os.path.abspath(out_dir)
    env["KVSCOPE_PROBE_TARGETS"] = os.path.join(os.path.abspath(out_dir), TARGETS_FILE)
    return env


def prepare_out_dir(out_dir: str, targets: Iterable[Target] | None = None) -> None:
    os.makedirs(out_dir, exist_ok=True)
    stale = [n for n in os.listdir(out_dir) if n.startswith("probe-") and n.endswith(".jsonl")]
    if stale:
        raise KvscopeError(f"{out_dir} already holds probe records ({len(stale)} files)",
                           field="--out", fix="use a new directory per run")
    with open(os.path.join(out_dir, TARGETS_FILE), "w", encoding="utf-8") as fh:
        json.dump(targets_to_json(all_targets() if targets is None else targets), fh, indent=1)


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stopped_after_startup: bool
    wall_s: float
    stdout: str | None = None  # only when ``stdout=subprocess.PIPE`` was passed


def run_under_probe(cmd: Sequence[str], out_dir: str, *, stop_after_startup: bool = False,
                    settle_s: float = 5.0, timeout_s: float | None = None,
                    env: dict[str, str] | None = None, cwd: str | None = None,
                    stdout: Any = None, stderr: Any = None) -> RunResult:
    """Run ``cmd`` with the agent loaded in every Python process; return its exit status.

    ``stop_after_startup``: once some process has recorded the end of startup and no record was
    written for ``settle_s`` seconds, terminate the command's process group (a server otherwise
    runs until stopped). Ctrl-C / SIGTERM are forwarded to the command.
    """
    if not cmd:
        raise KvscopeError("no command to run", field="CMD",
                           fix="kvscope probe --out DIR -- python -m sglang.launch_server ...")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(list(cmd), env=probe_env(out_dir, env), cwd=cwd, stdout=stdout,
                                stderr=stderr, start_new_session=True)
    except OSError as exc:
        raise KvscopeError(f"cannot run {cmd[0]}: {exc.strerror or exc}", field="CMD") from exc

    def forward(signum, _frame):
        _signal_group(proc, signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    stopped = False
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                stopped = True
                rc = _stop(proc)
                break
            if stop_after_startup and _startup_settled(out_dir, settle_s):
                stopped = True
                rc = _stop(proc)
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    captured = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else None
    return RunResult(rc, stopped, time.monotonic() - t0, captured)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen) -> int:
    _signal_group(proc, signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        return proc.wait()


def _startup_settled(out_dir: str, settle_s: float) -> bool:
    newest, ended = 0.0, False
    for name in os.listdir(out_dir):
        if not (name.startswith("probe-") and name.endswith(".jsonl")):
            continue
        path = os.path.join(out_dir, name)
        newest = max(newest, os.path.getmtime(path))
        if not ended:
            with open(path, "rb") as fh:
                data = fh.read()
            ended = any(t in data for t in (b'"target":"event_loop_normal"',
                                            b'"target":"event_loop_overlap"',
                                            b'"event":"return","target":"compile_or_warm_up_model"'))
    return ended and time.time() - newest > settle_s

