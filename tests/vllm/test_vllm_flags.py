"""vLLM flags: the CLI (commands/vllm_flags.py) and the library (``args.flags_from_options``) build the
same ``VllmFlags``; ``VllmFlags.__post_init__`` refuses the spec-independent mistakes; the engine's
plan module carries no CLI edge."""

from __future__ import annotations

import argparse
import ast
import pathlib

import pytest

from kvscope.commands.vllm_flags import add_vllm_arguments
from kvscope.engines.vllm import plan as plan_mod
from kvscope.engines.vllm.args import OPTIONS, VllmFlags, flags_from_options
from kvscope.errors import FlagError


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_vllm_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("argv,kwargs", [
    ((), {}),
    (("-tp", "2", "--gpu-memory-utilization", "0.9", "--max-model-len", "32k"),
     dict(tensor_parallel_size=2, gpu_memory_utilization=0.9, max_model_len="32k")),
    (("--max-model-len", "auto", "--kv-cache-memory-bytes", "40G", "--no-enable-prefix-caching"),
     dict(max_model_len="auto", kv_cache_memory_bytes="40G", enable_prefix_caching=False)),
    (("--speculative-config", '{"method": "MTP", "num_speculative_tokens": 2}', "--enforce-eager"),
     dict(speculative_config={"method": "MTP", "num_speculative_tokens": 2}, enforce_eager=True)),
])
def test_cli_and_library_build_the_same_flags(argv, kwargs):
    ns = _parse(*argv)
    assert flags_from_options(**{k: getattr(ns, k) for k in OPTIONS}) == flags_from_options(**kwargs)


def test_options_are_the_cli_defaults():
    ns = _parse()
    assert {k: getattr(ns, k) for k in OPTIONS} == OPTIONS


def test_library_refuses_unknown_names():
    with pytest.raises(FlagError, match="not a vLLM flag"):
        flags_from_options(tp_size=2)


@pytest.mark.parametrize("kw,field", [
    (dict(tensor_parallel_size=0), "--tensor-parallel-size"), (dict(kv_cache_dtype="int3"), "--kv-cache-dtype"),
    (dict(max_model_len=0), "--max-model-len"), (dict(block_size=0), "--block-size"),
])
def test_post_init_checks(kw, field):
    with pytest.raises(FlagError) as e:
        VllmFlags(**kw)
    assert e.value.field == field


def test_engine_plan_has_no_cli_edges():
    tree = ast.parse(pathlib.Path(plan_mod.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"argparse", "json"}
