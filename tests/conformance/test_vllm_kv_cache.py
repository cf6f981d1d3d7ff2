"""kvscope.engines.vllm.kv_cache vs vLLM's own KV-cache layout code, per release.

Engine side (``vllm_engine_kv.py``): the wheel's ``vllm/v1/kv_cache_interface.py`` spec dataclasses
and ``vllm/v1/core/kv_cache_utils.py`` (<= 0.28) / ``kv_cache_planning.py`` (0.33):
``get_kv_cache_configs`` (grouping, admission check, ``num_blocks``, min over PP workers), the
capacity log (``get_kv_cache_config_from_groups`` / ``_report_kv_cache_config`` /
``get_kv_cache_capacity`` / ``update_kv_cache_capacity``), ``max_memory_usage_bytes`` /
``_max_memory_usage_bytes_from_groups`` and ``estimate_max_model_len`` /
``_estimate_max_model_len_from_groups``; KV heads per rank from ``ModelConfig.get_num_kv_heads``
and mamba state shapes from ``MambaStateShapeCalculator``.

kvscope side: ``layer_specs`` (page sizes), ``get_kv_cache_groups`` (+ ``project_to_worker``,
``make_plan``), ``kv_cache_configs`` (check, ``num_blocks``, tokens, concurrency, error text,
estimated max len).

Compared exactly, per case: page_size_bytes of every layer; the global groups (layers, kind,
block size, page after unification); num_blocks; the logged token figure and the concurrency as
vLLM formats them (``{:,}`` and ``%.2f``); needed bytes and estimated max len per worker; the
admission check's pass/fail and error text; a grouping failure (NotImplementedError text, or the
AssertionError of 0.19/0.20) on both sides; the auto-fitted max_model_len (``-1``, 0.14+).

Generated layer mixes: full attention (MHA/GQA/MQA, TP above and below the KV-head count), MLA
(auto/fp8/fp8_ds_mla), full + sliding window (gpt-oss 1:1, Gemma 5:1, random), chunked local
(Llama 4 3:1), Qwen3-Next gated-delta-net and Nemotron-H/Granite mamba2 hybrids (attention block
size and mamba padding from the release's hybrid-alignment arithmetic, mamba cache mode
none/align, some with unaligned pages), pure mamba; draft (EAGLE/MTP) attention layers with their
own geometry (``UniformTypeKVCacheSpecs``, page unification); 1-4 PP stages; block sizes 1-256;
KV element sizes 1/2/4; max_model_len 1..1M; available bytes from negative to ~1 TiB and around
the one-request need; num_gpu_blocks_override; auto-fit.

Not conformance-tested here: DCP/PCP, ``--disable-hybrid-kv-cache-manager``, block-outermost
layouts (0.33 packing), HiSparse, DeepSeek-V4 groups, cross-attention, hidden-state caches,
mamba cache mode ``all``, MLA + mamba hybrids.
"""
from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Any, List, Optional, Tuple

import pytest

from . import cases
from .conftest import count_cases, require_source
from .vllm_engine_kv import KVCase, MambaCase, hybrid_alignment, hybrid_members, kv_engine, kv_members, vtuple
from .wheels import VLLM_ALL, VLLM_DEFAULT

kvc = pytest.importorskip("kvscope.engines.vllm.kv_cache")
release = pytest.importorskip("kvscope.engines.vllm.release")
spec_mod = pytest.importorskip("kvscope.model.spec")
errors = pytest.importorskip("kvscope.errors")

N_CASES = 700  # per default release; x10 with KVSCOPE_CONFORMANCE_FULL

GiB = 1 << 30
MIXES = ("full", "full", "mla", "mla", "gpt_oss", "gemma", "sliding_random", "llama4", "qwen3_next",
         "nemotron_h", "granite", "pure_mamba")


# ---------------------------------------------------------------------------------------------
# generated cases
# ---------------------------------------------------------------------------------------------

def _num_layers(rng: random.Random) -> int:
    return rng.choice([1, 2, 3, 16, 24, 28, 32, 36, 40, 48, 61, 64, 80, 94, rng.randint(1, 128)])


def _layers(rng: random.Random, mix: str) -> Tuple[str, ...]:
    n = _num_layers(rng)
    if mix in ("full", "mla"):
        return ("full",) * n
    if mix == "gpt_oss":  # sliding, full, sliding, full ...
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n))
    if mix == "gemma":  # 5 sliding : 1 full
        return tuple("full" if i % 6 == 5 else "sliding" for i in range(n))
    if mix == "sliding_random":
        p = rng.random()
        return tuple("sliding" if rng.random() < p else "full" for i in range(n))
    if mix == "llama4":  # 3 chunked local : 1 full
        return tuple("full" if i % 4 == 3 else "chunked" for i in range(n))
    if mix == "qwen3_next":  # 3 gated delta net : 1 full
        return tuple("full" if i % 4 == 3 else "mamba" for i in range(n))
    if mix == "nemotron_h":  # mostly mamba2, an attention layer every ~7
        return tuple("full" if i % 7 == 3 else "mamba" for i in range(n))
    if mix == "granite":  # random mamba2 / attention
        p = rng.choice([0.1, 0.2, 0.5])
        return tuple("full" if rng.random() < p else "mamba" for i in range(n))
    if mix == "pure_mamba":
        return ("mamba",) * n
    raise ValueError(mix)


def _pp_stages(rng: random.Random, n: int) -> Tuple[Tuple[int, int], ...]:
    pp = min(n, rng.choice([1, 1, 1, 1, 2, 2, 4]))
    if pp == 1:
        return ((0, n),)
    cuts = sorted(rng.sample(range(1, n), pp - 1))
    edges = [0, *cuts, n]
    return tuple((edges[i], edges[i + 1]) for i in range(pp))


def _mamba(rng: random.Random, kind: str, tp: int) -> MambaCase:
    if kind == "gdn":  # Qwen3-Next: 16 k heads x 128, 32 v heads x 128
        kh = rng.choice([16, 16, 8, 4])
        vh = kh * rng.choice([1, 2, 4])
        return MambaCase("gdn", kh, vh, rng.choice([128, 128, 64]), rng.choice([128, 128, 64]),
                         conv_kernel=rng.choice([4, 4, 3]))
    heads = rng.choice([128, 128, 112, 64, 96, 48])  # Nemotron-H 128 x 64, Granite 4.0 128 x 64
    return MambaCase("mamba2", rng.choice([8, 8, 1, 2]), heads, rng.choice([64, 64, 32]),
                     rng.choice([128, 128, 64]), conv_kernel=rng.choice([4, 4, 3]))


def gen_case(rng: random.Random, version: str) -> KVCase:
    v = vtuple(version)
    mix = rng.choice(MIXES)
    layers = _layers(rng, mix)
    mla = mix == "mla"
    hybrid = "mamba" in layers
    if hybrid:
        kind = "gdn" if mix == "qwen3_next" and kind_ok(version) else "mamba2"
        tp = rng.choice([1, 1, 2, 4, 8])
        mamba = _mamba(rng, kind, tp)
        # the state shapes must divide by TP (vLLM asserts; kvscope raises a FlagError)
        while any(x % tp for x in ((mamba.b,) if kind == "mamba2" else (mamba.a, mamba.b))):
            tp //= 2
    else:
        tp = rng.choice([1, 1, 2, 4, 8, 16, 32])
        mamba = None
    kv_heads = rng.choice([1, 2, 4, 8, 8, 16, 32, 64, 128, rng.randint(1, 160)])
    cache_dtype, dtype_bytes = "auto", rng.choice([2, 2, 1, 4])
    if mla:
        cache_dtype = rng.choice(["auto", "auto", "fp8"] + (["fp8_ds_mla"] if v >= (0, 11) else []))
        if cache_dtype != "auto":
            dtype_bytes = 1
    elif dtype_bytes == 1:
        cache_dtype = "fp8"
    mnbt = rng.choice([1, 512, 2048, 8192, 8192, 16384, rng.randint(1, 65536)])
    # v0.10.x groups each PP worker on its own and unify_kv_cache_configs asserts the workers'
    # groups match (kv_cache_utils.py @ v0.10.1.1 l.1136-1144): hybrid layer mixes run with PP 1 there
    uniform = len(set(layers)) == 1
    pp = _pp_stages(rng, len(layers)) if (v >= (0, 11) or uniform) else ((0, len(layers)),)
    # VllmConfig.max_in_flight_tokens (0.26+); earlier releases read max_num_batched_tokens instead
    in_flight = mnbt * (2 if len(pp) == 1 else len(pp))
    mml = rng.choice([1, 2, 15, 16, 17, 2048, 4096, 8192, 32768, 131072, 262144, 1 << 20,
                      rng.randint(1, 1 << 20)])
    window = rng.choice([128, 512, 1024, 4096, 8192, rng.randint(1, 100_000)])
    block = rng.choice([1, 16, 16, 16, 32, 64, 64, 128, 256, rng.randint(1, 256)])
    c = KVCase(
        layers=layers, attention="mla" if mla else "mha", total_num_kv_heads=kv_heads,
        head_size=rng.choice([64, 80, 96, 128, 128, 256, rng.randint(8, 512)]),
        kv_lora_rank=rng.choice([512, 512, 256, rng.randint(16, 1024)]),
        qk_rope_head_dim=rng.choice([64, 64, 32, rng.randint(8, 128)]),
        dtype_bytes=dtype_bytes, cache_dtype=cache_dtype, tp=tp, pp_stages=pp, block_size=block,
        window=window, max_model_len=mml, max_num_batched_tokens=mnbt, max_in_flight_tokens=in_flight,
        available=(0,) * len(pp), mamba=mamba, mamba_dtype_bytes=rng.choice([2, 2, 4]),
    )
    if hybrid:
        mode = "align" if (v >= (0, 19) and rng.random() < 0.5) else "none"
        # MTP drafts add speculative blocks to the mamba state (num_spec in the shapes: gated
        # delta net from 0.11, mamba2 from 0.19)
        spec_ok = v >= (0, 19) or (v >= (0, 11) and c.mamba is not None and c.mamba.kind == "gdn")
        spec_blocks = rng.choice([0, 0, 0, 1, 2]) if spec_ok else 0
        c = replace(c, mamba_cache_mode=mode, num_speculative_blocks=spec_blocks)
        if "full" in layers and not (v >= (0, 19) and rng.random() < 0.15 and _unaligned_ok(c, version)):
            h = hybrid_alignment(kv_engine(version), c)  # the release's own config-time alignment
            c = replace(c, block_size=h.block_size, mamba_page_size_padded=h.mamba_page_size_padded)
        # else: the attention block size as given, no mamba padding -- page-size unification in
        # get_kv_cache_groups (as with a draft model's larger pages); not before v0.19, whose
        # admission check runs before grouping
        c = replace(c, mamba_block_size=c.block_size if mode == "align" else mml)
    if mix != "mla" and rng.random() < 0.2:
        c = _with_draft(rng, c, v)
    c = replace(c, available=tuple(_available(rng, c, version) for _ in pp))
    if v >= (0, 14) and rng.random() < 0.15:  # --max-model-len -1: auto-fit (case max_model_len = derived)
        c = replace(c, auto_fit=True)
    if rng.random() < 0.1:  # --num-gpu-blocks-override
        c = replace(c, num_gpu_blocks_override=rng.choice([1, 2, 100, 4096, rng.randint(1, 10 ** 6)]))
    return c


def _with_draft(rng: random.Random, c: KVCase, v: Tuple[int, ...]) -> KVCase:
    """EAGLE / MTP draft attention layers (gpt-oss-20b + EAGLE: 12 sliding + 13 full)."""
    n = rng.choice([1, 1, 2, 3])
    kinds = tuple(rng.choice(["full", "full", "sliding"]) if "sliding" in c.layers else "full" for _ in range(n))
    if v < (0, 19):
        # no page-size unification yet, and the admission check runs before the grouping:
        # drafts keep the target's geometry (and, on 0.10, its spec types)
        heads, head = c.total_num_kv_heads, c.head_size
        if v < (0, 11):
            kinds = tuple(k if k in c.layers else c.layers[0] for k in kinds)
            if "mamba" in c.layers or c.layers[0] not in ("full", "sliding"):
                return c
        if "mamba" in c.layers:
            return c
    else:
        heads = rng.choice([c.total_num_kv_heads, 1, 4, 8, 32])
        head = rng.choice([c.head_size, 64, 128, 256])
    return replace(c, draft_layers=kinds, draft_kv_heads=heads, draft_head_size=head)


def _unaligned_ok(c: KVCase, version: str) -> bool:
    """Unaligned pages that vLLM handles (or rejects with NotImplementedError): before v0.26 a
    mamba page smaller than a multiple-of-it attention page trips an assert instead."""
    e = kv_engine(version)
    attn, mamba = e.hybrid_pages(c)
    return vtuple(version) >= (0, 26) or attn <= mamba or attn % mamba != 0


def kind_ok(version: str) -> bool:
    return kv_engine(version).has_gdn


def _available(rng: random.Random, c: KVCase, version: str) -> int:
    r = rng.random()
    if r < 0.05:
        return rng.choice([-GiB, -1, 0, 1])
    if r < 0.45:
        # around the one-request need of the whole model (a rough, kvscope-side estimate)
        need = _rough_need(c)
        return max(-1, int(need * rng.uniform(0.3, 1.7)) // len(c.pp_stages) + rng.randint(-4096, 4096))
    if r < 0.55:
        return rng.randint(1, 64 << 20)
    return rng.randint(1, 1 << 40) if r < 0.75 else rng.randint(GiB, 160 * GiB)


def _rough_need(c: KVCase) -> int:
    try:
        spec, layout = model_spec(c), cache_layout(c)
        specs = kvc.layer_specs(spec, layout)
        per = sum(s.page_size_bytes * s.max_memory_usage_blocks(scheduler_view(c)) for s in specs.values())
        return max(per, 1)
    except Exception:  # generator only: a failing kvscope side is reported by the comparison
        return GiB


# ---------------------------------------------------------------------------------------------
# kvscope side
# ---------------------------------------------------------------------------------------------

_KIND = {"full": spec_mod.FULL, "sliding": spec_mod.SLIDING, "chunked": spec_mod.SLIDING}


def model_spec(c: KVCase):
    mla = c.attention == "mla"
    m = c.mamba
    mamba = None
    if m is not None:
        if m.kind == "gdn":
            mamba = spec_mod.MambaSpec(kind="gdn", conv_dim=2 * m.a * m.c + m.b * m.d, conv_kernel=m.conv_kernel,
                                       num_heads=m.b, head_dim=m.c, state_size=m.d, n_groups=m.a)
        else:
            mamba = spec_mod.MambaSpec(kind="mamba2", conv_dim=m.b * m.c + 2 * m.a * m.d, conv_kernel=m.conv_kernel,
                                       num_heads=m.b, head_dim=m.c, state_size=m.d, n_groups=m.a)
    state_kind = spec_mod.LINEAR if (m is not None and m.kind == "gdn") else spec_mod.MAMBA
    n = len(c.layers)
    return spec_mod.ModelSpec(
        name="generated", model_type="llama4" if "chunked" in c.layers else ("deepseek_v3" if mla else "llama"),
        architectures=("Generated",), hidden_size=4096, num_hidden_layers=n,
        num_attention_heads=max(c.total_num_kv_heads, 1), num_key_value_heads=c.total_num_kv_heads,
        head_dim=c.head_size, v_head_dim=c.head_size, vocab_size=32000, intermediate_size=11008,
        max_position_embeddings=1 << 20, dtype={2: "bfloat16", 4: "float32"}[c.mamba_dtype_bytes],
        tie_word_embeddings=False, attention="mla" if mla else "mha",
        layer_types=tuple(_KIND.get(k, state_kind) for k in c.layers), ffn_types=("dense",) * n,
        sliding_window=c.window if ("sliding" in c.layers or "chunked" in c.layers) else None,
        kv_lora_rank=c.kv_lora_rank if mla else None, qk_rope_head_dim=c.qk_rope_head_dim if mla else None,
        mamba=mamba,
    )


def cache_layout(c: KVCase):
    return kvc.CacheLayout(block_size=c.block_size, kv_dtype_bytes=c.dtype_bytes, cache_dtype=c.cache_dtype,
                           tp=c.tp, mamba_page_padded=c.mamba_page_size_padded,
                           mamba_block_size=c.mamba_block_size, num_speculative_tokens=c.num_speculative_blocks,
                           is_chunked_local="chunked" in c.layers)


def scheduler_view(c: KVCase):
    return kvc.SchedulerView(max_model_len=c.max_model_len, max_num_batched_tokens=c.max_num_batched_tokens,
                             in_flight_tokens=c.max_in_flight_tokens, mamba_cache_mode=c.mamba_cache_mode,
                             num_speculative_blocks=c.num_speculative_blocks)


def _message(exc) -> str:
    """The engine-text part of a KvscopeError (without kvscope's ``field: `` / `` (fix)``)."""
    text = str(exc)
    if exc.field and text.startswith(f"{exc.field}: "):
        text = text[len(exc.field) + 2:]
    if exc.fix and text.endswith(f" ({exc.fix})"):
        text = text[:-len(exc.fix) - 3]
    return text


def kvscope_side(c: KVCase, version: str) -> dict:
    traits = release.version_traits(version)
    specs = kvc.layer_specs(model_spec(c), cache_layout(c))
    for j, kind in enumerate(c.draft_layers):  # extra_layer_specs (memory.model_kv)
        page = kvc.attention_page_size_bytes(c.block_size, max(1, c.draft_kv_heads // c.tp), c.draft_head_size,
                                             c.dtype_bytes)
        specs[len(c.layers) + j] = kvc.KVCacheSpec(
            kvc.FULL_ATTN if kind == "full" else kvc.SLIDING_WINDOW, c.block_size, page,
            window=None if kind == "full" else c.window,
            geometry=(max(1, c.draft_kv_heads // c.tp), c.draft_head_size, c.dtype_bytes))
    out: dict = {"pages": {i: s.page_size_bytes for i, s in specs.items()}}
    try:
        groups, padding = kvc.get_kv_cache_groups(specs, traits)
    except errors.KvscopeError as exc:
        msg = _message(exc)
        out["error"] = "grouping: " + ("AssertionError" if "AssertionError" in msg else msg)
        return out
    out["groups"] = [(g.layer_ids, g.spec.kind, g.spec.block_size,
                      sum(g.per_layer_pages) if g.per_layer_pages else g.spec.page_size_bytes) for g in groups]
    plans = [kvc.make_plan(kvc.project_to_worker(groups, set(c.stage_layers(r))), padding)
             for r in range(len(c.pp_stages))]
    res = kvc.kv_cache_configs(plans, list(c.available), scheduler_view(c), traits,
                               num_gpu_blocks_override=c.num_gpu_blocks_override, cache_block_size=c.block_size,
                               auto_fit=c.auto_fit)
    out["error"] = res.error
    out["max_model_len"] = res.max_model_len
    if res.error == kvc.AUTO_FIT_ERROR:
        return out
    out["needed"] = list(res.needed_memory_bytes)
    out["estimated"] = list(res.estimated_max_model_lens)
    if res.error is None:
        out["num_blocks"] = res.num_blocks
        out["tokens"] = f"{res.kv_cache_tokens:,}"
        out["concurrency"] = f"{res.max_concurrency:.2f}"
    return out


# ---------------------------------------------------------------------------------------------
# engine side, normalised to the same vocabulary
# ---------------------------------------------------------------------------------------------

_ENGINE_KIND = {"FullAttentionSpec": "full", "MLAAttentionSpec": "mla", "SlidingWindowSpec": "sliding_window",
                "ChunkedLocalAttentionSpec": "chunked_local", "MambaSpec": "mamba"}


def _group_row(layers: Tuple[int, ...], spec: Any, mla: bool) -> Tuple[Any, ...]:
    """(layers, kind, block size, page) of an engine group; a UniformTypeKVCacheSpecs group is
    reported with its layers' kind and the summed page."""
    inner = spec
    if type(spec).__name__ == "UniformTypeKVCacheSpecs":
        inner = next(iter(spec.kv_cache_specs.values()))
    name = type(inner).__name__
    kind = "mla" if (name == "FullAttentionSpec" and mla) else _ENGINE_KIND[name]
    return (layers, kind, spec.block_size, spec.page_size_bytes)


def engine_side(c: KVCase, version: str) -> dict:
    e = kv_engine(version)
    r = e.plan(c)
    out: dict = {"pages": r.page_size_bytes}
    if r.error and r.error.startswith("AssertionError"):  # unify_kv_cache_spec_page_size's assert
        out["error"] = "grouping: AssertionError"
        return out
    if r.error and r.error.startswith("NotImplementedError"):
        # vLLM names the layer by module path, kvscope by decoder index
        msg = re.sub(r"Layer model\.layers\.(\d+)\.[\w.]+:", r"Layer \1:", r.error.partition(": ")[2])
        out["error"] = "grouping: " + msg
        return out
    if r.groups is not None:
        out["groups"] = [_group_row(layers, spec, c.attention == "mla") for layers, spec in r.groups]
    elif not r.error:
        out["groups"] = []
    out["error"] = r.error.split(": ", 1)[1] if r.error else None
    if r.error and "groups" not in out:
        # the check raised before/while planning: recompute the grouping alone for the comparison
        out["groups"] = _engine_groups(e, c)
    out["max_model_len"] = r.max_model_len
    if r.error and "Cannot auto-fit" in r.error:
        return out
    out["needed"] = r.needed_bytes
    out["estimated"] = r.estimated_max_len
    if not r.error:
        out["num_blocks"] = r.num_blocks
        out["tokens"] = r.tokens
        out["concurrency"] = r.concurrency
    return out


def _engine_groups(e, c: KVCase) -> Optional[List[Tuple[Any, ...]]]:
    specs = e.layer_specs(c)
    cfg = e.vllm_config(c)
    named = {c.layer_name(i): s for i, s in specs.items()}
    idx = {c.layer_name(i): i for i in specs}
    try:
        if e.v >= (0, 33):
            glob = e.planning.get_global_kv_cache_groups(cfg, [named])
        elif e.v >= (0, 11):
            glob = e.planning.get_kv_cache_groups(cfg, named)
        else:
            return None  # 0.10: grouping only inside get_kv_cache_config, after the check
    except (ValueError, NotImplementedError, AssertionError):
        return None
    return [_group_row(tuple(idx[n] for n in g.layer_names), g.kv_cache_spec, c.attention == "mla") for g in glob]


def diff(ours: dict, theirs: dict) -> List[str]:
    out = []
    for key in ("pages", "groups", "error", "max_model_len", "needed", "estimated", "num_blocks", "tokens",
                "concurrency"):
        if key not in theirs and key not in ours:
            continue
        a, b = ours.get(key), theirs.get(key)
        if key == "groups" and (a is None or b is None):
            continue
        if a != b:
            out.append(f"{key}: kvscope={a!r} engine={b!r}")
    return out


# ---------------------------------------------------------------------------------------------
# the test
# ---------------------------------------------------------------------------------------------

KNOWN: dict = {}


def _params():
    out = []
    for v in VLLM_ALL:
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[v])] if v in KNOWN else []
        if v not in VLLM_DEFAULT:
            marks.append(pytest.mark.conformance_full)
        out.append(pytest.param(v, marks=marks, id=v))
    return out


@pytest.mark.parametrize("version", _params())
def test_kv_cache_layout(version, multiplier):
    require_source("vllm", version, hybrid_members(version))
    n = N_CASES * multiplier
    bad = []
    for i, rng in enumerate(cases.rngs(seed=61, n=n)):
        c = gen_case(rng, version)
        theirs = engine_side(c, version)
        ours = kvscope_side(c, version)
        d = diff(ours, theirs)
        if d:
            bad.append((i, c, d))
    count_cases("vllm", version, "KV layout: page sizes, groups, num_blocks, tokens, concurrency, "
                "needed bytes, check + error text, estimated max len", n)
    assert not bad, (f"vllm {version}: {len(bad)}/{n} cases differ; first: "
                     + "\n".join(f"#{i} {c}\n   " + "\n   ".join(d) for i, c, d in bad[:3]))


# ---------------------------------------------------------------------------------------------
# hybrid attention + mamba block-size alignment
# ---------------------------------------------------------------------------------------------

N_HYBRID = 300


def gen_hybrid(rng: random.Random, version: str) -> KVCase:
    """A non-MLA attention + mamba case with the user's (or default) block size, unaligned."""
    while True:
        c = gen_case(rng, version)
        if c.mamba is not None and "full" in c.layers:
            break
    return replace(c, block_size=rng.choice([1, 16, 16, 16, 32, 64, 128, 256, rng.randint(1, 256)]),
                   mamba_page_size_padded=None, mamba_block_size=None)


def kvscope_hybrid(c: KVCase, version: str) -> Tuple[int, Optional[int], Optional[int]]:
    traits = release.version_traits(version)
    spec = model_spec(c)
    attn_1 = kvc.attention_page_size_bytes(1, kvc.num_kv_heads_per_rank(spec, c.tp), c.head_size, c.dtype_bytes)
    mamba_page = kvc.mamba_page_size_bytes(spec, c.tp, c.mamba_dtype_bytes, c.num_speculative_blocks)
    align, backend = kvc.hybrid_kernel_block_alignment(traits, c.block_size, is_mla=False)
    block = kvc.hybrid_attention_block_size(attn_1, mamba_page, c.block_size, align, backend)
    page = block * attn_1
    return block, (page if page != mamba_page else None), (block if c.mamba_cache_mode == "align" else None)


@pytest.mark.parametrize("version", _params())
def test_hybrid_block_alignment(version, multiplier):
    """``hybrid_kernel_block_alignment`` + ``hybrid_attention_block_size`` + the mamba padding vs
    ``HybridAttentionMambaModelConfig.verify_and_update_config`` (models/config.py, <= 0.19) /
    ``Platform._align_hybrid_block_size`` (platforms/interface.py, 0.20.2+) with FlashAttention's
    kernel blocks; mamba cache mode none/align (0.19+)."""
    require_source("vllm", version, hybrid_members(version))
    engine = kv_engine(version)
    n = N_HYBRID * multiplier
    bad = []
    for i, rng in enumerate(cases.rngs(seed=67, n=n)):
        c = gen_hybrid(rng, version)
        theirs = hybrid_alignment(engine, c)
        ours = kvscope_hybrid(c, version)
        if ours != (theirs.block_size, theirs.mamba_page_size_padded, theirs.mamba_block_size):
            bad.append((i, c, ours, theirs))
    count_cases("vllm", version, "hybrid attention/mamba block size + mamba page padding", n)
    assert not bad, (f"vllm {version}: {len(bad)}/{n} differ (block, padded page, mamba block); first: "
                     + "\n".join(f"#{i} {c}\n   kvscope={o} engine={t}" for i, c, o, t in bad[:3]))
