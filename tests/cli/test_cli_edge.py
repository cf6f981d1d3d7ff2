"""The CLI never prints a traceback: typed errors exit 2, anything unexpected exits 3 in one line."""

from __future__ import annotations

import pytest

from kvscope import cli


def test_unexpected_exception_is_one_line_exit_3(monkeypatch, capsys):
    def boom(args):
        return 1 // 0
    parser = cli.build_parser()
    args = parser.parse_args(["plan", "Qwen/Qwen3-8B", "--gpu", "h100"])
    monkeypatch.setattr(cli, "build_parser", lambda *_: _Fixed(parser, args, boom))
    assert cli.main([]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError" in err and "Traceback" not in err


def test_debug_env_reraises(monkeypatch):
    parser = cli.build_parser()
    args = parser.parse_args(["plan", "Qwen/Qwen3-8B", "--gpu", "h100"])
    monkeypatch.setattr(cli, "build_parser", lambda *_: _Fixed(parser, args, lambda a: [][1]))
    monkeypatch.setenv("KVSCOPE_DEBUG", "1")
    with pytest.raises(IndexError):
        cli.main([])


class _Fixed:
    def __init__(self, parser, args, func):
        self.parser, self.args = parser, args
        args.func = func

    def parse_args(self, argv):
        return self.args

    def print_help(self):
        pass


@pytest.mark.parametrize("argv,field,value", [
    (["--gpu-memory-mib", "2"], "--gpu-memory-mib", "2 MiB is outside 1024..1048576"),
    (["--tp", "0"], "--tp", "got 0"),
    (["--pp", "0"], "--pp", "got 0"),
    (["--context-length", "-1"], "--context-length", "got -1"),
    (["--engine", "vllm", "--tp", "0"], "--tensor-parallel-size", "got 0"),
    (["--engine", "vllm", "--pipeline-parallel-size", "0"], "--pipeline-parallel-size", "got 0"),
])
def test_bad_sizes_are_one_line_exit_2(capsys, argv, field, value):
    # 0 used to read as "not given" (tp 0 planned as tp 1) and 2 MiB gave a negative GPU: no silent numbers
    assert cli.main(["plan", "Qwen/Qwen3-8B", "--gpu", "h100", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and field in err and value in err
