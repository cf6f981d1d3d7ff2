"""Use-case: plan an engine start from a model reference, a GPU and flags.

Library entry points (same objects the CLI renders):
``plan_sglang`` (kvscope.engines.sglang.plan) and ``plan_vllm`` (kvscope.engines.vllm.plan).
"""

from __future__ import annotations

from .engines.sglang.args import SGLangArgs
from .engines.sglang.plan import Measured, plan_sglang
from .hardware.gpus import get_gpu
from .model.load import load_spec
from .timeline import Timeline
from .units import gib_to_bytes

__all__ = ["plan", "plan_sglang", "Measured", "SGLangArgs"]


def plan(model: str, gpu: str | None = None, *, engine: str = "sglang", engine_version: str | None = None,
         gpu_memory_mib: int | None = None, pre_load_free_gib: list[float] | None = None,
         post_load_free_gib: list[float] | None = None, draft_model: str | None = None, **flags) -> Timeline:
    """Plan an SGLang start (``engine="sglang"``) with SGLang flag names as keyword arguments
    (``tp_size``, ``mem_fraction_static``, ...). GiB figures are converted to bytes here."""
    if engine != "sglang":
        raise ValueError("plan(): use kvscope.engines.vllm.plan.plan_vllm for vLLM")
    spec, _src = load_spec(model)
    g = get_gpu(gpu, gpu_memory_mib)
    measured = Measured(
        pre_load_free_bytes=tuple(gib_to_bytes(x) for x in pre_load_free_gib) if pre_load_free_gib else None,
        post_load_free_bytes=tuple(gib_to_bytes(x) for x in post_load_free_gib) if post_load_free_gib else None,
    )
    draft = load_spec(draft_model)[0] if draft_model else None
    return plan_sglang(spec, g, SGLangArgs(**flags), engine_version, measured, draft)
