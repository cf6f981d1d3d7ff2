"""Grid syntax, row order, the CLI's CSV / JSON (the same rows as ``kvscope.sweep``) and bad input."""

from __future__ import annotations

import contextlib
import csv
import doctest
import io
import json
from pathlib import Path

import pytest

import kvscope
import kvscope.sweep as sweep_module
from kvscope.cli import main
from kvscope.errors import FlagError
from kvscope.sweep.grid import normalize, parse_axis, parse_value


def test_values_and_ranges():
    assert parse_axis("mem_fraction_static=0.5:0.95:0.01")[1][:4] == (0.5, 0.51, 0.52, 0.53)
    assert parse_axis("mem_fraction_static=0.5:0.95:0.01")[1][-1] == 0.95
    assert len(parse_axis("mem_fraction_static=0.5:0.95:0.01")[1]) == 46
    assert parse_axis("tp=1:8:1")[1] == (1, 2, 3, 4, 5, 6, 7, 8)
    assert parse_axis("--context-length=8k,32K,1m")[1] == (8000, 32768, 1000000)
    assert parse_axis("context_length=8k,32K,1m")[0] == "context_length"
    assert parse_axis("tp=1,2")[0] == "tp_size"
    assert [parse_value(v) for v in ("none", "true", "auto", "fp8_e4m3", "-1", "1e-1")] == \
        [None, True, "auto", "fp8_e4m3", -1, 0.1]


@pytest.mark.parametrize("bad", ["tp", "tp=", "x=1:2", "x=2:1:1", "x=0:1:0", "x=a:b:c", "x=0:1e9:1e-2"])
def test_bad_axes_are_one_line_errors(bad):
    with pytest.raises(FlagError):
        normalize([bad])


def test_grid_size_is_bounded():
    with pytest.raises(FlagError, match="limit"):
        normalize({"a": range(2000), "b": range(2000)})


def test_rows_follow_grid_order_with_the_fraction_axis_anywhere():
    s = kvscope.sweep("Qwen/Qwen3-8B", "h100-sxm",
                      grid={"tp": [1, 2], "mem_fraction_static": [0.6, 0.8], "kv_cache_dtype": ["auto", "fp8_e4m3"]})
    assert [r[:3] for r in s.rows] == [(tp, f, d) for tp in (1, 2) for f in (0.6, 0.8) for d in ("auto", "fp8_e4m3")]
    for r in s.rows:
        t = kvscope.plan("Qwen/Qwen3-8B", "h100-sxm", tp_size=r[0], mem_fraction_static=r[1], kv_cache_dtype=r[2])
        assert r[3:] == (t.kv_cache_tokens, t.max_running_requests, None, "starts", None)


def test_module_docstring_and_docs_examples_run():
    assert doctest.testmod(sweep_module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
    docs = Path(__file__).resolve().parents[2] / "docs" / "sweep.md"
    assert doctest.testfile(str(docs), module_relative=False).failed == 0


def _cli(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, out.getvalue()


def test_cli_csv_and_json_are_the_api_rows():
    grid = ["gpu_memory_utilization=0.3,0.9", "max_model_len=32k,auto", "tp=1,2"]
    api = kvscope.sweep("Qwen/Qwen3-32B", "h100-sxm", engine="vllm", grid=grid)
    rc, text = _cli(["sweep", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--engine", "vllm", "--grid", *grid])
    assert rc == 0
    rows = list(csv.reader(io.StringIO(text)))
    assert tuple(rows[0]) == api.columns
    assert rows[1:] == [["" if v is None else str(v) for v in r] for r in api.rows]
    assert {r[-2] for r in api.rows} == {"starts", "fails"}  # 0.3 of an H100 cannot hold the 32B weights
    rc, text = _cli(["sweep", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--engine", "vllm", "--format", "json",
                     "--grid", *grid])
    assert rc == 0 and json.loads(text)["rows"] == json.loads(json.dumps(api.records()))


@pytest.mark.parametrize("argv", [["--grid", "bogus=1"], ["--grid", "tp=1", "quantization=fp8,none"],
                                  ["--grid", "mem_fraction_static=0.9:0.5:0.1"]])
def test_cli_bad_input_is_exit_2(argv, capsys):
    assert main(["sweep", "Qwen/Qwen3-8B", "--gpu", "h100-sxm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvscope: error:") and err.count("\n") == 1


def test_cli_imports_only_the_chosen_command():
    from kvscope.cli import chosen_command
    assert chosen_command(["sweep", "M", "--grid", "tp=1"]) == "sweep"
    assert chosen_command(["--version"]) is None and chosen_command(["nosuch"]) is None
