"""Shared helpers for tests/vllm (importable: pytest prepends this directory)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

from kvscope.catalog import load_model_source
from kvscope.model.spec import ModelSpec

DATA = Path(__file__).parent / "data"


def load_cases() -> dict:
    """vLLM cases of shared/logs/cases.jsonl (byte copy in data/)."""
    with open(DATA / "cases.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {r["id"]: r for r in rows if r["engine"] == "vllm"}


def spec_of(model: str) -> ModelSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = load_model_source(model)
        return ModelSpec.from_hf_config(src.config, src.name, src.hf_quant_config)


