"""Run a command under the probe: environment, process group, signals, and the attachment report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from kvscope.errors import KvscopeError
from kvscope.probe.targets import Target, all_targets, targets_to_json

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")
TARGETS_FILE = "targets.json"
LOCK_FILE = ".kvscope-probe.lock"  # the live run that owns the directory (its pid)
# Records that end an engine's startup (the hook tables' ``end_of_startup`` targets).
_END_MARKS = (b'"target":"event_loop_normal"', b'"target":"event_loop_overlap"',
              b'"event":"return","target":"compile_or_warm_up_model"',
              b'"event":"call","target":"run_busy_loop"')


def probe_env(out_dir: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes every Python process load the agent at interpreter start
    (unchanged when there is no usable output directory: the program then runs unprobed)."""
    env = dict(os.environ if base is None else base)
    if out_dir is None:
        return env
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + old if old else "")
    env["KVSCOPE_PROBE_OUT"] = os.path.abspath(out_dir)
    env["KVSCOPE_PROBE_TARGETS"] = os.path.join(os.path.abspath(out_dir), TARGETS_FILE)
    return env


def prepare_out_dir(out_dir: str, targets: Iterable[Target] | None = None) -> None:
    """Claim ``out_dir`` for one run and write its ``targets.json``.

    Raises ``KvscopeError`` when the directory already holds records or another live probe holds
    it (two runs never mix in one directory), ``OSError`` when it cannot be used at all.
    """
    os.makedirs(out_dir, exist_ok=True)
    _claim(out_dir)
    try:
        stale = [n for n in os.listdir(out_dir) if n.startswith("probe-") and n.endswith(".jsonl")]
        if stale:
            raise KvscopeError(f"{out_dir} already holds probe records ({len(stale)} files)",
                               field="--out", fix="use a new directory per run")
        data = json.dumps(targets_to_json(all_targets() if targets is None else targets), indent=1)
        write_atomic(os.path.join(out_dir, TARGETS_FILE), data)
    except BaseException:
        release_out_dir(out_dir)
        raise


def _claim(out_dir: str) -> None:
    """Create ``LOCK_FILE`` exclusively; a lock left by a dead process is taken over."""
    path = os.path.join(out_dir, LOCK_FILE)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is not None and holder != os.getpid() and _alive(holder):
                raise KvscopeError(f"{out_dir} is in use by another kvscope probe (pid {holder})",
                                   field="--out", fix="use a new directory per run") from None
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            continue
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
        return
    raise KvscopeError(f"{out_dir} is being claimed by another kvscope probe", field="--out",
                       fix="use a new directory per run")


def _lock_holder(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return int(fh.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_out_dir(out_dir: str | None) -> None:
    """Remove this run's lock (best effort: never fails)."""
    if out_dir is None:
        return
    path = os.path.join(out_dir, LOCK_FILE)
    try:
        if _lock_holder(path) == os.getpid():
            os.unlink(path)
    except OSError:
        pass


def open_out_dir(out_dir: str, targets: Iterable[Target] | None = None) -> tuple[str | None, str | None]:
    """(directory the records go to, one-line warning or None).

    An unusable ``out_dir`` (read-only, full, not a directory) never stops the program: the records
    go to a fresh temporary directory instead, or are skipped when that fails too (the program
    then runs unprobed). A directory that holds another run's records raises ``KvscopeError``.
    """
    try:
        prepare_out_dir(out_dir, targets)
        return out_dir, None
    except OSError as exc:
        why = f"{exc.strerror or exc}"
    try:
        fallback = tempfile.mkdtemp(prefix="kvscope-probe-")
        prepare_out_dir(fallback, targets)
    except OSError as exc:
        return None, (f"kvscope probe: warning: --out {out_dir} is unusable ({why}) and so is a "
                      f"temporary directory ({exc.strerror or exc}); the command runs without the probe")
    return fallback, (f"kvscope probe: warning: --out {out_dir} is unusable ({why}); the records go "
                      f"to {fallback}")


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: a failed write leaves no partial file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def exit_like(returncode: int) -> int:
    """The exit status that makes ``kvscope probe`` look like the program it ran.

    A program killed by a signal (``returncode`` = -N) is mirrored by re-raising N on this
    process with its default action, so a shell sees 128+N and a parent sees the same signal;
    ``128 + N`` is returned only when that signal does not end a process by default.
    """
    if returncode >= 0:
        return returncode
    signum = -returncode
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 -- a closed pipe must not change the status
            pass
    try:
        signal.signal(signum, signal.SIG_DFL)  # SIGKILL / SIGSTOP cannot be set, nor caught
    except (OSError, ValueError):
        pass
    try:
        os.kill(os.getpid(), signum)
        time.sleep(0.1)  # delivery is asynchronous for some signals
    except (OSError, ValueError):
        pass
    return 128 + signum


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stopped_after_startup: bool
    wall_s: float
    stdout: str | None = None  # only when ``stdout=subprocess.PIPE`` was passed
    timed_out: bool = False  # ``timeout_s`` stopped the command (not the end of startup)


def run_under_probe(cmd: Sequence[str], out_dir: str | None, *, stop_after_startup: bool = False,
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
    stopped = timed_out = False
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                stopped = timed_out = True
                rc = _stop(proc)
                break
            if stop_after_startup and out_dir is not None and _startup_settled(out_dir, settle_s):
                stopped = True
                rc = _stop(proc)
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    captured = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else None
    return RunResult(rc, stopped, time.monotonic() - t0, captured, timed_out)


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
    try:
        return _settled(out_dir, settle_s)
    except OSError:  # the directory went away or became unreadable: keep running
        return False


def _settled(out_dir: str, settle_s: float) -> bool:
    newest, ended = 0.0, False
    for name in os.listdir(out_dir):
        if not (name.startswith("probe-") and name.endswith(".jsonl")):
            continue
        path = os.path.join(out_dir, name)
        newest = max(newest, os.path.getmtime(path))
        if not ended:
            with open(path, "rb") as fh:
                data = fh.read()
            ended = any(t in data for t in _END_MARKS)
    return ended and time.time() - newest > settle_s

