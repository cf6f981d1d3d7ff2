"""The CLI never prints a traceback: typed errors exit 2, anything unexpected exits 3 in one line."""

from __future__ import annotations

import pytest

from kvscope import cli


def test_unexpected_exception_is_one_line_exit_3(monkeypatch, capsys):
    def boom(args):
        return 1 // 0
    parser = cli.build_parser()
    args = parser.parse_args(["plan", "Qwen/Qwen3-8B", "--gpu", "h100"])
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(parser, args, boom))
    assert cli.main([]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError" in err and "Traceback" not in err


def test_debug_env_reraises(monkeypatch):
    parser = cli.build_parser()
    args = parser.parse_args(["plan", "Qwen/Qwen3-8B", "--gpu", "h100"])
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(parser, args, lambda a: [][1]))
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
