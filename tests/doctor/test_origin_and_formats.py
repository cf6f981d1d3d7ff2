"""The origin case as a log, the log-format corners (prefixes, colours, CRLF, interleaving, gzip,
truncation), the CLI contract and --against."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from kvscope.cli import main
from kvscope.doctor import diagnose_stream, diagnose_text
from kvscope.errors import LogFormatError
from kvscope.units import gib_to_bytes

from .conftest import DATA


def test_origin_log_yields_the_effective_fraction_finding(origin_log):
    r = diagnose_text(origin_log)
    tl = r.timeline
    assert tl.engine == "sglang" and tl.starts is True
    assert tl.model == "/shared/kimi-k2.5-int4"
    assert r.flags["mem_fraction_static"] == 0.55 and r.flag_sources["mem_fraction_static"] == "launch command"
    assert len(tl.ranks) == 8 and [rk.rank for rk in tl.ranks] == list(range(8))
    # 1 − (21.70 − 10.40)/94.00 = 0.8798
    assert tl.extra.effective_mem_fraction_static == 0.8798
    assert tl.extra.min_mem_fraction_static == 0.7691  # 1 − 21.7/94
    f = next(f for f in r.findings if f.code == "effective-fraction-mismatch")
    assert f.severity == "error"
    assert f.message.startswith("10.40 GiB of KV at post-load 21.70 GiB and baseline 94.00 GiB implies "
                                "mem_fraction_static ≈ 0.880")
    assert "not 0.55" in f.message and "every released SGLang would refuse to start" in f.message
    assert "server_args=ServerArgs" in f.fix and "no ServerArgs dump" in f.fix
    assert "custom-allreduce" in r.codes() and "kv-pool-below-context" in r.codes()


def test_origin_with_kimi_model_recomputes_kv_size(origin_log):
    r = diagnose_text(origin_log, model="moonshotai/Kimi-K2.5")
    assert r.timeline.kv_cell_bytes == 70272
    kv = next(c for c in r.checks if c.name == "KV size")
    assert kv.agrees and kv.recomputed == 10.40  # (158,909 + 1) × 70,272 B
    # tokens each +0.01 of fraction buys: 0.94 GiB / 70,272 B
    assert r.timeline.extra.to_dict()["tokens_per_0.01_mem_fraction_static"] == 14363


SGL_FAIL = """\
[2026-05-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=2, mem_fraction_static=0.3, page_size=1)
[2026-05-01 10:00:05 TP0] Load weight begin. avail mem=78.50 GB
[2026-05-01 10:00:05 TP1] Load weight begin. avail mem=60.10 GB
[2026-05-01 10:00:09 TP1] Load weight end. elapsed=4.00 s, type=Qwen3ForCausalLM, avail mem=52.40 GB, mem usage=7.70 GB.
[2026-05-01 10:00:09 TP0] Load weight end. elapsed=4.00 s, type=Qwen3ForCausalLM, avail mem=70.80 GB, mem usage=7.70 GB.
[2026-05-01 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.3
"""


def test_sglang_failure_unbalanced_and_min_fraction():
    r = diagnose_text(SGL_FAIL)
    tl = r.timeline
    assert tl.starts is False and tl.engine_version is None
    assert tl.extra.engine_version_range == ">0.5.9"  # no dtype= on Load weight end
    # MIN over ranks: pre 60.10 (TP1), post 52.40 (TP1) -> 1 − 52.40/60.10
    assert tl.extra.min_mem_fraction_static == 0.1281
    assert r.codes()[:2] == ["kv-sizing-failed", "effective-fraction"] or "kv-sizing-failed" in r.codes()
    assert "unbalanced-ranks" in r.codes()
    unb = next(f for f in r.findings if f.code == "unbalanced-ranks")
    assert "TP1 60.10 GiB vs TP0 78.50 GiB" in unb.message


def test_runtime_oom_fix_goes_the_other_way(origin_log):
    log = origin_log + ("[2026-03-01 10:10:00] The server is fired up and ready to roll!\n"
                        "[2026-03-01 11:00:00 TP3] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    r = diagnose_text(log)
    f = next(f for f in r.findings if f.code == "runtime-oom")
    assert f.severity == "error" and "lower --mem-fraction-static (e.g. 0.83)" in f.fix


VLLM_NOISY = (
    "\x1b[1;36m(Worker_TP1 pid=12)\x1b[0m INFO 04-22 00:57:25 [gpu_model_runner.py:4820] Model loading took 43.51 GiB memory and 65.7 seconds\r\n"
    "(Worker_TP0 pid=11) INFO 04-22 00:57:25 [gpu_model_runner.py:4820] Model loading took 43.51 GiB memory and 65.7 seconds\r\n"
    "(APIServer pid=1) INFO 04-22 01:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 10.0 tokens/s\r\n"
    "(Worker_TP1 pid=12) INFO 04-22 00:57:45 [gpu_worker.py:436] Available KV cache memory: 20.1 GiB\r\n"
    "(Worker_TP0 pid=11) INFO 04-22 00:57:45 [gpu_worker.py:436] Available KV cache memory: 28.44 GiB\r\n"
    "(EngineCore_DP0 pid=10) INFO 04-22 00:57:45 [kv_cache_utils.py:1] GPU KV cache size: 329,296 tokens\r\n"
    "(EngineCore_DP0 pid=10) INFO 04-22 00:57:45 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per request: 40.2x\r\n"
    "(EngineCore_DP0 pid=10) WARNING 04-22 00:57:46 [x.py:1] something odd about the KV cache layout\r\n"
)


def test_vllm_prefixes_colours_crlf_interleaved_workers():
    r = diagnose_text(VLLM_NOISY)
    tl = r.timeline
    assert tl.engine == "vllm"
    assert [rk.decision.rank_label for rk in tl.ranks] == ["TP0", "TP1"]
    assert tl.ranks[1].decision.available_kv_cache_bytes == gib_to_bytes(20.1)  # round(x, 2) prints "20.1"
    assert tl.kv_cache_tokens == 329296
    assert "unbalanced-ranks" in r.codes()
    assert r.stats.request_lines == 1 and r.stats.unparsed == 1
    assert "something odd" in r.unparsed_samples[0]


def test_gzip_and_truncated_log(origin_log):
    data = gzip.compress(origin_log.encode())
    r = diagnose_stream(io.BytesIO(data))
    assert r.timeline.kv_cache_tokens == 158909
    cut = origin_log[: origin_log.index("KV Cache is allocated")]
    r = diagnose_text(cut)
    assert r.timeline.starts is None and "log-truncated" in r.codes()


@pytest.mark.parametrize("blob,match", [
    (b"", "is empty"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "binary file"),
    (b"hello\nthis is nginx\n", "no SGLang or vLLM startup lines"),
])
def test_bad_input_is_one_clear_error(blob, match):
    with pytest.raises(LogFormatError, match=match):
        diagnose_stream(io.BytesIO(blob))


def test_cli_text_json_stdin_and_exit_codes(tmp_path, capsys, monkeypatch, origin_log):
    log = tmp_path / "server.log"
    log.write_text(origin_log)
    assert main(["doctor", str(log)]) == 1  # an error-level finding
    out = capsys.readouterr().out
    assert "effective-fraction-mismatch" in out and "ranks 0-7 [TP0-7 identical]" in out  # identical ranks collapsed
    assert main(["doctor", str(log), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["source"] == "log" and d["engine"] == "sglang" and d["kv_cache_tokens"] == 158909
    assert {"code", "severity", "message", "evidence", "fix"} <= d["findings"][0].keys()
    assert d["unparsed"] == {"count": 0, "samples": []}
    assert len(d["ranks"]) == 8 and d["ranks"][0]["phases"][0]["name"] == "init"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(origin_log.encode())))
    assert main(["doctor", "-", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["effective_mem_fraction_static"] == 0.8798
    bad = tmp_path / "bin"
    bad.write_bytes(b"\x00\x01\x02")
    assert main(["doctor", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "binary" in err and "Traceback" not in err
    assert main(["doctor", str(tmp_path / "missing.log")]) == 2


def test_against_plan_phase_by_phase(tmp_path, capsys, origin_log):
    observed = diagnose_text(origin_log).timeline.to_dict()
    plan = dict(observed, source="plan", kv_cache_tokens=0, starts=False)
    plan["ranks"] = [dict(r, phases=[dict(p, free_bytes_after=(p["free_bytes_after"] or 0) - 2**30) for p in r["phases"]])
                     for r in observed["ranks"]]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert main(["doctor", str(DATA / "origin_kimi_k25_8x_rtxpro6000.log"), "--against", str(path), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    rows = {(r["what"], r["rank"]): r for r in d["comparison"]}
    assert rows[("load_weights.free_bytes_after", 0)]["delta"] == 2**30
    assert rows[("kv_cache_tokens", None)]["predicted"] == 0
