"""Catalog integrity (issue 13): every entry names where its bytes came from, and no bundled id can give a
number from a copy that lacks what changes the arithmetic."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from kvscope.catalog import DATA_DIR, list_models, load_model_source
from kvscope.errors import ConfigError
from kvscope.model.load import load_spec

ADDED = sorted(d.name for d in DATA_DIR.iterdir()
               if (d / "meta.json").exists() and json.loads((d / "meta.json").read_text()).get("added"))
QUANT_NAME = re.compile(r"(FP8|NVFP4|AWQ|GPTQ|INT4|INT8|W4A16|W8A8|MXFP4|bnb)", re.I)


def test_the_pass_added_entries():
    assert len(ADDED) >= 100


@pytest.mark.parametrize("d", ADDED)
def test_each_added_file_matches_its_recorded_source(d):
    meta = json.loads((DATA_DIR / d / "meta.json").read_text())
    assert re.fullmatch(r"[\w.-]+/[\w.-]+:[^@\s]+@[0-9a-f]{40}( \(.*\))?", meta["source"]), meta["source"]
    data = (DATA_DIR / d / meta["config_file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == meta["sha256"] and len(data) == meta["bytes"]


def test_quantized_repos_plan_quantized():
    """A repo named as a quantized checkpoint is either read as quantized or not listed (refused)."""
    for m in list_models():
        if QUANT_NAME.search(m.split("/")[-1]) and "eagle" not in m.lower():
            spec, _ = load_spec(m)
            assert spec.quant.is_quantized, m


def test_entries_with_missing_fields_refuse_naming_the_field(monkeypatch):
    monkeypatch.setenv("KVSCOPE_HUB", "0")
    for d in DATA_DIR.iterdir():
        meta = json.loads((d / "meta.json").read_text()) if (d / "meta.json").exists() else {}
        if meta.get("missing_fields"):
            hf = meta.get("hf_id") or d.name.replace("--", "/", 1)
            assert hf not in list_models()
            with pytest.raises(ConfigError) as e:
                load_model_source(hf)
            assert e.value.field == meta["missing_fields"][0] and "\n" not in str(e.value)
