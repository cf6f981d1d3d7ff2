"""Conformance suite plumbing: wheel availability, opt-in size, case counting.

* ``KVSCOPE_CONFORMANCE_FULL=1`` (or ``-m conformance_full``): every pinned release and 10x cases.
* ``KVSCOPE_CONFORMANCE_REQUIRE=1``: a wheel that cannot be downloaded fails instead of skipping
  (for CI jobs that must not go green without having run).
* ``KVSCOPE_CONFORMANCE_REPORT=path.json``: write the per-release case counts (docs/conformance.md).
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Dict, Tuple

import pytest

from .wheels import WheelUnavailable, engine_source

_COUNTS: Dict[Tuple[str, str, str], int] = defaultdict(int)
_SKIPS: Dict[str, str] = {}


def full_run(config: pytest.Config) -> bool:
    if os.environ.get("KVSCOPE_CONFORMANCE_FULL", "") not in ("", "0"):
        return True
    return "conformance_full" in (config.getoption("markexpr", "") or "")


def case_multiplier(config: pytest.Config) -> int:
    return 10 if full_run(config) else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if full_run(config):
        return
    skip = pytest.mark.skip(reason="conformance_full: set KVSCOPE_CONFORMANCE_FULL=1 or -m conformance_full")
    for item in items:
        if "conformance_full" in item.keywords:
            item.add_marker(skip)


def require_source(engine: str, version: str, members: Tuple[str, ...]):
    """The release's files, or skip (one line naming the cause) when PyPI is unreachable."""
    key = f"{engine}=={version}"
    if _SKIPS:  # one failed download: do not retry pip for every release
        pytest.skip(_SKIPS.get(key) or next(iter(_SKIPS.values())))
    src = engine_source(engine, version)
    try:
        src.prefetch(members)
    except WheelUnavailable as exc:
        msg = f"conformance: PyPI unreachable: {exc}"
        if os.environ.get("KVSCOPE_CONFORMANCE_REQUIRE", "") not in ("", "0"):
            pytest.fail(msg)
        _SKIPS[key] = msg
        pytest.skip(msg)
    return src


def count_cases(engine: str, version: str, function: str, n: int) -> None:
    _COUNTS[(engine, version, function)] += n


@pytest.fixture(scope="session")
def multiplier(request: pytest.FixtureRequest) -> int:
    return case_multiplier(request.config)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # pragma: no cover
    if _SKIPS:
        terminalreporter.write_line(
            f"conformance: SKIPPED, engine sources unavailable ({next(iter(_SKIPS.values()))})", yellow=True)
    if _COUNTS:
        total = sum(_COUNTS.values())
        terminalreporter.write_line(f"conformance: {total} generated cases compared against engine code "
                                    f"({len({(e, v) for e, v, _ in _COUNTS})} releases)")
    path = os.environ.get("KVSCOPE_CONFORMANCE_REPORT")
    if path and _COUNTS:
        rows = [{"engine": e, "version": v, "function": f, "cases": n}
                for (e, v, f), n in sorted(_COUNTS.items())]
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
