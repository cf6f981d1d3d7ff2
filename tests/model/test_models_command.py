"""``kvscope models``: every bundled id with a usable config, with facts read from its own config."""

from __future__ import annotations

import json

from kvscope.catalog import list_models
from kvscope.catalog.listing import catalog_rows
from kvscope.cli import main


def test_lists_every_usable_bundled_id_and_each_loads(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["hf_id"] for r in rows) == sorted(list_models())
    assert all(r["error"] is None and r["attention"] and r["family"] for r in rows)
    assert len(rows) >= 200


def test_facts_are_the_configs():
    rows = {r["hf_id"]: r for r in catalog_rows()[0]}
    # Llama-3.1-8B: 32 heads over 8 KV heads; 8,030,261,248 parameters (32 x 218,112,000 + 2 x 525,336,576 + 4096)
    assert rows["meta-llama/Llama-3.1-8B-Instruct"]["attention"] == "GQA-4"
    assert rows["meta-llama/Llama-3.1-8B-Instruct"]["params"] == 8_030_261_248
    assert rows["deepseek-ai/DeepSeek-V3.2"]["attention"] == "MLA+DSA"
    assert rows["openai/gpt-oss-20b"]["quantization"] == "mxfp4"
    assert rows["openai/gpt-oss-20b"]["attention"] == "GQA-8+SWA"
    assert rows["Qwen/Qwen3.5-27B"]["attention"].endswith("+linear")
    assert rows["Qwen/Qwen3-32B-FP8"]["quantization"] == "fp8"


def test_query_words_all_match(capsys):
    assert main(["models", "qwen3", "fp8"]) == 0
    out = capsys.readouterr().out.splitlines()
    ids = [line.split()[0] for line in out[1:-1]]
    assert ids and all("qwen3" in i.lower() and "fp8" in i.lower() for i in ids)
    assert out[-1].startswith(f"{len(ids)} of {len(list_models())} bundled models")


def test_all_shows_entries_that_refuse_and_why():
    rows = {r["hf_id"]: r for r in catalog_rows(include_unusable=True)[0]}
    assert rows["moonshotai/Kimi-K2-Thinking"]["error"] == "missing quantization_config"
    assert rows["google/gemma-3-4b-it"]["error"] == "no bundled config (hub only)"
