"""kvscope.engines.sglang.args.resolve_defaults vs SGLang's own default-memory code, per release.

Engine side: ``ServerArgs.__post_init__`` slice (0.4.6.post5), ``ServerArgs._handle_gpu_memory_settings``
(0.5.6-0.5.18), ``arg_groups/memory_hook.py::handle_gpu_memory_settings`` (0.5.20+), with their
helpers (capture-size generators, ``adjust_mem_fraction_for_vlm``, ``reserve_for_graph_mb`` ...).
Compared: chunked_prefill_size, decode cuda_graph_max_bs, mem_fraction_static (exact float) and,
when the prefill graph is on, the length of its capture list.

Not conformance-tested here: whether the prefill/piecewise CUDA graph is on. SGLang decides that
in other handlers (``_handle_piecewise_cuda_graph``: 20+ model/backend conditions in 0.5.13,
``cuda_graph_hook.py`` in 0.5.23); the engine is given kvscope's on/off decision as an input.
"""
from __future__ import annotations

import pytest

from . import cases
from .conftest import count_cases, require_source
from .sglang_engine import ArgsCase, SGLang
from .wheels import sglang_params

from kvscope.engines.sglang.release import release

args_mod = pytest.importorskip("kvscope.engines.sglang.args")

N_CASES = 1500


def _members(version: str) -> tuple:
    if version.startswith("0.4"):
        return ("sglang/srt/server_args.py",)
    out = ["sglang/srt/server_args.py", "sglang/srt/model_executor/cuda_graph_config.py",
           "sglang/srt/arg_groups/memory_hook.py", "sglang/srt/arg_groups/cuda_graph_hook.py"]
    return tuple(out)


def gen_args(rng):
    tp = rng.choice([1, 1, 2, 4, 8, 16])
    dp = rng.choice([1, 1, 2, 4, 8])
    spec = rng.choice([None, None, None, "EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN"])
    a = args_mod.SGLangArgs(
        tp_size=tp,
        pp_size=rng.choice([1, 1, 1, 2, 4]),
        dp_size=dp,
        enable_dp_attention=dp > 1 and rng.random() < 0.5,
        mem_fraction_static=cases.maybe(rng, 0.1, round(rng.uniform(0.5, 0.95), 3)),
        context_length=cases.maybe(rng, 0.3, rng.choice([2048, 4096, 8192, 32768, 131072, rng.randint(256, 10 ** 6)])),
        max_running_requests=cases.maybe(rng, 0.25, rng.choice([1, 8, 64, 128, 256, 1024, rng.randint(1, 5000)])),
        max_total_tokens=cases.maybe(rng, 0.15, rng.randint(1000, 2_000_000)),
        chunked_prefill_size=cases.maybe(rng, 0.3, rng.choice([-1, 512, 2048, 4096, 8192, 16384, rng.randint(1, 40000)])),
        max_prefill_tokens=rng.choice([16384, 16384, 8192, rng.randint(1, 65536)]),
        cuda_graph_max_bs=cases.maybe(rng, 0.3, rng.choice([1, 8, 24, 80, 160, 256, 512, rng.randint(1, 1024)])),
        disable_piecewise_cuda_graph=rng.random() < 0.3,
        enable_piecewise_cuda_graph=rng.random() < 0.3,
        speculative_algorithm=spec,
        speculative_num_draft_tokens=rng.choice([None, 2, 4, 8]) if spec else None,
        moe_a2a_backend=rng.choice(["none", "none", "none", "deepep"]),
    )
    extra = dict(
        gpu_mem_mib=cases.gpu_mem(rng),
        is_mla=rng.random() < 0.3,
        is_multimodal=rng.random() < 0.2,
        vit_num_layers=rng.choice([24, 27, 32, 40, rng.randint(1, 64)]),
        vit_hidden_size=rng.choice([1024, 1152, 1280, 1536, rng.randint(64, 4096)]),
    )
    return a, extra


def engine_case(version, a, extra, prefill_graph_on: bool) -> ArgsCase:
    return ArgsCase(
        gpu_mem_mib=extra["gpu_mem_mib"], tp_size=a.tp_size, pp_size=a.pp_size, dp_size=a.dp_size,
        enable_dp_attention=a.enable_dp_attention, mem_fraction_static=a.mem_fraction_static,
        chunked_prefill_size=a.chunked_prefill_size, cuda_graph_max_bs=a.cuda_graph_max_bs,
        max_running_requests=a.max_running_requests, max_total_tokens=a.max_total_tokens,
        max_prefill_tokens=a.max_prefill_tokens, context_length=a.context_length,
        speculative_algorithm=a.speculative_algorithm,
        speculative_num_draft_tokens=a.speculative_num_draft_tokens,
        is_mla=extra["is_mla"], is_multimodal=extra["is_multimodal"],
        vit_num_layers=extra["vit_num_layers"], vit_hidden_size=extra["vit_hidden_size"],
        moe_a2a_backend=a.moe_a2a_backend, prefill_graph=prefill_graph_on,
    )


# Known kvscope mismatches, found by this suite (strict: an XPASS fails, so drop the entry once fixed).
KNOWN: dict[str, str] = {}  # all mismatches found by this suite were fixed in kvscope (see docs/conformance.md)


@pytest.mark.parametrize("version", sglang_params(KNOWN))
def test_default_memory_settings(version, multiplier):
    require_source("sglang", version, _members(version))
    engine = SGLang(version)
    mismatches = []
    n = N_CASES * multiplier
    for rng in cases.rngs(seed=11, n=n):
        a, extra = gen_args(rng)
        ours = args_mod.resolve_defaults(release(version), a, extra["gpu_mem_mib"], is_mla=extra["is_mla"],
                                         is_multimodal=extra["is_multimodal"],
                                         vit_num_layers=extra["vit_num_layers"],
                                         vit_hidden_size=extra["vit_hidden_size"])
        theirs = engine.default_memory_settings(engine_case(version, a, extra, ours.prefill_graph_tokens > 0))
        on = ours.prefill_graph_tokens > 0
        got = (ours.chunked_prefill_size, ours.cuda_graph_max_bs, ours.mem_fraction_static,
               ours.prefill_graph_tokens if on else None)
        want = (theirs.chunked_prefill_size, theirs.cuda_graph_max_bs, theirs.mem_fraction_static,
                len(theirs.prefill_graph_bs or []) if on else None)
        if got != want:
            mismatches.append((a, extra, "kvscope", got, "engine", want))
    count_cases("sglang", version, "default mem_fraction_static / chunked_prefill_size / cuda_graph_max_bs", n)
    assert not mismatches, _report(version, mismatches)


FIELDS = ("chunked_prefill_size", "cuda_graph_max_bs", "mem_fraction_static",
          "prefill_graph_tokens (len of the prefill/piecewise capture list)")


def _report(version, mismatches) -> str:
    by_field = {}
    for a, extra, _, got, _, want in mismatches:
        for i, name in enumerate(FIELDS):
            if got[i] != want[i]:
                by_field.setdefault(name, []).append((a, extra, got[i], want[i]))
    lines = [f"sglang {version}: {len(mismatches)} of the generated cases differ"]
    for name, rows in by_field.items():
        a, extra, got, want = rows[0]
        lines.append(f"  {name}: {len(rows)} cases; e.g. kvscope={got!r} engine={want!r} for {extra} {a}")
    return "\n".join(lines)
