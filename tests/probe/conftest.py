"""Helpers for the probe tests: run a fixture engine under the probe in a temp directory."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from kvscope.probe.records import load_probe_dir, report_for_dir
from kvscope.probe.runner import prepare_out_dir, release_out_dir, run_under_probe
from kvscope.probe.timeline import timeline_from_probe_dir

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
MODEL = os.path.join(FIXTURES, "model_qwen3_8b_like.json")


@dataclass
class FixtureRun:
    out: str
    returncode: int
    stdout: str

    @property
    def processes(self):
        return load_probe_dir(self.out)

    @property
    def report(self):
        return report_for_dir(self.out)

    @property
    def timeline(self):
        return timeline_from_probe_dir(self.out)


def fixture_env(engine_dir: str, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(FIXTURES, "common"),
                                         os.path.join(FIXTURES, engine_dir)])
    for k in ("KVSCOPE_PROBE_OUT", "KVSCOPE_PROBE_TARGETS", "KVSCOPE_PROBE_FAULT"):
        env.pop(k, None)
    env.update(extra or {})
    return env


def launch_cmd(engine_dir: str, *args: str) -> list[str]:
    return [sys.executable, os.path.join(FIXTURES, engine_dir, "launch.py"), *args]


def run_fixture(tmp_path, engine_dir: str, *args: str, extra_env=None, targets=None,
                name="run") -> FixtureRun:
    out = str(tmp_path / name)
    prepare_out_dir(out, targets)
    try:
        res = run_under_probe(launch_cmd(engine_dir, *args), out, timeout_s=60,
                              env=fixture_env(engine_dir, extra_env), stdout=subprocess.PIPE)
    finally:
        release_out_dir(out)
    return FixtureRun(out, res.returncode, res.stdout or "")


def run_plain(engine_dir: str, *args: str) -> tuple[int, str]:
    p = subprocess.run(launch_cmd(engine_dir, *args), env=fixture_env(engine_dir),
                       stdout=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, p.stdout


@pytest.fixture
def model_path():
    return MODEL
