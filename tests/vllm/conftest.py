from __future__ import annotations

import pytest

from vllm_case_data import load_cases


@pytest.fixture(scope="session")
def cases() -> dict:
    return load_cases()
