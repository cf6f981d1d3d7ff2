"""``kvscope completion bash|zsh|fish``: print a shell completion script, generated from the parser.

bash: ``source <(kvscope completion bash)`` (or save it under ``~/.local/share/bash-completion/completions/kvscope``);
zsh: ``source <(kvscope completion zsh)`` (bash completion through ``bashcompinit``);
fish: ``kvscope completion fish > ~/.config/fish/completions/kvscope.fish``.
Subcommands, each subcommand's options, choices (``--engine``), GPU names (``--gpu``) and the bundled
model ids (the model argument) complete; other values complete as file names.
"""

from __future__ import annotations

import argparse
import shlex

SHELLS = ("bash", "zsh", "fish")


def register(sub) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)",
                       description="Print a completion script. bash/zsh: source <(kvscope completion bash); "
                                   "fish: kvscope completion fish > ~/.config/fish/completions/kvscope.fish")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=run)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _value_words(a: argparse.Action, gpus: list[str]) -> list[str] | None:
    if a.choices:
        return [str(c) for c in a.choices]
    if a.dest == "gpu":
        return gpus
    return None


def _spec() -> tuple[dict[str, list[argparse.Action]], list[str], list[str]]:
    from ..catalog import list_models
    from ..cli import build_parser
    from ..hardware.gpus import gpu_names
    subs = _subparsers(build_parser())
    return {n: [a for a in p._actions if a.option_strings] for n, p in subs.items()}, gpu_names(), sorted(list_models())


def _bash(cmds: dict[str, list[argparse.Action]], gpus: list[str], models: list[str]) -> str:
    q = lambda words: shlex.quote(" ".join(words))  # noqa: E731
    cases, values = [], {}
    for name, actions in cmds.items():
        cases.append(f"    {name}) opts={q([o for a in actions for o in a.option_strings])} ;;")
        for a in actions:
            w = _value_words(a, gpus)
            if w:
                for o in a.option_strings:
                    values[o] = w
    vcases = "\n".join(f"    {o}) COMPREPLY=($(compgen -W {q(w)} -- \"$cur\")); return ;;" for o, w in values.items())
    return f"""# kvscope bash completion (kvscope completion bash)
_kvscope() {{
  local cur prev cmd opts
  cur="${{COMP_WORDS[COMP_CWORD]}}"
  prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  cmd="${{COMP_WORDS[1]}}"
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W {q(list(cmds) + ["--help", "--version"])} -- "$cur")); return
  fi
  case "$prev" in
{vcases}
  esac
  case "$cmd" in
{chr(10).join(cases)}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ "$cmd" == plan || "$cmd" == fit || "$cmd" == perf ]]; then
    COMPREPLY=($(compgen -W {q(models)} -- "$cur") $(compgen -f -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o default -F _kvscope kvscope
"""


def _zsh(cmds, gpus, models) -> str:
    return ("#compdef kvscope\n# kvscope zsh completion (kvscope completion zsh): bash completion via bashcompinit\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + _bash(cmds, gpus, models))


def _fish(cmds: dict[str, list[argparse.Action]], gpus: list[str], models: list[str]) -> str:
    lines = ["# kvscope fish completion (kvscope completion fish)", "complete -c kvscope -f",
             f"complete -c kvscope -n __fish_use_subcommand -a {shlex.quote(' '.join(cmds))}",
             "complete -c kvscope -n __fish_use_subcommand -l version -d 'print the version'"]
    for name, actions in cmds.items():
        cond = f"'__fish_seen_subcommand_from {name}'"
        for a in actions:
            longs = [o[2:] for o in a.option_strings if o.startswith("--")]
            shorts = [o[1:] for o in a.option_strings if not o.startswith("--") and len(o) == 2]
            if not longs and not shorts:
                continue
            flags = " ".join([f"-l {x}" for x in longs] + [f"-s {x}" for x in shorts])
            w = _value_words(a, gpus)
            takes = a.nargs != 0
            val = f" -xa {shlex.quote(' '.join(w))}" if w else (" -r -F" if takes else "")
            desc = (a.help or "").replace("'", "").split(";")[0][:60]
            lines.append(f"complete -c kvscope -n {cond} {flags}{val} -d {shlex.quote(desc)}")
        if name in ("plan", "fit", "perf"):
            lines.append(f"complete -c kvscope -n {cond} -a {shlex.quote(' '.join(models))} -F")
    lines.append("complete -c kvscope -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    cmds, gpus, models = _spec()
    print({"bash": _bash, "zsh": _zsh, "fish": _fish}[args.shell](cmds, gpus, models), end="")
    return 0
