"""The real SGLang formula (``profile_max_num_token`` from the sglang 0.5.9 wheel) under the probe.

The one file is read out of the pinned wheel and imported under its real module name, with
torch-free stand-ins in ``sys.modules`` for what it imports; the probe's import hook wraps it
like in a real server. Skipped (one line) when PyPI is unreachable and the wheel is not cached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvscope.probe.records import load_probe_dir
from kvscope.probe.runner import prepare_out_dir, probe_env

VERSION = "0.5.9"
MEMBER = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"

DRIVER = r'''
import json, sys, types

class _Stub(types.ModuleType):
    """A module that has every name: a callable returning False (is_npu(), is_deepseek_nsa()...)."""
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: False

def stub(name, **attrs):
    m = _Stub(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m

AVAILABLE_GIB = 71.0
torch = stub("torch")
torch._utils = stub("torch._utils", _element_size=lambda dtype: {"bf16": 2, "fp8": 1}[dtype])
stub("sglang.srt.configs.model_config")
stub("sglang.srt.distributed.parallel_state",
     get_world_group=lambda: types.SimpleNamespace(world_size=2, cpu_group=None))
stub("sglang.srt.layers.dp_attention", get_attention_tp_size=lambda: 2)
stub("sglang.srt.mem_cache.allocator")
stub("sglang.srt.mem_cache.memory_pool")
stub("sglang.srt.mem_cache.swa_memory_pool")
calls = []
def get_available_gpu_memory(device, gpu_id, distributed=False, empty_cache=True, cpu_group=None):
    calls.append(distributed)
    return AVAILABLE_GIB
stub("sglang.srt.utils.common", get_available_gpu_memory=get_available_gpu_memory)
stub("sglang.srt.utils")

from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin

class ModelConfig:
    head_dim = v_head_dim = 128
    is_hybrid_swa = False
    hf_config = None
    def get_num_kv_heads(self, tp):
        return 8 // tp

class Runner(ModelRunnerKVCacheMixin):
    device, gpu_id, is_draft_worker, mambaish_config = "cuda", 0, False, None
    use_mla_backend, kv_cache_dtype, num_effective_layers = False, "bf16", 36
    mem_fraction_static = 0.8
    model_config = ModelConfig()

print(json.dumps({"tokens": Runner().profile_max_num_token(78.75), "distributed": calls}))
'''


def _wheel_member(tmp_path: Path) -> str:
    cache = Path(os.environ.get("KVSCOPE_WHEEL_CACHE") or "~/.cache/kvscope/wheels").expanduser()
    cached = cache / "members" / f"sglang-{VERSION}" / MEMBER
    if cached.exists():
        return cached.read_text()
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(f"sglang-{VERSION}-*.whl"))
    if not wheels:
        p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                            "--only-binary=:all:", f"sglang=={VERSION}", "-d", str(cache)],
                           capture_output=True, text=True, timeout=180)
        wheels = sorted(cache.glob(f"sglang-{VERSION}-*.whl"))
        if p.returncode != 0 or not wheels:
            pytest.skip(f"sglang=={VERSION} wheel unavailable (PyPI unreachable?)")
    with zipfile.ZipFile(wheels[0]) as z:
        text = z.read(MEMBER).decode()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text)
    return text


def test_real_profile_max_num_token_under_probe(tmp_path):
    source = _wheel_member(tmp_path)
    assert "def profile_max_num_token(self: ModelRunner, total_gpu_memory: int):" in source
    root = tmp_path / "site"
    target = root / MEMBER
    target.parent.mkdir(parents=True)
    target.write_text(source)
    for pkg in ("sglang", "sglang/srt", "sglang/srt/model_executor"):
        (root / pkg / "__init__.py").write_text("")
    dist = root / f"sglang-{VERSION}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {VERSION}\n")
    (root / "driver.py").write_text(DRIVER)
    out = str(tmp_path / "out")
    prepare_out_dir(out)
    env = probe_env(out)
    env["PYTHONPATH"] += os.pathsep + str(root)
    p = subprocess.run([sys.executable, str(root / "driver.py")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    cell = 4 * (128 + 128) * 36 * 2  # kv heads per rank x (head_dim + v_head_dim) x layers x bf16
    rest_gib = 71.0 - 78.75 * (1 - 0.8)
    assert result["tokens"] == int(rest_gib * (1 << 30)) // cell == 804636
    assert result["distributed"] == [True]

    (proc,) = load_probe_dir(out)
    recs = {(r["event"], r.get("target")): r for r in proc.records}
    assert recs[("attach", "profile_max_num_token")]["engine_version"] == VERSION
    call = recs[("call", "profile_max_num_token")]
    assert call["phase"] == "profile"
    assert call["inputs"] == {"pre_model_load_memory_gib": 78.75, "mem_fraction_static": 0.8,
                              "is_draft_worker": False}
    ret = recs[("return", "profile_max_num_token")]
    assert ret["outputs"] == {"max_total_num_tokens": result["tokens"]}
    assert ret["locals"] == {"available_gpu_memory_gib": 71.0, "cell_size_bytes": cell,
                             "rest_memory_gib": rest_gib, "num_layers": 36}
    assert recs[("return", "get_cell_size_per_token")]["outputs"] == {"cell_size_bytes": cell}
    assert recs[("call", "get_cell_size_per_token")]["within"] == "profile_max_num_token"
