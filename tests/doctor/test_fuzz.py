"""Property suite: mutated logs never crash or hang the doctor, and memory stays bounded."""

from __future__ import annotations

import io
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvscope.doctor import MAX_UNPARSED_SAMPLES, diagnose_stream
from kvscope.logs.grammar import MAX_EVENTS_PER_KIND, MAX_RANKS
from kvscope.errors import LogFormatError

from .conftest import DATA, load_cases

SEEDS = [c["log_excerpt"] for c in load_cases().values()]
SEEDS.append((DATA / "origin_kimi_k25_8x_rtxpro6000.log").read_text())
SEED_LINES = [line for s in SEEDS for line in s.splitlines()]

junk = st.one_of(
    st.binary(max_size=80),
    st.sampled_from([b"\x1b[31m", b"\r", b"\x00", b"-", b"99999999999999999999", b"-1e308", b"nan", b" GB", b" GiB",
                     b"[2026-01-01 00:00:00 TP", b"(Worker_TP", b" pid=", b"=", b",", b"(", b")", b"'", b"{", b"}",
                     b"...", b"\xff\xfe", b"KV Cache is allocated. #tokens: ", b"avail mem=", b"server_args=ServerArgs("]),
)


@st.composite
def mutated_log(draw):
    lines = [line.encode() for line in draw(st.lists(st.sampled_from(SEED_LINES), min_size=1, max_size=40))]
    for _ in range(draw(st.integers(0, 12))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.integers(0, 4))
        line = lines[i]
        cut = draw(st.integers(0, len(line)))
        if op == 0:
            lines[i] = line[:cut] + draw(junk) + line[cut:]
        elif op == 1:
            lines[i] = line[:cut]
        elif op == 2:
            lines.insert(i, draw(junk))
        elif op == 3:
            lines[i] = line.replace(b"0", draw(st.sampled_from([b"-", b"9" * 30, b"", b"."])))
        else:
            del lines[i]
            if not lines:
                lines = [b""]
    sep = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    return sep.join(lines)


@pytest.mark.slow  # 300 mutated logs (the fuzz tier runs 10,000): .ci/tier_slow
@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_log(), st.sampled_from([None, "sglang", "vllm"]))
def test_mutated_logs_never_crash(blob, engine):
    try:
        r = diagnose_stream(io.BytesIO(blob), engine=engine)
    except LogFormatError:
        return
    d = r.to_dict()
    assert d["source"] == "log" and isinstance(d["findings"], list)
    assert len(r.unparsed_samples) <= MAX_UNPARSED_SAMPLES
    for f in r.findings:
        assert f.severity in ("error", "warning", "info") and f.message


def _big_log(n_lines: int):
    """A generator of log lines: a full start, then request lines, warnings and rank noise."""
    origin = (DATA / "origin_kimi_k25_8x_rtxpro6000.log").read_bytes()
    yield origin
    for i in range(n_lines):
        k = i % 5
        if k == 0:
            yield b"[2026-03-01 10:10:00 TP0] Decode batch. #running-req: 12, #token: 3000, token usage: 0.02, gen throughput (token/s): 900.1\n"
        elif k == 1:
            yield b'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        elif k == 2:
            yield b"[2026-03-01 10:10:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 900\n"
        elif k == 3:
            yield f"[2026-03-01 10:10:00 TP{i % 5000}] Memory pool end. avail mem=9.12 GB\n".encode()
        else:
            yield f"[2026-03-01 10:10:00 TP0] WARNING something about memory #{i}\n".encode()


class _GenStream(io.RawIOBase):
    def __init__(self, gen):
        self._gen = gen
        self._buf = b""

    def readable(self):
        return True

    def readinto(self, b):
        while not self._buf:
            try:
                self._buf = next(self._gen)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def test_streaming_memory_is_bounded():
    tracemalloc.start()
    r = diagnose_stream(io.BufferedReader(_GenStream(_big_log(100_000))))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert r.stats.lines > 100_000
    assert peak < 16 * 2**20  # ~10 MB of log read in well under 16 MiB
    assert len(r.unparsed_samples) == MAX_UNPARSED_SAMPLES and r.stats.unparsed == 20_000
    assert r.stats.request_lines == 40_000
    assert "kv-pool-full-at-runtime" in r.codes()
    assert len(r.timeline.ranks) <= MAX_RANKS + 1
    f = next(f for f in r.findings if f.code == "kv-pool-full-at-runtime")
    assert "20000 time(s)" in f.message and len(f.evidence) <= MAX_EVENTS_PER_KIND


def test_one_huge_line_is_cut_not_buffered():
    blob = b"[2026-03-01 10:00:11 TP0] Load weight begin. avail mem=94.00 GB\n" + b"x" * (5 * 2**20) + b"\nend\n"
    r = diagnose_stream(io.BytesIO(blob))
    assert r.stats.cut_lines == 1 and r.stats.lines == 3


def test_every_recognised_seed_line_passes_the_literal_anchors():
    from kvscope.doctor import TRIGGER, has_trigger_anchor

    for line in SEED_LINES:
        raw = line.encode()
        if TRIGGER.search(raw):
            assert has_trigger_anchor(raw), line
