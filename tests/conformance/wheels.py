"""Pinned engine releases from PyPI, cached, read member by member.

The conformance suite runs the engines' *own* code. It obtains it the way a user would:
``pip download --no-deps --only-binary=:all: <engine>==<version>``. Wheels are cached in
``$KVSCOPE_WHEEL_CACHE`` (default ``~/.cache/kvscope/wheels``) and never unpacked: the few
Python files the suite needs are read with :mod:`zipfile` and copied, as text, under
``<cache>/members/<engine>-<version>/`` so that later runs need neither the wheel nor the network
(the vLLM wheels are 250-440 MB each; the members the suite reads are ~1 MB).

The tags passed to pip are fixed (CPython 3.11, manylinux x86_64) so that every machine, whatever
its own Python or OS, reads the same files: several sglang releases only ship cp311 wheels.
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Optional

# The versions the issue pins. The "default" set runs in CI; the others run with
# KVSCOPE_CONFORMANCE_FULL=1 or `-m conformance_full` (see tests/conformance/conftest.py).
SGLANG_VERSIONS = ("0.4.6.post5", "0.5.6", "0.5.9", "0.5.13", "0.5.14", "0.5.18", "0.5.23")
# The default run (README `python -m pytest`, time budget: docs/performance.md): one release per era of
# the budget algebra -- classic (0.4.6.post5), mixin (0.5.9), 0.5.10-0.5.13 gates (0.5.13), the ValueError
# and draft-in-budget (0.5.14), current (0.5.23); 0.5.6 and 0.5.18 run with the FULL set.
SGLANG_DEFAULT = ("0.4.6.post5", "0.5.9", "0.5.13", "0.5.14", "0.5.23")
# FULL-only: the releases between the pins where kvscope's version gates sit (and that real logs
# come from, e.g. 0.4.8.post1 / 0.5.8.post1 ROCm). All on PyPI with py3 or cp311 wheels (1.5-29 MB).
SGLANG_EXTRA = ("0.4.8.post1", "0.4.10.post2", "0.5.3", "0.5.4", "0.5.5", "0.5.7", "0.5.8.post1", "0.5.10",
                "0.5.12", "0.5.15", "0.5.20", "0.5.21", "0.5.22")


def sglang_params(known: Optional[Dict[str, str]] = None) -> list:
    """SGLANG_VERSIONS, then SGLANG_EXTRA; all but SGLANG_DEFAULT marked ``conformance_full`` (skipped in the default run).

    ``known``: version -> reason of a known mismatch (``xfail(strict=True)``)."""
    import pytest

    known = known or {}
    out = []
    for v in (*SGLANG_VERSIONS, *SGLANG_EXTRA):
        marks = [pytest.mark.conformance_full] if v in SGLANG_EXTRA or v not in SGLANG_DEFAULT else []
        if v in known:
            marks.append(pytest.mark.xfail(strict=True, reason=known[v]))
        out.append(pytest.param(v, marks=marks, id=v))
    return out
VLLM_VERSIONS = ("0.10.1.1", "0.11.0", "0.19.1", "0.20.2", "0.26.0", "0.28.0", "0.33.0")
# One wheel per formula era: classic V1 (0.11), cudagraph/0.92 era (0.20.2), current (0.33).
VLLM_DEFAULT = ("0.11.0", "0.20.2", "0.33.0")
# Releases between the pins, FULL-only: they pin the boundaries kvscope's release traits draw
# (release.py VersionTraits, kv_cache.py, memory.py) on read code instead of inference.
VLLM_BOUNDARY = ("0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0", "0.17.0", "0.18.0", "0.19.0",
                 "0.20.0", "0.22.1", "0.24.0", "0.27.1", "0.29.0", "0.30.0")


def _vkey(version: str):
    return tuple(int(p) for p in version.split(".") if p.isdigit())


# Every vLLM release the suite reads, in version order (VLLM_VERSIONS + VLLM_BOUNDARY).
VLLM_ALL = tuple(sorted(set(VLLM_VERSIONS) | set(VLLM_BOUNDARY), key=_vkey))

_PIP_TAGS = [
    "--only-binary=:all:",
    "--python-version", "3.11",
    "--implementation", "cp",
    "--abi", "cp311", "--abi", "abi3", "--abi", "none",
    "--platform", "manylinux_2_35_x86_64",
    "--platform", "manylinux_2_34_x86_64",
    "--platform", "manylinux_2_31_x86_64",
    "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux2014_x86_64",
    "--platform", "manylinux1_x86_64",
    "--platform", "any",
]


class WheelUnavailable(RuntimeError):
    """pip could not obtain the wheel (offline, index down, version yanked)."""


def cache_dir() -> Path:
    root = os.environ.get("KVSCOPE_WHEEL_CACHE") or os.path.join("~", ".cache", "kvscope", "wheels")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _find_wheel(directory: Path, engine: str, version: str) -> Optional[Path]:
    hits = sorted(directory.glob(f"{engine}-{version}-*.whl"))
    return hits[0] if hits else None


def download_wheel(engine: str, version: str, directory: Optional[Path] = None) -> Path:
    """Return the cached wheel, downloading it with pip on first use."""
    directory = directory or cache_dir()
    found = _find_wheel(directory, engine, version)
    if found is not None:
        return found
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--quiet", *_PIP_TAGS, f"{engine}=={version}", "-d", str(directory)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelUnavailable(f"{engine}=={version}: {exc}") from exc
    found = _find_wheel(directory, engine, version)
    if proc.returncode != 0 or found is None:
        lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        reason = lines[-1] if lines else f"pip exited {proc.returncode}"
        raise WheelUnavailable(f"{engine}=={version}: {reason}")
    return found


@dataclass(frozen=True)
class EngineSource:
    """Read-only view of one engine release's Python files."""

    engine: str
    version: str
    root: Path  # <cache>/members/<engine>-<version>

    @property
    def label(self) -> str:
        return f"{self.engine}-{self.version}"

    def path_of(self, member: str) -> Path:
        return self.root / member

    def has(self, member: str) -> bool:
        return self._ensure([member]).get(member) is not None

    def read(self, member: str) -> str:
        text = self._ensure([member]).get(member)
        if text is None:
            raise KeyError(f"{self.label}: no member {member}")
        return text

    def _ensure(self, members: Iterable[str]) -> Dict[str, Optional[str]]:
        out: Dict[str, Optional[str]] = {}
        missing = []
        for m in members:
            p = self.root / m
            if p.is_file():
                out[m] = p.read_text(encoding="utf-8")
            elif (self.root / (m + ".absent")).is_file():
                out[m] = None
            else:
                missing.append(m)
        if missing:
            wheel = download_wheel(self.engine, self.version)
            with zipfile.ZipFile(wheel) as zf:
                names = set(zf.namelist())
                for m in missing:
                    target = self.root / m
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if m in names:
                        text = zf.read(m).decode("utf-8")
                        tmp = target.with_suffix(target.suffix + ".tmp")
                        tmp.write_text(text, encoding="utf-8")
                        tmp.replace(target)
                        out[m] = text
                    else:
                        (self.root / (m + ".absent")).write_text("", encoding="utf-8")
                        out[m] = None
        return out

    def prefetch(self, members: Iterable[str]) -> None:
        self._ensure(list(members))


def engine_source(engine: str, version: str) -> EngineSource:
    root = cache_dir() / "members" / f"{engine}-{version}"
    root.mkdir(parents=True, exist_ok=True)
    return EngineSource(engine, version, root)
