"""Engine-flag checks shared by ``plan`` and ``fit``: the other engine's flags, and ``--engine-version``
outside the modelled releases (refused; ``--allow-unmodelled-version`` plans the nearest modelled one
with a warning)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping, Sequence

from ..errors import FlagError
from ..units import GiB

# The same setting under each engine's name (SGLang ServerArgs, vLLM EngineArgs); a flag of the other
# engine is refused naming this engine's flag (None: no counterpart).
OTHER_ENGINE_FLAGS: tuple[tuple[str | None, str | None], ...] = (
    ("mem_fraction_static", "gpu_memory_utilization"),
    ("context_length", "max_model_len"),
    ("max_running_requests", "max_num_seqs"),
    ("chunked_prefill_size", "max_num_batched_tokens"),
    ("page_size", "block_size"),
    ("disable_cuda_graph", "enforce_eager"),
    ("disable_radix_cache", "enable_prefix_caching"),
    ("speculative_algorithm", "speculative_config"),
    ("speculative_draft_model_path", "speculative_config"),
    ("speculative_num_draft_tokens", "speculative_config"),
    ("pre_load_free_gib", "initial_free_gib"),
    ("post_load_free_gib", "weights_gib"),
    ("max_total_tokens", "num_gpu_blocks_override"),
    ("ep_size", "enable_expert_parallel"),
    ("enable_dp_attention", None), ("attn_dp_size", None), ("moe_a2a_backend", None), ("cuda_graph_max_bs", None),
    (None, "kv_cache_memory_bytes"), (None, "allow_long_max_model_len"), (None, "available_kv_cache_gib"),
    (None, "activation_peak_gib"), (None, "non_torch_gib"), (None, "cudagraph_gib"),
)
ENGINE_NAME = {"sglang": "SGLang", "vllm": "vLLM"}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def parser_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Each dest's default as argparse applies it (the first action of a dest sets it)."""
    out: dict[str, Any] = {}
    for a in parser._actions:
        out.setdefault(a.dest, a.default)
    return out


def check_engine_flags(args: argparse.Namespace, defaults: Mapping[str, Any]) -> None:
    """Refuse a flag given for the other engine (a value other than its default), naming this
    engine's flag for the same setting."""
    mine = 0 if args.engine == "sglang" else 1
    other_engine = "vllm" if mine == 0 else "sglang"
    for pair in OTHER_ENGINE_FLAGS:
        other = pair[1 - mine]
        if other is None or other not in defaults or getattr(args, other, None) == defaults[other]:
            continue
        right = pair[mine]
        spelled = _flag(other)
        if other == "enable_prefix_caching" and getattr(args, other) is False:
            spelled = "--no-enable-prefix-caching"
        fix = (f"{ENGINE_NAME[args.engine]}'s flag is {_flag(right)}" if right else
               f"{ENGINE_NAME[args.engine]} has no such flag") + f"; or pass --engine {other_engine}"
        raise FlagError(f"{spelled} is a {ENGINE_NAME[other_engine]} flag, not {ENGINE_NAME[args.engine]}'s",
                        field=spelled, fix=fix)


def engine_version(engine: str, text: str | None, allow_unmodelled: bool) -> str | None:
    """``--engine-version`` as given, or with ``--allow-unmodelled-version`` the nearest modelled
    release (with a warning on stderr when that differs)."""
    if not text or text == "latest" or not allow_unmodelled:
        return text
    if engine == "vllm":
        from ..engines.vllm.release import nearest_modelled
    else:
        from ..engines.sglang.release import nearest_modelled  # type: ignore[no-redef]
    near = nearest_modelled(text)
    if near != text:
        print(f"kvscope: warning: {ENGINE_NAME.get(engine, engine)} {text} is outside the releases kvscope "
              f"models; planned as {near}, the nearest modelled release (--allow-unmodelled-version)",
              file=sys.stderr)
    return near


def check_version(engine: str, text: str | None) -> None:
    """Refuse an ``--engine-version`` outside the modelled releases (before any search runs)."""
    if engine == "vllm":
        from ..engines.vllm.release import check_modelled
    else:
        from ..engines.sglang.release import check_modelled  # type: ignore[no-redef]
    check_modelled(text)


def check_free_memory(pre: Sequence[int] | None, post: Sequence[int] | None, gpu_bytes: int, gpu_key: str) -> None:
    """Measured free memory (bytes per rank): within the GPU, and after the weights no more than before."""
    for name, vals in (("--pre-load-free-gib", pre), ("--post-load-free-gib", post)):
        if vals and max(vals) > gpu_bytes:
            raise FlagError(f"{max(vals) / GiB:.2f} GiB free is more than the {gpu_key}'s {gpu_bytes / GiB:.2f} GiB",
                            field=name, fix="check the value, or give the GPU's size with --gpu-memory-mib")
    if pre and post:
        pairs = list(zip(pre * len(post) if len(pre) == 1 else pre, post * len(pre) if len(post) == 1 else post))
        if any(b > a for a, b in pairs):
            a, b = next((a, b) for a, b in pairs if b > a)
            raise FlagError(f"{b / GiB:.2f} GiB free after the weights is more than the {a / GiB:.2f} GiB free "
                            "before them", field="--post-load-free-gib",
                            fix="loading weights only lowers free memory: check both values")


def add_version_override(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-unmodelled-version", action="store_true",
                   help="plan an --engine-version outside the modelled releases as the nearest modelled one "
                        "(prints a warning)")
