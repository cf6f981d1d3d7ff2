"""The probe follows the class actually used: a subclass that overrides a hooked method runs its
own code under the same target (vLLM's CPUWorker over Worker), whether it is defined after the hook
(``__init_subclass__``) or before (``__subclasses__``); a table row naming the subclass wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from kvscope.hooks import Target
from kvscope.probe.records import load_probe_dir
from kvscope.probe.runner import prepare_out_dir, probe_env, release_out_dir

ENGINE = "fakeeng_subcls"


def _package(root):
    pkg = root / ENGINE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "worker.py").write_text(textwrap.dedent('''
        class Worker:
            def __init__(self):
                self.rank = 3
            def init_device(self):
                return "gpu"
            def determine_available_memory(self):
                return 100
            def compile_or_warm_up_model(self):
                return None
    '''))
    (pkg / "cpu_worker.py").write_text(textwrap.dedent(f'''
        from {ENGINE}.worker import Worker
        class CPUWorker(Worker):
            def init_device(self):
                return "cpu"
            def determine_available_memory(self):
                kv_cache_size = 7 << 30
                return kv_cache_size
            def compile_or_warm_up_model(self):
                return "warm"
    '''))
    return pkg


def _targets():
    w, c = f"{ENGINE}.worker", f"{ENGINE}.cpu_worker"
    return [Target("init_device", ENGINE, w, "Worker.init_device", phase="init", rank={"rank": "self.rank"},
                   outputs={"device": "ret"}),
            Target("determine_available_memory", ENGINE, w, "Worker.determine_available_memory",
                   phase="profile", outputs={"available": "ret"}),
            Target("determine_available_memory", ENGINE, c, "CPUWorker.determine_available_memory",
                   phase="profile", required=False, outputs={"available": "ret"},
                   locals={"kv_cache_size_bytes": "kv_cache_size"}),
            Target("compile_or_warm_up_model", ENGINE, w, "Worker.compile_or_warm_up_model",
                   end_of_startup="return")]


def _run(tmp_path, script, install_at_start=True):
    _package(tmp_path)
    out = str(tmp_path / "out")
    prepare_out_dir(out, _targets())
    env = probe_env(out)
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(tmp_path)
    if not install_at_start:  # the boot file installs nothing; the script installs the agent itself
        env.pop("KVSCOPE_PROBE_OUT")
    try:
        res = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True,
                             text=True, timeout=60)
    finally:
        release_out_dir(out)
    assert res.returncode == 0, res.stderr
    (proc,) = load_probe_dir(out)
    return res.stdout.split(), proc


DEFINED_AFTER = f'''
    from {ENGINE}.cpu_worker import CPUWorker
    w = CPUWorker()
    print(w.init_device(), w.determine_available_memory(), w.compile_or_warm_up_model())
'''


def test_overrides_defined_after_the_hook_are_followed(tmp_path):
    printed, proc = _run(tmp_path, DEFINED_AFTER)
    assert printed == ["cpu", str(7 << 30), "warm"]  # the subclass's own code ran, unchanged
    attach = {r["qualname"]: r.get("how") for r in proc.events("attach")}
    assert attach["CPUWorker.init_device"] == "override"
    assert attach["CPUWorker.compile_or_warm_up_model"] == "override"
    assert attach["CPUWorker.determine_available_memory"] == "own"  # its own table row wins
    returns = {r["target"]: r for r in proc.events("return")}
    assert returns["init_device"]["outputs"] == {"device": "cpu"}
    assert returns["init_device"]["rank"] == {"rank": 3}
    assert returns["determine_available_memory"]["outputs"] == {"available": 7 << 30}
    assert returns["determine_available_memory"]["locals"] == {"kv_cache_size_bytes": 7 << 30}
    (end,) = [r for r in proc.events("exit")]
    assert end["serving"] is True  # the override's return ended the startup


DEFINED_BEFORE = f'''
    import os
    from {ENGINE}.cpu_worker import CPUWorker  # loaded before the agent is installed
    import _kvscope_probe_agent as agent
    agent.install(os.environ["OUT_LATER"])  # the modules are already loaded: hooked now
    w = CPUWorker()
    print(w.init_device(), w.compile_or_warm_up_model())
'''


def test_subclasses_that_exist_before_the_hook_are_followed(tmp_path):
    env_out = str(tmp_path / "out")
    os.environ["OUT_LATER"] = env_out
    try:
        printed, proc = _run(tmp_path, DEFINED_BEFORE, install_at_start=False)
    finally:
        del os.environ["OUT_LATER"]
    assert printed == ["cpu", "warm"]
    attach = {r["qualname"]: r.get("how") for r in proc.events("attach")}
    assert attach["CPUWorker.init_device"] == "override"
    assert [r["outputs"] for r in proc.events("return") if r["target"] == "init_device"] == [{"device": "cpu"}]
