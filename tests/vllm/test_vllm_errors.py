"""Failures: vLLM's own error text per version, and bad input as one line with exit 2."""

from __future__ import annotations

import json

import pytest

from kvscope.cli import main
from kvscope.engines.vllm import kv_cache as kvc
from kvscope.engines.vllm.release import version_traits
from kvscope.engines.vllm.plan import VllmFlags, VllmMeasured, plan_vllm
from kvscope.errors import FlagError
from kvscope.hardware.gpus import get_gpu

from vllm_case_data import spec_of

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_insufficient_memory_error_text_0_19():
    """3090 at 29k tokens on 0.19: 3.54 GiB needed (1813 blocks x 2 MiB), 2.89 GiB available."""
    t = plan_vllm(spec_of(LLAMA), get_gpu("rtx-3090"), VllmFlags(gpu_memory_utilization=0.9, max_model_len=29000),
                  "0.19.0", VllmMeasured(available_kv_cache_gib=2.89))
    assert not t.starts
    est = t.extra.estimated_max_model_len
    assert est == (int(2.89 * 2**30) // 2_097_152) * 16  # whole blocks of 16 tokens
    assert t.error == (
        "To serve at least one request with the models's max seq len (29000), (3.54 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (2.89 GiB). Based on the available memory, the "
        f"estimated maximum model length is {est}. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    flags = {f.flag: f.value for f in t.fix}
    assert flags["--max-model-len"] == est


def test_insufficient_memory_error_text_generations():
    t11 = kvc.insufficient_memory_error(29000, 3 * 2**30, 2 * 2**30, 100, version_traits("0.11.0"))
    assert "models's" in t11 and "(3.00 GiB KV" in t11 and "length is 100. Try" in t11
    t33 = kvc.insufficient_memory_error(29000, 3 * 2**30, 2 * 2**30, 0, version_traits("0.33.0"))
    assert "model's max seq len" in t33 and "(3.0 GiB KV" in t33 and "(which also controls CPU memory" in t33
    assert "estimated maximum" not in t33


def test_request_memory_check():
    """H100 with 30 GiB used by another process: 'Free memory on device cuda:0 (...) on startup ...'."""
    t = plan_vllm(spec_of(LLAMA), get_gpu("h100-sxm"), VllmFlags(max_model_len=8192), "0.33.0",
                  VllmMeasured(initial_free_gib=49.19))
    assert t.error == ("Free memory on device cuda:0 (49.19/79.19 GiB) on startup is less than desired GPU memory "
                       "utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory used "
                       "by other processes.")
    assert t.fix[0].flag == "--gpu-memory-utilization" and t.fix[0].value == 0.62
    t11 = plan_vllm(spec_of(LLAMA), get_gpu("h100-sxm"), VllmFlags(max_model_len=8192), "0.11.0",
                    VllmMeasured(initial_free_gib=49.19))
    assert t11.error.startswith("Free memory on device (49.19/79.19 GiB) on startup") and "(0.9, 71.27 GiB)" in t11.error


def test_mamba_blocks_vs_max_num_seqs():
    spec = spec_of("Qwen/Qwen3.5-27B")
    t = plan_vllm(spec, get_gpu("h200"), VllmFlags(tensor_parallel_size=2, max_model_len=4096, max_num_seqs=1024),
                  "0.33.0", VllmMeasured(available_kv_cache_gib=2.0))
    blocks = t.extra.num_gpu_blocks
    assert blocks < 1024
    assert t.error == kvc.mamba_max_num_seqs_error(1024, blocks)
    assert t.fix[0].flag == "--max-num-seqs" and t.fix[0].value == blocks
    t19 = plan_vllm(spec, get_gpu("h200"), VllmFlags(tensor_parallel_size=2, max_model_len=4096, max_num_seqs=1024),
                    "0.19.0", VllmMeasured(available_kv_cache_gib=2.0))
    assert t19.starts and any("Capping cudagraph" in w for w in t19.warnings)


def test_no_available_memory():
    # 27.5 GiB of weights fit a 31.4 GiB RTX 5090 but not its 0.92 x budget (on a 23.6 GiB 3090 they do
    # not load at all: test_weights_larger_than_the_gpu_fail_loading)
    t = plan_vllm(spec_of("Qwen/Qwen3-14B"), get_gpu("rtx-5090"), VllmFlags(max_model_len=4096), "0.24.0")
    assert not t.starts and t.error.startswith("No available memory for the cache blocks.")
    assert "(this flag also controls CPU memory reservation" in t.error


def test_weights_larger_than_the_gpu_fail_loading():
    t = plan_vllm(spec_of("Qwen/Qwen3-14B"), get_gpu("rtx-3090"), VllmFlags(max_model_len=4096), "0.24.0")
    assert not t.starts and t.error.startswith("torch.OutOfMemoryError: CUDA out of memory while loading weights")
    assert [p.name for p in t.ranks[0].phases] == ["init", "load_weights"]
    assert t.ranks[0].phases[-1].free_bytes_after == t.ranks[0].phases[0].free_bytes_after - t.weights_bytes < 0


def test_kv_cache_memory_bytes_and_override():
    spec = spec_of(LLAMA)
    t = plan_vllm(spec, get_gpu("h100-sxm"), VllmFlags(max_model_len=8192, kv_cache_memory_bytes=10 * 2**30), "0.33.0")
    assert t.extra.available_kv_cache_bytes == 10 * 2**30 and t.extra.num_gpu_blocks == 5120
    t2 = plan_vllm(spec, get_gpu("h100-sxm"), VllmFlags(max_model_len=8192, num_gpu_blocks_override=1000), "0.33.0")
    assert t2.extra.num_gpu_blocks == 1000 and t2.kv_cache_tokens == 16000


def test_auto_fit_max_model_len():
    t = plan_vllm(spec_of(LLAMA), get_gpu("rtx-3090"), VllmFlags(max_model_len=-1, gpu_memory_utilization=0.9),
                  "0.19.0", VllmMeasured(available_kv_cache_gib=2.89))
    assert t.starts and t.extra.max_model_len == (int(2.89 * 2**30) // 2_097_152) * 16


@pytest.mark.parametrize("argv,needle", [
    (["--gpu-memory-utilization", "1.5"], "Input should be less than or equal to 1"),
    (["--gpu-memory-utilization", "0"], "Input should be greater than 0"),
    (["--max-model-len", "200000"], "User-specified max_model_len (200000) is greater than the derived max_model_len"),
    (["-tp", "3"], "Total number of attention heads (32) must be divisible by tensor parallel size (3)."),
    (["--kv-cache-dtype", "int3"], "unknown --kv-cache-dtype"),
])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    rc = main(["plan", LLAMA, "--engine", "vllm", "--gpu", "h100-sxm", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_json_contract(capsys):
    rc = main(["plan", "openai/gpt-oss-20b", "--engine", "vllm", "--engine-version", "0.19.0", "--gpu", "h100-sxm",
               "-tp", "2", "--max-model-len", "8192", "--available-kv-cache-gib", "59.32", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("engine", "engine_version", "model", "gpu", "starts", "error", "kv_cache_tokens",
                "max_running_requests", "kv_cell_bytes", "kv_cache_bytes", "weights_bytes", "fix", "ranks",
                "num_gpu_blocks", "available_kv_cache_bytes", "max_concurrency", "max_model_len",
                "gpu_memory_utilization"):
        assert key in d
    assert d["engine"] == "vllm" and d["max_running_requests"] == 1024 and len(d["ranks"]) == 2
    assert d["num_gpu_blocks"] == int(59.32 * 2**30) // (12 * 16384)


def test_flag_errors_are_typed():
    with pytest.raises(FlagError):
        plan_vllm(spec_of(LLAMA), get_gpu("h100-sxm"), VllmFlags(tensor_parallel_size=0))


def test_pipeline_deeper_than_the_model_is_a_flag_error():
    from kvscope.cli import main as cli_main
    assert cli_main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--engine", "vllm", "--pp", "64"]) == 2
