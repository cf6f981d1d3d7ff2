"""Progress on a terminal only; ``kvscope --version``; shell completion scripts."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import time

import pytest

from kvscope import __version__
from kvscope.cli import main
from kvscope.progress import progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_tty_after_the_delay_and_erases_itself(monkeypatch):
    monkeypatch.delenv("KVSCOPE_NO_PROGRESS", raising=False)
    tty = Tty()
    with progress("kvscope doctor: reading big.log", delay=0.05, stream=tty, interval=0.02):
        time.sleep(0.3)
    text = tty.getvalue()
    assert "\rkvscope doctor: reading big.log | 0 s" in text
    assert text.endswith("\r\x1b[K")


def test_progress_is_silent_when_quick_or_not_a_tty(monkeypatch):
    monkeypatch.delenv("KVSCOPE_NO_PROGRESS", raising=False)
    tty, pipe = Tty(), io.StringIO()
    with progress("quick", delay=1.0, stream=tty):
        pass
    with progress("piped", delay=0.0, stream=pipe, interval=0.01):
        time.sleep(0.1)
    assert tty.getvalue() == "" and pipe.getvalue() == ""
    monkeypatch.setenv("KVSCOPE_NO_PROGRESS", "1")
    with progress("off", delay=0.0, stream=tty, interval=0.01):
        time.sleep(0.1)
    assert tty.getvalue() == ""


def test_version():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and out.getvalue() == f"kvscope {__version__}\n"


def _script(shell: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["completion", shell]) == 0
    return out.getvalue()


def test_bash_completion_completes_commands_options_and_values(tmp_path):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    script = tmp_path / "kvscope.bash"
    script.write_text(_script("bash"))

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        cmd = (f"source {script}; COMP_WORDS=(kvscope {line}); COMP_CWORD={len(words)}; _kvscope; "
               'printf "%s\\n" "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout.split()

    assert complete("pl") == ["plan"]
    assert "serve" in complete("") and "completion" in complete("")
    assert complete("plan", "--gpu-memory-u") == ["--gpu-memory-utilization"]
    assert complete("plan", "--engine", "v") == ["vllm"]
    assert "h100-sxm" in complete("plan", "--gpu", "h1")
    assert "Qwen/Qwen3-8B" in complete("plan", "Qwen/Qwen3-8")


def test_zsh_and_fish_scripts_name_the_same_options():
    bash, zsh, fish = _script("bash"), _script("zsh"), _script("fish")
    assert zsh.startswith("#compdef kvscope") and bash in zsh
    assert "complete -c kvscope -n __fish_use_subcommand -a 'plan fit doctor" in fish
    assert "-n '__fish_seen_subcommand_from plan' -l mem-fraction-static" in fish
    assert "-l gpu -xa '" in fish and "h100-sxm" in fish
    if shutil.which("fish"):
        subprocess.run(["fish", "--no-execute", "-c", fish], check=True)
