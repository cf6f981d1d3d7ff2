"""The ``slow`` tier: tests marked ``@pytest.mark.slow`` are skipped by the README's ``python -m pytest``
(the default run stays within its time budget, docs/performance.md) and run by ``python -m pytest -m slow``
(``.ci/tier_slow``) or with ``KVSCOPE_SLOW=1``."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if "slow" in (config.getoption("markexpr", "") or "") or os.environ.get("KVSCOPE_SLOW", "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason="slow tier: python -m pytest -m slow (.ci/tier_slow) or KVSCOPE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
