"""The doctor's input is bounded whatever it is given: gzip read by streaming with member, nesting,
ratio and size limits; startup lines capped; per-rank observations capped; one-line errors (exit 2),
never a traceback (issue #14, deliverable 4). And the per-shape verdict cache never hides a line
the parsers would read (issue #16, deliverable 4)."""

from __future__ import annotations

import gzip
import io
import random
import re
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.cli import main
from kvscope.doctor import diagnose_stream, diagnose_text
from kvscope.doctor.scan import (
    DIGITS,
    MAX_STARTUP_LINES,
    REQUEST,
    TRIGGER,
    TRIGGER_HIT,
    iter_lines,
    read_blocks,
    scan,
    verdict,
)
from kvscope.engines.sglang.logs import SglangLogParser
from kvscope.engines.vllm.logs import VllmLogParser
from kvscope.errors import LogFormatError
from kvscope.logs.grammar import MAX_OBS_PER_RANK

from .test_fuzz import SEED_LINES

LOAD_BEGIN = b"[2026-03-01 10:00:00 TP0] Load weight begin. avail mem=94.00 GB\n"
LOAD_END = (b"[2026-03-01 10:00:05 TP0] Load weight end. elapsed=12.3 s, type=DeepseekV3ForCausalLM, "
            b"dtype=torch.bfloat16, avail mem=21.70 GB, mem usage=72.30 GB.\n")


def _read(blob: bytes, **kw) -> list[bytes]:
    return [line for batch in iter_lines(read_blocks(io.BytesIO(blob), "log", **kw)) for line in batch]


def _refused(blob: bytes, **kw) -> str:
    with pytest.raises(LogFormatError) as exc:
        _read(blob, **kw)
    return str(exc.value)


def test_gzip_members_are_read_in_order():
    blob = gzip.compress(b"a\nb") + gzip.compress(b"c\n") + b"\x00" * 512  # logrotate-style append + padding
    assert _read(blob) == [b"a", b"bc"]


def test_two_byte_gzip_magic_is_a_cut_file():
    assert "ends early" in _refused(b"\x1f\x8b")


def test_truncated_gzip_is_refused():
    assert "ends early" in _refused(gzip.compress(LOAD_BEGIN * 100)[:-20])


def test_corrupt_deflate_is_refused():
    assert "corrupt gzip data" in _refused(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(7, 107)))


def test_gzip_inside_gzip_is_refused():
    assert "inside a gzip file" in _refused(gzip.compress(gzip.compress(LOAD_BEGIN)))


def test_gzip_bomb_is_refused_by_its_ratio():
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    blob = comp.compress(b"\n" * (80 << 20)) + comp.flush()  # 80 MiB of newlines, ~1000:1
    assert "expands more than" in _refused(blob)


def test_size_cap_applies_to_plain_and_gzip_logs():
    body = LOAD_BEGIN * 2000
    assert "larger than" in _refused(body, max_bytes=len(body) - 1)
    assert "larger than" in _refused(gzip.compress(body), max_bytes=len(body) - 1)
    assert len(_read(body, max_bytes=len(body))) == 2000


def test_cli_bad_logs_are_one_line_exit_2(tmp_path, capsys):
    cases = {"two.gz": b"\x1f\x8b", "nested.gz": gzip.compress(gzip.compress(LOAD_BEGIN)),
             "corrupt.gz": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 64}
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        assert main(["doctor", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("kvscope: error: PATH:"), err


@pytest.mark.parametrize("value", ["nan", "0", "-1", "inf", "x", "2000"])
def test_max_log_gib_is_range_checked(tmp_path, value, capsys):
    (tmp_path / "a.log").write_bytes(LOAD_BEGIN)
    with pytest.raises(SystemExit) as exc:
        main(["doctor", str(tmp_path / "a.log"), "--max-log-gib", value])
    assert exc.value.code == 2
    assert "0.001..1024" in capsys.readouterr().err


def test_zero_free_before_load_is_read_not_divided_by():
    r = diagnose_text(
        "[2026-03-01 10:00:00 TP0] Load weight begin. avail mem=0.00 GB\n"
        "[2026-03-01 10:00:05 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=0.00 GB, mem usage=0.00 GB.\n"
        "[2026-03-01 10:00:06 TP0] KV Cache is allocated. #tokens: 0, K size: 0.00 GB, V size: 0.00 GB\n")
    assert r.timeline.starts is False and "kv-sizing-failed" in r.codes()


def test_repeated_figure_lines_keep_bounded_observations():
    r = diagnose_stream(io.BytesIO(LOAD_BEGIN + LOAD_END * 5000))
    assert r.stats.recognised == 5001
    s = scan(iter_lines(read_blocks(io.BytesIO(LOAD_BEGIN + LOAD_END * 5000))))
    (rank,) = s.sglang.result().ranks.values()
    assert len(rank.loads) == MAX_OBS_PER_RANK
    assert rank.loads[-1].end_avail_gib.value == 21.70  # the latest figure still wins


def test_startup_lines_past_the_cap_are_counted_not_read():
    n = MAX_STARTUP_LINES + 1234
    r = diagnose_stream(io.BytesIO(LOAD_BEGIN + LOAD_END * n))
    assert r.stats.recognised == MAX_STARTUP_LINES
    assert r.stats.skipped_startup_lines == n + 1 - MAX_STARTUP_LINES
    assert any("were counted, not read" in f.message for f in r.findings)


# -- the verdict cache --------------------------------------------------------------------------

def _with_digits_changed(line: str, rnd: random.Random) -> bytes:
    return "".join(rnd.choice("0123456789") * rnd.randint(1, 3) if ch.isdigit() else ch for ch in line).encode()


def test_no_seed_line_is_hidden_by_its_shape():
    """Every seed line the trigger finds is classified as a trigger line by its digit-free shape, and no
    line is skipped as traffic when it is a startup line."""
    rnd = random.Random(7)
    for line in SEED_LINES:
        for raw in (line.encode(), _with_digits_changed(line, rnd)):
            v = verdict(raw.translate(None, DIGITS))
            if TRIGGER.search(raw):
                assert v & TRIGGER_HIT or v == REQUEST, line
                if v == REQUEST:  # traffic lines that mention a trigger phrase (cuda graph: True …)
                    assert b"batch" in raw or b"throughput" in raw or b"HTTP" in raw or b"request" in raw, line


OLD_REQUEST_LINE = re.compile(  # the per-line pattern before the cache (digits and all)
    rb"Prefill batch|Decode batch|Avg prompt throughput|\"(?:GET|POST) /|HTTP/1\.[01]\" \d{3}|"
    rb"Received request|Finished request|Added request|Aborted request|Engine \d{3}:(?! vllm cache_config_info)")


def _recognised_without_cache(raws: list[bytes]) -> int:
    sg, vl = SglangLogParser(), VllmLogParser()
    n = 0
    for i, raw in enumerate(raws, 1):
        if OLD_REQUEST_LINE.search(raw) or not TRIGGER.search(raw):
            continue
        text = raw.decode("utf-8", "replace")
        a, b = sg.feed(i, text), vl.feed(i, text)
        n += bool(a or b)
    return n


@settings(max_examples=120, deadline=None)
@given(st.lists(st.sampled_from(SEED_LINES), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_cached_scan_reads_the_same_lines_as_a_plain_one(lines, rnd):
    """Lines repeat their shapes with other numbers (the cache hits); the lines understood are exactly
    those a line-by-line scan without the cache understands."""
    raws = [_with_digits_changed(line, rnd) if rnd.random() < 0.5 else line.encode() for line in lines]
    s = scan(iter_lines(read_blocks(io.BytesIO(b"\n".join(raws) + b"\n"))))
    assert s.stats.recognised == _recognised_without_cache(raws)
