"""Shared pieces of the fuzz suite: the CLI runner, example counts and value strategies.

Every target ends in one of kvscope's exit statuses 0 / 1 / 2 (docs/exit-status.md); exit 3 (an
internal error), an exception escaping ``kvscope.cli.main`` or a library call raising anything but a
``KvscopeError`` fails the example with the input that caused it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import time
import warnings
from typing import Any, Callable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from kvscope.cli import main
from kvscope.errors import KvscopeError

DEFAULT_EXAMPLES = 100  # per target in the default run (the whole file stays around 20 s)
FUZZ_EXAMPLES = int(os.environ.get("KVSCOPE_FUZZ_EXAMPLES", "10000"))  # per target under ``-m fuzz`` (.ci/tier_fuzz)
# One input must never take longer (the "no hang past 10 s"). CPU seconds of this process: a
# runaway loop burns them, while a machine shared with other jobs only stretches the wall clock.
MAX_SECONDS = 10.0

_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
DEFAULT = settings(max_examples=DEFAULT_EXAMPLES, derandomize=True, **_COMMON)
# CI's fuzz tier is a fixed, derandomized set of FUZZ_EXAMPLES inputs per target (a CI run must not pass or
# fail by chance); KVSCOPE_FUZZ_RANDOM=1 explores fresh random inputs instead (how new cases are found).
FUZZ = settings(max_examples=FUZZ_EXAMPLES, derandomize=os.environ.get("KVSCOPE_FUZZ_RANDOM", "") in ("", "0"),
                **_COMMON)


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``kvscope.cli.main(argv)`` in-process: (exit status, stderr). argparse's SystemExit counts as its code."""
    err = io.StringIO()
    t0 = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    elapsed = time.process_time() - t0
    assert elapsed < MAX_SECONDS, f"{argv!r} took {elapsed:.1f} s"
    return rc, err.getvalue()


def assert_exit_ok(argv: list[str]) -> int:
    rc, err = run_cli(argv)
    assert rc in (0, 1, 2), f"exit {rc} for kvscope {' '.join(argv)!r}: {err.strip()[-600:]}"
    if rc == 2:  # a usage error is one line (argparse's own usage block aside)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert "Traceback" not in err and last, f"no one-line error for {argv!r}: {err!r}"
    return rc


def library_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``; a ``KvscopeError`` (a refused input) is an answer, anything else is a failure."""
    t0 = time.process_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)
    except KvscopeError as exc:
        assert "\n" not in str(exc), f"multi-line error: {exc!r}"
        return exc
    finally:
        assert time.process_time() - t0 < MAX_SECONDS, f"{fn.__name__} took too long"


# --- values -------------------------------------------------------------------------------------

EDGE_INTS = (0, 1, -1, 2, 3, 7, 12, 64, 128, 1000, 4096, 10_000, 10_001, 65_536, 2**31 - 1, 2**31, 2**53,
             2**63, 10**7, 10**7 + 1, 10**12, -(2**63), 10**30)
EDGE_FLOATS = (0.0, -0.0, 0.5, 1.0, 12.5, 0.99, 1e-9, 1e308, -1.0, math.nan, math.inf, -math.inf)

json_scalar = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(-(2**70), 2**70), st.sampled_from(EDGE_FLOATS),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["", "36", "bfloat16", "float8_e4m3fn", "linear", "llama3", "full_attention", "mamba", "x"]))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=6)

# Values an engine accepts, drawn as often as the hostile ones so that most lines reach the simulation.
PLAUSIBLE_NUMBER = st.sampled_from(["1", "2", "4", "8", "16", "64", "0.5", "0.8", "0.85", "0.9", "0.95", "1024",
                                    "4096", "8192", "32768", "20", "40", "60", "70"])
NUMBER_TEXT = st.one_of(
    PLAUSIBLE_NUMBER, PLAUSIBLE_NUMBER, PLAUSIBLE_NUMBER,
    st.sampled_from(["0", "-1", "1", "2", "3", "8", "16", "0.5", "0.99", "1.0", "1.5", "nan", "inf", "-inf", "1e309",
                     "1e-320", "12.5", "2147483648", "9" * 30, "", " ", "abc", "32k", "auto", "-0", "0x10", "1_000",
                     "1,2", "4,4,4", "64,0", "94,93.5", "0.0001", "100000000"]),
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr))
WORD_TEXT = st.one_of(st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "triton", "fa3", "flashinfer",
                                       "FLASH_ATTN", "nope", "", "EAGLE", "EAGLE3", "NEXTN", "deepep", "none",
                                       '{"method": "mtp", "num_speculative_tokens": 1}', '{"method": 5}', "{",
                                       "[]", "null", "cpu", "gpu", "half", "float32", "bfloat16", "fp8_per_block",
                                       "awq", "gptq", "40", "0", "-1"]),
                      st.text(max_size=10))


def dumps(value: Any) -> str:
    """JSON as Python writes it (NaN / Infinity included, as a careless exporter would)."""
    return json.dumps(value, allow_nan=True)
