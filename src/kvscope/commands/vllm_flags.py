"""``kvscope plan --engine vllm``: vLLM's own flag names (``vllm serve``) on the parser. The values
reach the engine as ``kvscope.plan(..., engine="vllm", **flags)`` keyword arguments
(``commands/plan.py``), converted by the engine's ``flags_from_options``."""

from __future__ import annotations

import argparse

from ..errors import FlagError
from ._argtypes import finite_float, gib, gib0, signed_gib

__all__ = ["add_vllm_arguments", "vllm_dests"]


def _max_model_len(text: str) -> int:
    """argparse type of ``--max-model-len``: tokens, 32k, -1 or auto (``args.parse_max_model_len``)."""
    from ..engines.vllm.args import parse_max_model_len  # the engine's modules load only when used

    try:
        return parse_max_model_len(text)
    except (FlagError, ArithmeticError, ValueError):  # "inf" overflows int(float(...))
        raise argparse.ArgumentTypeError(f"invalid max_model_len {text!r} (an integer, 32k, -1 or auto)") from None


def _add(group, *names: str, **kw) -> None:
    """Add an option unless another engine's group already registered the same name (shared parser)."""
    existing = getattr(group, "_option_string_actions", {})
    if any(n in existing for n in names):
        return
    group.add_argument(*names, **kw)


def add_vllm_arguments(parser) -> None:
    """vLLM's own flag names (``vllm serve``) plus kvscope's measured inputs."""
    _add(parser, "--tensor-parallel-size", "-tp", dest="tensor_parallel_size", type=int, default=1)
    _add(parser, "--pipeline-parallel-size", "-pp", dest="pipeline_parallel_size", type=int, default=1)
    _add(parser, "--data-parallel-size", "-dp", dest="data_parallel_size", type=int, default=1)
    _add(parser, "--enable-expert-parallel", action="store_true")
    _add(parser, "--gpu-memory-utilization", type=finite_float, default=None)
    _add(parser, "--max-model-len", type=_max_model_len, default=None, help="tokens, 32k, or -1/auto (auto-fit)")
    _add(parser, "--max-num-seqs", type=int, default=None)
    _add(parser, "--max-num-batched-tokens", type=int, default=None)
    _add(parser, "--kv-cache-dtype", default="auto", help="auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2, ... (vLLM's choices; a bad one is named)")
    _add(parser, "--block-size", type=int, default=None)
    _add(parser, "--attention-backend", default=None, help="vLLM backend name, e.g. FLASHINFER_MLA (v0.19+)")
    _add(parser, "--enforce-eager", action="store_true")
    _add(parser, "--kv-cache-memory-bytes", default=None, help="bytes (40G = 40 GiB, 40g = 40e9)")
    _add(parser, "--num-gpu-blocks-override", type=int, default=None)
    _add(parser, "--speculative-config", default=None, help='JSON, e.g. {"method": "mtp", "num_speculative_tokens": 1}')
    _add(parser, "--enable-prefix-caching", dest="enable_prefix_caching", action="store_true", default=None)
    _add(parser, "--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false")
    _add(parser, "--allow-long-max-model-len", action="store_true", help="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    _add(parser, "--available-kv-cache-gib", type=signed_gib, default=None,
         help="measured: 'Available KV cache memory: X GiB' (exact block/token arithmetic)")
    _add(parser, "--weights-gib", type=gib0, default=None, help="measured: 'Model loading took X GiB'")
    _add(parser, "--activation-peak-gib", type=gib0, default=None, help="measured: torch peak memory increase")
    _add(parser, "--non-torch-gib", type=gib0, default=None, help="measured: non-torch forward increase memory")
    _add(parser, "--cudagraph-gib", type=gib0, default=None, help="measured: 'Estimated CUDA graph memory'")
    _add(parser, "--initial-free-gib", type=gib, default=None, help="measured: 'Initial free memory: X GiB'")


def vllm_dests() -> tuple[str, ...]:
    """The Namespace names these options set (``plan()`` keyword arguments for ``engine="vllm"``)."""
    scratch = argparse.ArgumentParser(add_help=False)
    add_vllm_arguments(scratch)
    return tuple(dict.fromkeys(a.dest for a in scratch._actions))
