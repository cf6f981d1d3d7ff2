from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def load_cases() -> dict[str, dict]:
    with open(DATA / "cases.jsonl", encoding="utf-8") as f:
        return {c["id"]: c for c in (json.loads(line) for line in f if line.strip())}


@pytest.fixture(scope="session")
def cases() -> dict[str, dict]:
    return load_cases()


@pytest.fixture(scope="session")
def origin_log() -> str:
    return (DATA / "origin_kimi_k25_8x_rtxpro6000.log").read_text(encoding="utf-8")
