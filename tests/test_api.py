"""The library is the product: ``kvscope.plan / fit / doctor`` return exactly what the CLI renders."""

from __future__ import annotations

import contextlib
import doctest
import io
import json
from pathlib import Path

import pytest

import kvscope
from kvscope.cli import main
from kvscope.errors import FlagError

ROOT = Path(__file__).resolve().parents[1]


def _cli_json(argv: list[str]) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, json.loads(out.getvalue())


PLAN_CASES = [
    # (CLI argv after "plan MODEL", library kwargs)
    ("moonshotai/Kimi-K2.5", ["--gpu", "rtx-pro-6000", "--tp", "8", "--mem-fraction-static", "0.55",
                              "--pre-load-free-gib", "94", "--post-load-free-gib", "21.7"],
     dict(gpu="rtx-pro-6000", tp_size=8, mem_fraction_static=0.55, pre_load_free_gib=[94], post_load_free_gib=[21.7])),
    ("Qwen/Qwen3-8B", ["--gpu", "h100-sxm", "--engine-version", "0.5.9", "--context-length", "8192"],
     dict(gpu="h100-sxm", engine_version="0.5.9", context_length=8192)),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", ["--gpu", "h200", "--tp", "4", "--disable-radix-cache"],
     dict(gpu="h200", tp_size=4, disable_radix_cache=True)),
    ("meta-llama/Llama-3.1-8B-Instruct", ["--engine", "vllm", "--gpu", "h100-sxm", "--max-model-len", "8192",
                                          "--gpu-memory-utilization", "0.95"],
     dict(gpu="h100-sxm", engine="vllm", max_model_len=8192, gpu_memory_utilization=0.95)),
    ("openai/gpt-oss-120b", ["--engine", "vllm", "--gpu", "h100-sxm", "--tensor-parallel-size", "2",
                             "--engine-version", "0.11.0", "--available-kv-cache-gib", "40.5"],
     dict(gpu="h100-sxm", engine="vllm", tensor_parallel_size=2, engine_version="0.11.0",
          available_kv_cache_gib=40.5)),
    ("deepseek-ai/DeepSeek-V3", ["--engine", "vllm", "--gpu", "h200", "--tp", "8", "--max-model-len", "auto"],
     dict(gpu="h200", engine="vllm", tp_size=8, max_model_len=-1)),
]


@pytest.mark.parametrize("model,argv,kwargs", PLAN_CASES, ids=[c[0] + " " + " ".join(c[1][:4]) for c in PLAN_CASES])
def test_plan_library_is_the_cli(model, argv, kwargs):
    rc, cli = _cli_json(["plan", model, *argv, "--json"])
    t = kvscope.plan(model, **kwargs)
    assert rc == (0 if t.starts else 1)  # a predicted failure exits 1, with the full JSON (docs/exit-status.md)
    assert t.to_dict() == cli


def test_plan_vllm_block_arithmetic_on_a_printed_figure():
    # Llama-3.1-8B on one H100, vLLM 0.19.0, "Available KV cache memory: 58.11 GiB": 58.11 x 2^30 B over
    # 131,072 B per token (32 layers x 8 KV heads x 128 x 2 x bf16) = 476,032.6 tokens -> 29,752 blocks of 16.
    # (The log itself prints 476,016: its true figure is a little under the rounded 58.11.)
    t = kvscope.plan("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", engine="vllm", engine_version="0.19.0",
                     max_model_len=8192, gpu_memory_utilization=0.95, enable_prefix_caching=False,
                     available_kv_cache_gib=58.11)
    assert t.extra.num_gpu_blocks == 29_752 and t.kv_cache_tokens == 476_032
    assert t.extra.max_concurrency == round(476_032 / 8192, 4)


def test_plan_checkpoint_dir_uses_exact_weights(tmp_path):
    # a two-tensor checkpoint: the library reads the safetensors header exactly as the CLI does
    import struct
    cfg = json.loads((ROOT / "src/kvscope/catalog/data/Qwen--Qwen3-0.6B/config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    header = {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [1000, 1024], "data_offsets": [0, 2_048_000]},
              "model.layers.0.self_attn.q_proj.weight": {"dtype": "BF16", "shape": [2048, 1024],
                                                         "data_offsets": [2_048_000, 6_242_304]}}
    raw = json.dumps(header).encode()
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + 6_242_304)  # the data, sparse: only the header is read
    t = kvscope.plan(str(tmp_path), "h100-sxm", tp_size=2)
    assert t.weights_bytes == 2_048_000 // 2 + 4_194_304 // 2
    rc, cli = _cli_json(["plan", str(tmp_path), "--gpu", "h100-sxm", "--tp", "2", "--json"])
    assert cli == t.to_dict()


def test_plan_refuses_unknown_flags_with_one_line():
    with pytest.raises(FlagError, match="mem_fraction"):
        kvscope.plan("Qwen/Qwen3-8B", "h100-sxm", mem_fraction=0.8)
    with pytest.raises(FlagError, match="engine"):
        kvscope.plan("Qwen/Qwen3-8B", "h100-sxm", engine="trt")


def test_fit_library_is_the_cli():
    rc, cli = _cli_json(["fit", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--gpus", "4", "--context", "32768",
                         "--concurrency", "8", "--json"])
    res = kvscope.fit("Qwen/Qwen3-32B", "h100-sxm", gpus=4, context=32768, concurrency=8)
    assert res.to_dict() == cli
    assert rc == (0 if res.fits else 1)


def test_doctor_library_is_the_cli():
    log = ROOT / "tests/doctor/real_logs/sglang-5770-qwen2-tp4.log"
    rc, cli = _cli_json(["doctor", str(log), "--json"])
    rep = kvscope.doctor(str(log))
    got = rep.to_dict()
    got["log"].pop("seconds"), cli["log"].pop("seconds")
    assert got == cli


def test_api_docs_examples_run():
    res = doctest.testfile(str(ROOT / "docs/api.md"), module_relative=False,
                           optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted >= 10 and res.failed == 0
