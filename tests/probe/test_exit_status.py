"""`kvscope probe` never changes what the command does (issue #12, deliverable 6).

Each test runs ``kvscope probe`` as a separate process around a small Python program and
compares with the program run plain: death by a signal, an unusable ``--out``, a report write that
fails after the program ran, and two probes on one ``--out``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kvscope.probe.runner import LOCK_FILE, exit_like

PROBE = [sys.executable, "-m", "kvscope.cli", "probe"]


def _default_sigint() -> None:
    """Children start with SIGINT at its default: a CI job run in the background (nohup, ``&``) starts with
    SIGINT ignored, and a program that inherits that cannot die of it, probe or not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, preexec_fn=_default_sigint, **kw)


def _program(code: str) -> list:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_death_by_signal_looks_the_same(tmp_path, signum):
    prog = _program(f"import os; print('up', flush=True); os.kill(os.getpid(), {int(signum)})")
    plain = _run(prog)
    probed = _run([*PROBE, "--out", str(tmp_path / "o"), "--", *prog])
    assert plain.returncode == -signum
    assert probed.returncode == plain.returncode  # not 247 / 241: the same signal
    assert probed.stdout.startswith(plain.stdout)


def test_death_by_signal_seen_from_a_shell(tmp_path):
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    cmd = " ".join([*PROBE, "--out", str(tmp_path / "o"), "--", sys.executable, "-c", repr(code)])
    shell = subprocess.run(["/bin/sh", "-c", cmd + "; echo status=$?"], capture_output=True, preexec_fn=_default_sigint,
                           text=True, timeout=120)
    assert "status=137" in shell.stdout


def test_unusable_out_warns_and_the_program_still_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    prog = _program("import sys; print('ran'); sys.exit(7)")
    probed = _run([*PROBE, "--out", str(blocker / "sub"), "--", *prog])
    assert probed.returncode == 7
    assert probed.stdout.startswith("ran\n")
    warnings = [ln for ln in probed.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and str(blocker / "sub") in warnings[0]
    assert "records go to" in warnings[0]
    fallback = warnings[0].rsplit("records go to ", 1)[1].strip()
    assert os.path.isfile(os.path.join(fallback, "targets.json"))
    assert not os.path.exists(os.path.join(fallback, LOCK_FILE))  # released after the run


def test_a_failed_report_write_keeps_the_exit_status(tmp_path):
    out = tmp_path / "o"
    (out / "attachment.json").mkdir(parents=True)  # the report's write fails after the run
    prog = _program("import sys; print('ran'); sys.exit(5)")
    probed = _run([*PROBE, "--out", str(out), "--", *prog])
    assert probed.returncode == 5
    assert "ran" in probed.stdout
    assert "no report written" in probed.stderr and "Traceback" not in probed.stderr
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []  # no partial file


def test_a_failed_report_write_keeps_a_zero_status(tmp_path):
    out = tmp_path / "o"
    (out / "timeline.json").mkdir(parents=True)
    probed = _run([*PROBE, "--out", str(out), "--", *_program("print('ok')")])
    assert probed.returncode == 0 and probed.stdout.startswith("ok")
    assert json.loads((out / "attachment.json").read_text())["processes"] == []


def test_two_probes_on_one_out_never_mix(tmp_path):
    out = tmp_path / "o"
    first = subprocess.Popen([*PROBE, "--out", str(out), "--",
                              *_program("import time; time.sleep(4); print('first')")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not (out / LOCK_FILE).exists() and time.time() < deadline:
            time.sleep(0.05)
        second = _run([*PROBE, "--out", str(out), "--", *_program("print('second')")])
        assert second.returncode == 2
        assert "in use by another kvscope probe" in second.stderr
        assert "second" not in second.stdout
    finally:
        stdout, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and stdout.startswith("first")
    assert not (out / LOCK_FILE).exists()


def test_a_lock_left_by_a_dead_probe_is_taken_over(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / LOCK_FILE).write_text(str(dead.pid))
    probed = _run([*PROBE, "--out", str(out), "--", *_program("print('ran')")])
    assert probed.returncode == 0 and probed.stdout.startswith("ran")


def test_exit_like_passes_statuses_through():
    assert exit_like(0) == 0 and exit_like(3) == 3 and exit_like(255) == 255


def test_timeout_stops_the_program_with_124(tmp_path):
    t0 = time.time()
    probed = _run([*PROBE, "--out", str(tmp_path / "o"), "--timeout", "1", "--",
                   *_program("import time; time.sleep(60)")])
    assert probed.returncode == 124  # GNU timeout's status, not the SIGTERM the probe sent
    assert time.time() - t0 < 50
