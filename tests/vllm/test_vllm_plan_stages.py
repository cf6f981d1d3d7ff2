"""``plan_vllm`` is a sequence of stages, and its numbers are the conformance-tested functions' outputs.

Each stage function the conformance suite compares with vLLM's own code is wrapped in a recorder
(``args.resolve_args``, ``memory.model_kv``, ``memory.requested_memory_bytes``,
``memory.available_kv_cache_bytes``, ``memory.capacity_from_available`` -> ``kv_cache.kv_cache_configs``,
``memory.mamba_blocks_check``); the Timeline's figures must be exactly what those calls returned.
Nothing is re-derived inline. Cases: the conformance releases (``tests/conformance/wheels.py``
VLLM_VERSIONS + boundaries) over one model of each layer mix, estimated and measured.
"""

from __future__ import annotations

import pytest

from kvscope.engines.vllm import kv_cache as kvc
from kvscope.engines.vllm import memory as mem
from kvscope.engines.vllm import plan as plan_mod
from kvscope.engines.vllm.args import VllmFlags
from kvscope.engines.vllm.decision import VllmDecision, VllmPlanExtra
from kvscope.engines.vllm.plan import VllmMeasured, plan_vllm
from kvscope.hardware.gpus import get_gpu

from vllm_case_data import spec_of

VERSIONS = ("0.10.1.1", "0.11.0", "0.14.1", "0.17.0", "0.19.1", "0.20.2", "0.26.0", "0.28.0", "0.30.0", "0.33.0")
CASES = (
    ("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", dict(max_model_len=32768), None),
    ("meta-llama/Llama-3.1-8B-Instruct", "rtx-3090", dict(max_model_len=29000, gpu_memory_utilization=0.9), 2.89),
    ("deepseek-ai/DeepSeek-V2-Lite", "h200", dict(max_model_len=32768), None),
    ("openai/gpt-oss-20b", "h100-sxm", dict(max_model_len=32768, pipeline_parallel_size=2), None),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "h200", dict(max_model_len=32768, tensor_parallel_size=4), None),
    ("nvidia/Nemotron-H-56B-Base-8K", "h200", dict(max_model_len=8192, tensor_parallel_size=2), 30.0),
)


class Recorder:
    """Wraps module functions, keeping every (args, result) pair."""

    def __init__(self, monkeypatch):
        self.calls: dict[str, list] = {}
        self.mp = monkeypatch

    def wrap(self, module, name: str, key: str | None = None) -> None:
        fn = getattr(module, name)
        key = key or name
        self.calls[key] = []

        def spy(*a, **kw):
            out = fn(*a, **kw)
            self.calls[key].append(out)
            return out

        self.mp.setattr(module, name, spy)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("model,gpu,flags,avail_gib", CASES, ids=[c[0].split("/")[1] + ("-measured" if c[3] else "")
                                                                for c in CASES])
def test_plan_numbers_are_the_stage_functions_outputs(monkeypatch, model, gpu, flags, avail_gib, version):
    rec = Recorder(monkeypatch)
    rec.wrap(plan_mod, "resolve_args")
    for name in ("model_kv", "requested_memory_bytes", "available_kv_cache_bytes", "capacity_from_available",
                 "mamba_blocks_check"):
        rec.wrap(mem, name)
    rec.wrap(kvc, "kv_cache_configs")
    try:
        t = plan_vllm(spec_of(model), get_gpu(gpu), VllmFlags(**flags), version,
                      VllmMeasured(available_kv_cache_gib=avail_gib))
    except Exception as exc:  # a release that refuses this layer mix raises before any stage output
        pytest.skip(f"{version} refuses {model}: {exc}")
    a, = rec.calls["resolve_args"]
    kv = rec.calls["model_kv"][0]
    requested, = rec.calls["requested_memory_bytes"]
    avails = rec.calls["available_kv_cache_bytes"]
    cap = rec.calls["capacity_from_available"][0]  # [1:] only when a fix re-checks at 0 bytes
    configs = rec.calls["kv_cache_configs"][0]
    mamba_error, mamba_warning = rec.calls["mamba_blocks_check"][0]
    x, d = t.extra, t.ranks[0].decision
    assert isinstance(x, VllmPlanExtra) and isinstance(d, VllmDecision)
    # settle args -> the resolved args flow through unchanged
    assert (x.max_num_batched_tokens, x.kv_cache_dtype, x.block_size_source, x.gpu_memory_utilization) == \
        (a.max_num_batched_tokens, a.kv_cache_dtype, a.block_size_source, a.gpu_memory_utilization)
    assert t.max_running_requests == a.max_num_seqs and t.engine_version == a.traits.version
    # KV layout (cell)
    plan0 = kv.workers[0].plan
    assert (x.block_size, x.bytes_per_block) == (kv.layout.block_size, plan0.bytes_per_block)
    assert [(g.kind, g.num_layers, g.page_size_bytes) for g in x.kv_cache_groups] == \
        [(g.spec.kind, len(g.layer_ids), g.spec.page_size_bytes) for g in plan0.groups]
    # budget / available memory: one determine_available_memory per PP stage
    assert x.requested_memory_bytes == int(requested) and len(avails) == a.pp
    for r, rank in enumerate(t.ranks[::a.tp]):
        dec = rank.decision
        assert dec.formula == avails[r].formula and dec.non_kv_cache_memory_bytes == avails[r].non_kv_cache_bytes
        assert dec.cudagraph_applied_bytes == avails[r].cudagraph_applied_bytes
        if avail_gib is None:
            assert dec.available_kv_cache_bytes == avails[r].available_kv_cache_bytes
    # pools / capacity: capacity_from_available, itself kv_cache.kv_cache_configs
    assert (x.num_gpu_blocks, t.kv_cache_tokens, x.max_model_len, x.available_kv_cache_bytes) == \
        (cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_model_len, cap.available_kv_cache_bytes)
    assert x.max_concurrency == round(cap.max_concurrency, 4) and d.needed_memory_bytes == cap.needed_memory_bytes
    assert x.estimated_max_model_len == cap.estimated_max_model_len
    if not a.traits.is_v0:
        assert (cap.num_gpu_blocks, cap.kv_cache_tokens, cap.error) == \
            (configs.num_blocks, configs.kv_cache_tokens, configs.error)
    # graphs + verdict: the first error of request / admission / graphs
    assert t.error in (cap.error, mamba_error) or t.error.startswith("Free memory on device")
    assert (mamba_warning is None) or mamba_warning in t.warnings
    assert t.starts == (t.error is None)


def test_stage_functions_stay_short():
    """plan_vllm reads as its stage list; no stage function runs past ~40 lines."""
    import inspect

    for fn in (plan_mod.plan_vllm, plan_mod.settle_args, plan_mod.load_weights, plan_mod.profile_terms,
               plan_mod.available_memory, plan_mod.graphs_check, plan_mod.verdict, plan_mod.ranks,
               plan_mod.plan_extra, plan_mod._fixes, plan_mod._memory_fixes, plan_mod._phases, plan_mod._decision):
        assert len(inspect.getsource(fn).splitlines()) <= 40, fn.__name__


def test_plan_json_keys_are_the_record_fields():
    t = plan_vllm(spec_of("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("h100-sxm"), VllmFlags(max_model_len=8192))
    out = t.to_dict()
    assert list(out["ranks"][0]["decision"]) == list(VllmDecision.json_keys())
    assert "estimated_max_model_len" not in out  # omitted when the admission check passes
    assert all(k in out for k in VllmPlanExtra.json_keys() if k != "estimated_max_model_len")
