"""One JSON Schema for every --json output (plan, doctor, fit, probe), the same top-level shape for
both engines; the shipped file and docs/json.md are generated from the typed records."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

import kvscope
from kvscope.schema import markdown, output_schema, schema_text

ROOT = Path(__file__).resolve().parents[1]
VALIDATOR = jsonschema.Draft202012Validator(output_schema())
SHIPPED = resources.files("kvscope").joinpath("data/output.schema.json").read_text()


def _valid(obj: dict) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(obj)]


def test_shipped_schema_and_docs_are_generated_from_the_records():
    jsonschema.Draft202012Validator.check_schema(json.loads(SHIPPED))
    assert SHIPPED == schema_text(), "regenerate: python -m kvscope.schema > src/kvscope/data/output.schema.json"
    assert (ROOT / "docs/json.md").read_text() == markdown(), \
        "regenerate: python -m kvscope.schema --markdown > docs/json.md"


PLANS = [
    ("moonshotai/Kimi-K2.5", "rtx-pro-6000", dict(tp_size=8, mem_fraction_static=0.55, pre_load_free_gib=94,
                                                   post_load_free_gib=21.7)),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "h200", dict(tp_size=4)),
    ("openai/gpt-oss-120b", "b200", dict(tp_size=2)),
    ("google/gemma-3-1b-it", "h100-sxm", dict()),
    ("deepseek-ai/DeepSeek-V4-Flash", "h200", dict(tp_size=8)),
    ("meta-llama/Llama-3.1-8B-Instruct", "rtx-3090", dict(context_length=131072)),
]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("model,gpu,flags", PLANS, ids=[p[0] for p in PLANS])
def test_plan_output_validates_for_both_engines(engine, model, gpu, flags):
    if engine == "vllm":
        flags = {{"tp_size": "tensor_parallel_size", "context_length": "max_model_len"}.get(k, k): v
                 for k, v in flags.items() if "free_gib" not in k and k != "mem_fraction_static"}
    out = kvscope.plan(model, gpu, engine=engine, **flags).to_dict()
    assert _valid(out) == []


def test_both_engines_share_the_top_level_shape():
    required = set(output_schema()["$defs"]["Timeline"]["required"])
    for engine in ("sglang", "vllm"):
        keys = set(kvscope.plan("Qwen/Qwen3-8B", "h100-sxm", engine=engine).to_dict())
        assert required <= keys


def test_schema_refuses_what_the_records_do_not_declare():
    out = kvscope.plan("Qwen/Qwen3-8B", "h100-sxm").to_dict()
    for mutate in (lambda o: o.update(bogus=1), lambda o: o["ranks"][0]["decision"].update(bogus=1),
                   lambda o: o["ranks"][0]["decision"].update(rest_memory_bytes="1 GiB"),
                   lambda o: o.pop("kv_cache_tokens"), lambda o: o.update(tokens_per_0_01_mem_fraction=1.5)):
        bad = copy.deepcopy(out)
        mutate(bad)
        assert _valid(bad), "the schema let a malformed output through"


@pytest.mark.parametrize("log", sorted((ROOT / "tests/doctor/real_logs").glob("*.log"))
                         + [ROOT / "tests/doctor/data/origin_kimi_k25_8x_rtxpro6000.log"], ids=lambda p: p.stem)
def test_doctor_output_validates(log):
    assert _valid(kvscope.doctor(str(log)).to_dict()) == []


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_fit_output_validates(engine):
    res = kvscope.fit("Qwen/Qwen3-32B", "h100-sxm", gpus=4, context=32768, concurrency=8, engine=engine)
    assert _valid(res.to_dict()) == []
    nothing = kvscope.fit("Qwen/Qwen3-32B", "rtx-4090", gpus=1, context=32768, concurrency=64, engine=engine)
    assert not nothing.fits and _valid(nothing.to_dict()) == []
