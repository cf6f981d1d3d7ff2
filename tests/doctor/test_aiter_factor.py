"""attention_backend=aiter with context_len > 8192: SGLang multiplies mem_fraction_static by 0.85
(kvscope/engines/sglang/backend.py cites model_runner.py @ v0.4.8.post1 and server_args.py @ v0.5.6+).
The doctor must read a KV size that implies flag x 0.85 as expected, and give fixes in flag units."""

from __future__ import annotations

from kvscope.doctor import diagnose_text
from kvscope.doctor.sglang_rules import SglangFlags
from kvscope.doctor.sglang_rules import aiter_fraction_factors as _factors

GIB = 1 << 30


def aiter_fraction_factors(flags: dict, sources: dict, context_len: int | None, version: str) -> tuple[float, ...]:
    """The rule reads the flags typed once (``SglangFlags``); these cases give them as the log's dicts."""
    return _factors(SglangFlags.build(flags, sources), context_len, version)


def test_factors_by_backend_context_version_and_where_the_flag_was_read():
    aiter = {"attention_backend": "aiter"}
    assert aiter_fraction_factors({}, {}, 131072, "0.5.9") == (1.0,)
    assert aiter_fraction_factors(aiter, {}, 8192, "0.5.9") == (1.0,)  # > 8192 only
    assert aiter_fraction_factors(aiter, {}, 131072, "0.4.6.post5") == (1.0,)  # not in that release
    launch = {"mem_fraction_static": "launch command"}
    assert aiter_fraction_factors(aiter, launch, 131072, "0.5.9") == (0.85,)
    # 0.5.6+: the ServerArgs dump is printed after the multiplication; 0.4.8-0.5.3 before it
    dumped = {"mem_fraction_static": "server_args"}
    assert aiter_fraction_factors(aiter, dumped, 131072, "0.5.9") == (1.0,)
    assert aiter_fraction_factors(aiter, dumped, 131072, "0.4.8.post1") == (0.85,)
    assert aiter_fraction_factors(aiter, launch, None, "0.5.9") == (1.0, 0.85)  # context unknown: both


def _log(kv_each_gib: float, tokens: int) -> str:
    # Launch command + SGLang lines in the 0.4.x/0.5.x format (no dtype= on "Load weight end").
    return (
        "python3 -m sglang.launch_server --model-path /models/llama-3.1-8b --attention-backend aiter "
        "--mem-fraction-static 0.9 --context-length 131072\n"
        "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=190.00 GB\n"
        "[2026-01-01 10:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=175.00 GB, mem usage=15.00 GB.\n"
        f"[2026-01-01 10:00:10 TP0] KV Cache is allocated. #tokens: {tokens}, K size: {kv_each_gib:.2f} GB, "
        f"V size: {kv_each_gib:.2f} GB\n"
        f"[2026-01-01 10:00:20 TP0] max_total_num_tokens={tokens}, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=4096, context_len=131072\n"
    )


def test_kv_size_at_flag_times_085_is_expected_not_a_mismatch():
    # rest = 175 - 190 x (1 - 0.9 x 0.85) = 130.35 GiB; 131072 B/token (Llama-3.1-8B, bf16)
    tokens = int(130.35 * GIB) // 131072
    half = (tokens + 1) * 131072 / 2 / GIB
    r = diagnose_text(_log(half, tokens))
    assert "effective-fraction-mismatch" not in r.codes()
    f = next(f for f in r.findings if f.code == "effective-fraction")
    assert "0.9 × 0.85" in f.message
    assert r.timeline.extra.mem_fraction_static_effective_expected == 0.765


def test_kv_size_at_the_plain_flag_is_now_the_mismatch():
    # the same start sized at 0.9 without the factor: rest = 175 - 19 = 156 GiB
    tokens = int(156 * GIB) // 131072
    half = (tokens + 1) * 131072 / 2 / GIB
    r = diagnose_text(_log(half, tokens))
    assert "effective-fraction-mismatch" in r.codes()
