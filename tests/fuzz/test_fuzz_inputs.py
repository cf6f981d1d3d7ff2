"""Fuzz targets: configs, CLI flag lines (plan, fit, perf), probe records and doctor inputs.

Each target runs ``DEFAULT_EXAMPLES`` examples in the default test run (derandomized, so it is a
fixed regression set) and ``FUZZ_EXAMPLES`` (10,000) under ``-m fuzz`` (``.ci/tier_fuzz``). Every
example must end in a typed answer: exit 0 / 1 / 2 through the CLI, a result or a ``KvscopeError``
through the library — never exit 3, an escaping exception, or more than ``MAX_SECONDS``.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.catalog import load_model_source
from kvscope.engines.sglang.args import SGLangArgs
from kvscope.engines.sglang.plan import plan_sglang
from kvscope.engines.vllm.args import VllmFlags
from kvscope.engines.vllm.plan import plan_vllm
from kvscope.errors import KvscopeError
from kvscope.hardware.gpus import get_gpu
from kvscope.model.spec import ModelSpec
from kvscope.validate import CONFIG_RULES

from .harness import (DEFAULT, FUZZ, NUMBER_TEXT, WORD_TEXT, assert_exit_ok, dumps, json_value, library_call)

SEED_MODELS = ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b", "Qwen/Qwen3-Next-80B-A3B-Thinking",
               "google/gemma-3-1b-it", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "nvidia/Nemotron-H-56B-Base-8K",
               "deepseek-ai/DeepSeek-V4-Flash", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-VL-8B-Instruct",
               "google/gemma-2-9b-it", "moonshotai/Kimi-K2.5", "deepseek-ai/DeepSeek-V3.2-Exp", "Qwen/Qwen3.5-27B",
               "mistralai/Mixtral-8x22B-Instruct-v0.1", "MiniMaxAI/MiniMax-M2.5", "zai-org/GLM-4.5-Air",
               "openbmb/MiniCPM3-4B")


def _seed_configs() -> list[dict]:
    out = []
    for name in SEED_MODELS:
        try:
            out.append(dict(load_model_source(name).config))
        except KvscopeError:  # a trimmed bundled copy may be refused; the others suffice
            continue
    return out


SEEDS = _seed_configs()
H100 = get_gpu("h100")
FIELD_NAMES = sorted(set(CONFIG_RULES) | {k for c in SEEDS for k in c})


# --- configs --------------------------------------------------------------------------------------

@st.composite
def mutated_config(draw) -> dict:
    cfg = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    holder = cfg
    if isinstance(cfg.get("text_config"), dict) and draw(st.booleans()):
        holder = cfg["text_config"]
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(FIELD_NAMES))
        op = draw(st.integers(0, 5))
        if op == 0:
            holder.pop(key, None)
        elif op == 1 and isinstance(holder.get(key), (int, float)) and not isinstance(holder.get(key), bool):
            holder[key] = holder[key] * draw(st.sampled_from([-1, 0, 0.5, 1.5, 1000, 10**6]))
        elif op == 2 and isinstance(holder.get(key), dict) and holder[key]:
            sub = holder[key]
            sub[draw(st.sampled_from(sorted(sub)))] = draw(json_value)
        elif op == 3 and isinstance(holder.get(key), list) and holder[key]:
            lst = holder[key]
            lst[draw(st.integers(0, len(lst) - 1))] = draw(json_value)
        else:
            holder[key] = draw(json_value)
    return cfg


def check_config(cfg: dict) -> None:
    spec = library_call(ModelSpec.from_hf_config, cfg, "fuzz")
    if isinstance(spec, KvscopeError):
        return
    library_call(plan_sglang, spec, H100, SGLangArgs())
    library_call(plan_vllm, spec, H100, VllmFlags())


@DEFAULT
@given(mutated_config())
def test_configs(cfg):
    check_config(cfg)


@pytest.mark.fuzz
@FUZZ
@given(mutated_config())
def test_configs_fuzz(cfg):
    check_config(cfg)


# config files through the CLI (the JSON reader included: NaN, truncation, junk)
@st.composite
def config_file_text(draw) -> str:
    text = dumps(draw(mutated_config()))
    op = draw(st.integers(0, 3))
    if op == 1:
        text = text[: draw(st.integers(0, len(text)))]
    elif op == 2:
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["NaN", "Infinity", "-1e999", "[" * 50, "\x00", "}", '"', "1" * 5000]))
        text += text[i:]
    return text


def check_config_file(text: str, engine: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.json")
        Path(path).write_text(text, encoding="utf-8", errors="surrogatepass")
        assert_exit_ok(["plan", path, "--gpu", "h100", "--engine", engine])


@DEFAULT
@given(config_file_text(), st.sampled_from(["sglang", "vllm"]))
def test_config_files_cli(text, engine):
    check_config_file(text, engine)


@pytest.mark.fuzz
@FUZZ
@given(config_file_text(), st.sampled_from(["sglang", "vllm"]))
def test_config_files_cli_fuzz(text, engine):
    check_config_file(text, engine)


# --- flag lines through kvscope.cli.main -----------------------------------------------------------

MODELS = ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b",
          "Qwen/Qwen3-Next-80B-A3B-Thinking", "google/gemma-3-1b-it", "meta-llama/Llama-3.1-8B-Instruct",
          "Qwen/Qwen3-32B", "not-a-model", "")
GPUS = ("h100", "h200", "l40s", "a100", "a100-80g", "rtx-4090", "NVIDIA H100 80GB HBM3", "mi300x", "b200", "t4",
        "bogus", "")
VERSIONS = ("0.5.9", "0.5.23", "0.4.6.post5", "0.5.23.post1", "0.5.24", "9.9", "0.3", "banana", "", "v0.5.9",
            "0.19.0", "0.33.0", "0.11.0", "0.6.4", "0.33.1", "0.34.0", "1.0.0", "0.5")
GOOD_VERSIONS = {"sglang": ("0.5.9", "0.5.23", "0.4.6.post5", "0.5.14"),
                 "vllm": ("0.19.0", "0.33.0", "0.11.0", "0.6.6")}


def _version(draw, engine: str) -> str:
    return draw(st.sampled_from(GOOD_VERSIONS[engine] if draw(st.integers(0, 2)) else VERSIONS))


PLAN_VALUE_FLAGS = (
    "--tp", "--pp", "--dp", "--ep", "--mem-fraction-static", "--context-length", "--page-size",
    "--max-running-requests", "--max-total-tokens", "--chunked-prefill-size", "--cuda-graph-max-bs",
    "--speculative-num-draft-tokens", "--pre-load-free-gib", "--post-load-free-gib", "--gpu-memory-mib",
    "--attn-dp-size", "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
    "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--block-size",
    "--kv-cache-memory-bytes", "--num-gpu-blocks-override", "--available-kv-cache-gib", "--weights-gib",
    "--activation-peak-gib", "--non-torch-gib", "--cudagraph-gib", "--initial-free-gib")
PLAN_WORD_FLAGS = ("--kv-cache-dtype", "--attention-backend", "--speculative-algorithm", "--moe-a2a-backend",
                   "--speculative-config", "--speculative-draft-model-path", "--quantization", "--dtype", "--device",
                   "--cpu-kvcache-space")
PLAN_BOOL_FLAGS = ("--enable-dp-attention", "--disable-cuda-graph", "--disable-radix-cache", "--enable-expert-parallel",
                   "--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
                   "--allow-long-max-model-len", "--allow-unmodelled-version", "--json")


def _flag_pairs(value_flags, word_flags, bool_flags, max_size=6):
    one = st.one_of(
        st.tuples(st.sampled_from(value_flags), NUMBER_TEXT).map(list),
        st.tuples(st.sampled_from(word_flags), st.one_of(WORD_TEXT, st.sampled_from(MODELS))).map(list),
        st.sampled_from(bool_flags).map(lambda f: [f]))
    return st.lists(one, max_size=max_size).map(lambda groups: [x for g in groups for x in g])


GOOD_GPUS = ("h100", "h200", "l40s", "a100-80g", "b200", "mi300x", "rtx-4090")


def _model(draw, models=MODELS) -> str:
    return draw(st.sampled_from(models[:8] if draw(st.integers(0, 9)) else models))


def _gpu(draw) -> str:
    return draw(st.sampled_from(GOOD_GPUS if draw(st.integers(0, 4)) else GPUS))


@st.composite
def plan_argv(draw) -> list[str]:
    argv = ["plan", _model(draw), "--gpu", _gpu(draw)]
    engine = draw(st.sampled_from(["sglang", "vllm"]))
    argv += ["--engine", engine]
    if draw(st.booleans()):
        argv += ["--engine-version", _version(draw, engine)]
    return argv + draw(_flag_pairs(PLAN_VALUE_FLAGS, PLAN_WORD_FLAGS, PLAN_BOOL_FLAGS, max_size=4))


@DEFAULT
@given(plan_argv())
def test_plan_flags(argv):
    assert_exit_ok(argv)


@pytest.mark.fuzz
@FUZZ
@given(plan_argv())
def test_plan_flags_fuzz(argv):
    assert_exit_ok(argv)


SET_NAMES = ("page_size", "chunked_prefill_size", "cuda_graph_max_bs", "disable_cuda_graph", "disable_radix_cache",
             "moe_a2a_backend", "ep_size", "speculative_algorithm", "speculative_num_draft_tokens",
             "mem_fraction_static", "block_size", "enforce_eager", "max_num_batched_tokens", "enable_prefix_caching",
             "enable_expert_parallel", "gpu_memory_utilization", "context_length", "bogus", "")


@st.composite
def fit_argv(draw) -> list[str]:
    # the layout is fixed (tp, pp, dp, KV dtype) so that a valid line runs one small search
    ok = draw(st.integers(0, 3))  # three lines in four take valid sizes
    argv = ["fit", draw(st.sampled_from(MODELS[:8])), "--gpu", _gpu(draw),
            "--context", draw(st.sampled_from(["4096", "32768"]) if ok else st.one_of(
                st.sampled_from(["0", "-1", "1e9", "x"]), NUMBER_TEXT)),
            "--concurrency", draw(st.sampled_from(["1", "8"]) if ok else NUMBER_TEXT),
            "--tp", draw(st.sampled_from(["1", "2", "8", "0"])), "--pp", "1", "--dp", "1",
            "--kv-cache-dtype", draw(st.sampled_from(["auto", "fp8_e4m3", "fp8", "int3"]))]
    engine = draw(st.sampled_from(["sglang", "vllm"]))
    argv += ["--engine", engine]
    if draw(st.booleans()):
        argv += ["--engine-version", _version(draw, engine)]
    for _ in range(draw(st.integers(0, 2))):
        argv += ["--set", f"{draw(st.sampled_from(SET_NAMES))}={draw(st.one_of(NUMBER_TEXT, WORD_TEXT))}"]
    extra = _flag_pairs(("--gpus", "--step", "--pre-load-free-gib", "--post-load-free-gib", "--gpu-memory-mib"),
                        ("--optimize",), ("--no-dp-attention", "--json", "--all", "--allow-unmodelled-version"), 3)
    return argv + draw(extra)


@DEFAULT
@given(fit_argv())
def test_fit_flags(argv):
    assert_exit_ok(argv)


@pytest.mark.fuzz
@FUZZ
@given(fit_argv())
def test_fit_flags_fuzz(argv):
    assert_exit_ok(argv)


PERF_VALUE_FLAGS = ("--tp", "--batch", "--context", "--bandwidth-efficiency", "--flops-efficiency",
                    "--fixed-overhead-ms", "--allreduce-latency-us", "--verify-allreduce-latency-us",
                    "--chunked-prefill-size", "--observed-tokens-per-s", "--speculative-num-steps",
                    "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--accept-length", "--accept-rate",
                    "--spec-overhead-ms", "--gpu-memory-mib")
PERF_WORD_FLAGS = ("--kv-cache-dtype", "--allreduce", "--pcie-topology", "--speculative-algorithm",
                   "--speculative-draft-model-path")


@st.composite
def perf_argv(draw) -> list[str]:
    argv = ["perf", _model(draw), "--gpu", _gpu(draw)]
    return argv + draw(_flag_pairs(PERF_VALUE_FLAGS, PERF_WORD_FLAGS, ("--json",), max_size=4))


@DEFAULT
@given(perf_argv())
def test_perf_flags(argv):
    assert_exit_ok(argv)


@pytest.mark.fuzz
@FUZZ
@given(perf_argv())
def test_perf_flags_fuzz(argv):
    assert_exit_ok(argv)


# --- probe records and doctor inputs ---------------------------------------------------------------

PROBE_SEEDS = (
    {"event": "attach", "pid": 101, "target": "ModelRunner.init_memory_pool", "engine": "sglang",
     "engine_version": "0.5.9", "rank": {"tp_rank": 0, "tp_size": 2}},
    {"event": "call", "seq": 1, "call_id": 1, "pid": 101, "target": "ModelRunner.init_memory_pool",
     "phase": "kv_cache", "phase_own": True, "mem": {"free_bytes": 80 << 30},
     "inputs": {"total_gpu_memory": 79.1, "max_num_reqs": None}},
    {"event": "return", "seq": 2, "call_id": 1, "pid": 101, "target": "ModelRunner.init_memory_pool",
     "mem": {"free_bytes": 10 << 30}, "outputs": {"max_total_num_tokens": 123456, "cell_size_bytes": 147456},
     "locals": {"rest_memory": 50.5}},
    {"event": "raise", "seq": 3, "call_id": 1, "pid": 101, "exc": "RuntimeError: Not enough memory",
     "exc_type": "RuntimeError"},
    {"event": "missing", "pid": 101, "target": "x", "reason": "not found"},
    {"event": "call", "seq": 4, "call_id": 2, "target": "get_available_gpu_memory", "inputs": {"distributed": False}},
    {"event": "return", "seq": 5, "call_id": 2, "target": "get_available_gpu_memory", "outputs": {"free_gib": 70.1}},
    {"event": "live", "engine": "vllm", "engine_version": "0.19.0", "num_gpu_blocks": 1000, "block_size": 16},
)


@st.composite
def probe_lines(draw) -> list[str]:
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        rec = copy.deepcopy(draw(st.sampled_from(PROBE_SEEDS)))
        for _ in range(draw(st.integers(0, 2))):
            key = draw(st.sampled_from(sorted({k for s in PROBE_SEEDS for k in s})))
            rec[key] = draw(json_value)
        line = dumps(rec) if draw(st.integers(0, 9)) else dumps(draw(json_value))
        if not draw(st.integers(0, 9)):
            line = line[: draw(st.integers(0, len(line)))]
        lines.append(line)
    return lines


def check_probe_dir(lines: list[str]) -> None:
    """``kvscope doctor DIR`` reads the records (probe.records), builds the measured timeline
    (probe.timeline) and runs the findings on it."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "probe-101.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        assert_exit_ok(["doctor", d])


@DEFAULT
@given(probe_lines())
def test_probe_records(lines):
    check_probe_dir(lines)


@pytest.mark.fuzz
@FUZZ
@given(probe_lines())
def test_probe_records_fuzz(lines):
    check_probe_dir(lines)


LOG_SEEDS = (
    b"[2026-03-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n",
    b"[2026-03-01 10:00:00 TP0] Load weight begin. avail mem=0 GB\n",
    b"[2026-03-01 10:00:05 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=63.20 GB, "
    b"mem usage=15.30 GB.\n",
    b"[2026-03-01 10:00:06 TP0] KV Cache is allocated. #tokens: 364282, K size: 25.02 GB, V size: 25.02 GB\n",
    b"[2026-03-01 10:00:06 TP0] Memory pool end. avail mem=12.70 GB\n",
    b"[2026-03-01 10:00:09 TP0] Capture cuda graph end. Time elapsed: 3.1 s. mem usage=0.95 GB. avail mem=11.7 GB.\n",
    b"INFO 03-01 10:00:00 [gpu_worker.py:100] Available KV cache memory: 40.5 GiB\n",
    b"INFO 03-01 10:00:00 [model_runner.py:1] Model loading took 15.2 GiB and 3.1 seconds\n",
    b"ValueError: No available memory for the cache blocks.\n",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
    b"server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=2, mem_fraction_static=0.85)\n",
)


@st.composite
def log_blob(draw) -> bytes:
    parts = draw(st.lists(st.one_of(st.sampled_from(LOG_SEEDS), st.binary(max_size=60),
                                    st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass"))),
                          max_size=30))
    blob = b"".join(parts)
    wrap = draw(st.integers(0, 5))
    if wrap == 1:
        blob = gzip.compress(blob)
    elif wrap == 2:
        blob = gzip.compress(gzip.compress(blob))
    elif wrap == 3:
        blob = gzip.compress(blob)[: draw(st.integers(0, 40))]
    return blob


def check_log(blob: bytes, engine: str | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "engine.log")
        Path(path).write_bytes(blob)
        assert_exit_ok(["doctor", path] + (["--engine", engine] if engine else []))


@DEFAULT
@given(log_blob(), st.sampled_from([None, "sglang", "vllm"]))
def test_doctor_logs(blob, engine):
    check_log(blob, engine)


@pytest.mark.fuzz
@FUZZ
@given(log_blob(), st.sampled_from([None, "sglang", "vllm"]))
def test_doctor_logs_fuzz(blob, engine):
    check_log(blob, engine)


def test_seed_configs_load():
    """The seeds are real configs: the suite mutates what kvscope reads, not an empty dict."""
    assert len(SEEDS) >= 14
    for cfg in SEEDS:
        assert not isinstance(library_call(ModelSpec.from_hf_config, cfg, "seed"), KvscopeError)
    assert json.loads(dumps({"a": 1})) == {"a": 1}
