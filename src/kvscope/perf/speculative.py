"""Speculative decoding (EAGLE / EAGLE-3 / NEXTN): expected accepted tokens, draft and verify cost.

``tok/s_spec = B * E[tau] / (T_draft + T_verify(k) + T_spec_overhead)``   (shared/specs/perf.md §4.2)

The verify pass is a target forward over ``k = num_draft_tokens`` tokens per sequence: for a sparse
MoE it touches more experts (``E(1-(1-k_top/E)^(B*k))``), and its all-reduces carry k x the payload.
Leviathan et al. 2023 (arXiv 2211.17192): ``E[tau] = (1 - a^(g+1)) / (1 - a)`` for per-token
acceptance ``a`` and ``g`` draft steps (chain drafts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

from ..errors import FlagError
from ..model.spec import ModelSpec
from .accept import chain_accept_length, default_accept_length
from .allreduce import Fabric, allreduce
from .decode import DecodeStep, Hardware, StepSettings, decode_step
from .traffic import KVTraffic, WeightTraffic

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM")
ALIASES = {"MTP": "NEXTN", "EAGLE-3": "EAGLE3", "N-GRAM": "NGRAM", "NGRAM": "NGRAM"}
# EAGLE-3 drafts trained with SpecForge use a 32,000-token draft vocabulary (configs in the catalog:
# sgl-project--SpecForge-*-eagle3 ``draft_vocab_size``).
DEFAULT_DRAFT_VOCAB = 32000


@dataclass(frozen=True)
class SpecConfig:
    """SGLang's ``--speculative-*`` flags, resolved (``server_args.py``: chain drafts have
    ``num_draft_tokens = num_steps + 1`` when ``eagle_topk == 1``)."""

    algorithm: str
    num_steps: int  # draft forwards per step (gamma)
    eagle_topk: int
    num_draft_tokens: int  # tokens verified per sequence (k)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_spec_config(algorithm: str, num_steps: int | None, eagle_topk: int | None,
                        num_draft_tokens: int | None) -> SpecConfig:
    algo = ALIASES.get(algorithm.upper(), algorithm.upper().replace("-", ""))
    if algo not in ALGORITHMS:
        raise FlagError(f"unknown speculative algorithm {algorithm!r}", field="--speculative-algorithm",
                        fix=f"use one of {', '.join(ALGORITHMS)}")
    topk = eagle_topk or 1
    if num_steps is None and num_draft_tokens is None:
        num_steps = 3
    if num_steps is None:
        num_steps = max(1, num_draft_tokens - 1) if topk == 1 else 3
    if num_draft_tokens is None:
        num_draft_tokens = num_steps + 1 if topk == 1 else num_steps * topk + 1
    if topk == 1 and num_draft_tokens != num_steps + 1:
        # SGLang resets it for chain drafts (server_args.py: "speculative_num_draft_tokens is adjusted")
        num_draft_tokens = num_steps + 1
    if num_steps < 1 or num_draft_tokens < 2:
        raise FlagError("speculative decoding needs at least one draft step and two draft tokens",
                        field="--speculative-num-steps", fix="e.g. --speculative-num-steps 3")
    return SpecConfig(algo, num_steps, topk, num_draft_tokens)


def expected_accept_length(accept_rate: float, num_steps: int) -> float:
    """Leviathan et al.: ``(1 - a^(g+1)) / (1 - a)`` tokens per verify, bonus token included.
    a = 0.6, g = 3 -> 2.176."""
    if not 0.0 <= accept_rate <= 1.0:
        raise FlagError(f"--accept-rate must be within [0, 1], got {accept_rate}", field="--accept-rate",
                        fix="per-token acceptance probability, e.g. 0.6")
    return chain_accept_length(accept_rate, num_steps)


@dataclass(frozen=True)
class DraftHead:
    """An EAGLE-3 draft head: one Llama decoder layer whose q/k/v read ``[embed; hidden]`` (2h),
    ``fc`` (3h -> h) over the target's three aux hidden states, and an lm_head over the draft vocab
    (sglang ``models/llama_eagle3.py``). The embedding is the target's."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    draft_vocab_size: int
    num_layers: int
    dtype_bytes: int
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def eagle3_head(target: ModelSpec, draft_config: Mapping[str, Any] | None = None, name: str | None = None) -> DraftHead:
    if draft_config:
        h = int(draft_config.get("hidden_size", target.hidden_size))
        heads = int(draft_config.get("num_attention_heads", target.num_attention_heads))
        return DraftHead(
            hidden_size=h, num_attention_heads=heads,
            num_key_value_heads=int(draft_config.get("num_key_value_heads") or heads),
            head_dim=int(draft_config.get("head_dim") or h // heads),
            intermediate_size=int(draft_config.get("intermediate_size", target.intermediate_size)),
            draft_vocab_size=int(draft_config.get("draft_vocab_size") or draft_config.get("vocab_size")
                                 or DEFAULT_DRAFT_VOCAB),
            num_layers=int(draft_config.get("num_hidden_layers", 1)), dtype_bytes=2,
            source=f"draft config {name or ''}".strip())
    heads = target.num_attention_heads
    kv = heads if target.is_mla else target.num_key_value_heads
    return DraftHead(hidden_size=target.hidden_size, num_attention_heads=heads, num_key_value_heads=kv,
                     head_dim=128 if target.is_mla else target.head_dim,
                     intermediate_size=target.intermediate_size, draft_vocab_size=DEFAULT_DRAFT_VOCAB,
                     num_layers=1, dtype_bytes=2,
                     source="[E] EAGLE-3 head shaped like SpecForge templates: 1 layer at the target's hidden "
                            "size and heads, dense MLP of intermediate_size, 32,000-token draft vocab")


@dataclass(frozen=True)
class DraftTraffic:
    layer_bytes: int  # decoder layer(s) + lm_head, this rank's share, read by every draft forward
    fc_bytes: int  # fc (3h -> h), nn.Linear replicated on every rank, read by the draft-extend forward
    kv_bytes_per_token: int  # draft layer KV per context token, this rank
    num_allreduces: int  # per draft forward: 2 per layer + 1 (vocab-parallel embedding)
    hidden_size: int


def draft_traffic(head: DraftHead, tp: int) -> DraftTraffic:
    h, e = head.hidden_size, head.dtype_bytes
    q = head.num_attention_heads * head.head_dim
    kv_rank = max(1, head.num_key_value_heads // tp)
    attn = (q * 2 * h + h * q) // tp + 2 * kv_rank * head.head_dim * 2 * h  # q, o sharded; k, v by KV head
    mlp = 3 * h * head.intermediate_size // tp
    lm_head = -(-head.draft_vocab_size // tp) * h
    per_layer = (attn + mlp) * e
    return DraftTraffic(layer_bytes=head.num_layers * per_layer + lm_head * e, fc_bytes=3 * h * h * e,
                        kv_bytes_per_token=head.num_layers * 2 * kv_rank * head.head_dim * e,
                        num_allreduces=(2 * head.num_layers + 1) if tp > 1 else 0, hidden_size=h)


def nextn_traffic(w: WeightTraffic, spec: ModelSpec, tp: int, kv: KVTraffic) -> DraftTraffic:
    """NEXTN/MTP: one more target-shaped layer (average layer of the target, with k_top experts) [E]."""
    layers = max(1, spec.num_hidden_layers)
    per_layer = (w.attn_bytes + w.dense_mlp_bytes) // layers
    experts = w.num_experts_per_tok * w.expert_bytes_per_expert
    eh_proj = 2 * spec.hidden_size * spec.hidden_size * spec.dtype_bytes  # replicated [E]
    return DraftTraffic(layer_bytes=per_layer + experts + w.other_bytes // layers, fc_bytes=eh_proj,
                        kv_bytes_per_token=kv.full_layer_bytes_per_token // layers,
                        num_allreduces=3 if tp > 1 else 0, hidden_size=spec.hidden_size)


@dataclass(frozen=True)
class SpeculativeEstimate:
    config: SpecConfig
    accepted_tokens_per_step: float  # E[tau], bonus token included
    accepted_tokens_source: str
    draft_forwards: int
    draft_time_s: float
    draft_allreduce_time_s: float
    verify: DecodeStep
    verify_time_s: float
    verify_allreduce_time_s: float
    spec_overhead_s: float
    step_time_s: float
    decode_tokens_per_s: float  # aggregate
    per_stream_tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float
    break_even_accept_length: float  # E[tau] at which speculation only matches the baseline
    allreduce_share: float  # fraction of the step spent in all-reduces (draft + verify)
    counterfactual_tokens_per_s: float | None  # verify all-reduces at the baseline's per-all-reduce cost
    counterfactual_speedup: float | None
    verdict: str
    accept_length_assumed: bool = False  # True: the typical published value for the draft kind (perf/accept.py)
    accept_length_range: tuple[float, float] | None = None  # (low, high) when assumed
    speedup_range: tuple[float, float] | None = None  # at the accept-length range, same costs
    estimated: bool = True

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verify"] = self.verify.to_dict()
        d["config"] = self.config.to_dict()
        return d


def draft_time(d: DraftTraffic, hw: Hardware, fabric: Fabric, settings: StepSettings, *, batch: int,
               context_tokens: int, cfg: SpecConfig) -> tuple[float, float]:
    """(total, all-reduce part) of the draft forwards of one step: ``num_steps - 1`` draft forwards of
    ``batch * topk`` tokens plus one draft-extend over the ``k`` verified tokens that also runs ``fc``
    (sglang ``speculative/eagle_worker.py``: the extend yields the first draft step) [E]."""
    p = settings.params
    eff = p.bandwidth_efficiency if p is not None else settings.bandwidth_efficiency
    bw = eff * hw.mem_bandwidth_gbps * 1e9
    kv = batch * context_tokens * d.kv_bytes_per_token
    plain = (d.layer_bytes + kv) / bw
    extend = (d.layer_bytes + d.fc_bytes + kv) / bw
    if d.layer_bytes == 0:  # n-gram lookup: no draft model on the GPU
        return 0.0, 0.0
    if p is not None:  # a one-layer forward still has its kernel-latency floor
        plain = max(plain, p.draft_forward_floor_us * 1e-6)
        extend = max(extend, p.draft_forward_floor_us * 1e-6)
    ar_step = allreduce(fabric, d.hidden_size * batch * cfg.eagle_topk * 2, settings.communicator,
                        settings.allreduce_latency_us).latency_us * 1e-6 * d.num_allreduces
    ar_ext = allreduce(fabric, d.hidden_size * batch * cfg.num_draft_tokens * 2, settings.communicator,
                       settings.allreduce_latency_us).latency_us * 1e-6 * d.num_allreduces
    n_plain = cfg.num_steps - 1
    total = n_plain * (plain + ar_step) + extend + ar_ext
    return total, n_plain * ar_step + ar_ext


def speculative(spec: ModelSpec, w: WeightTraffic, kv: KVTraffic, hw: Hardware, fabric: Fabric,
                settings: StepSettings, cfg: SpecConfig, draft: DraftTraffic, baseline: DecodeStep, *,
                batch: int, accept_length: float | None = None, accept_rate: float | None = None,
                verify_allreduce_latency_us: float | None = None, spec_overhead_s: float = 0.0
                ) -> SpeculativeEstimate:
    tau_range = None
    if accept_length is not None:
        if not 1.0 <= accept_length <= cfg.num_steps + 1:
            raise FlagError(f"--accept-length {accept_length} is outside [1, num_steps + 1 = {cfg.num_steps + 1}]",
                            field="--accept-length", fix="mean tokens accepted per verify, bonus token included")
        tau, tau_src = accept_length, "given (--accept-length, measured)"
    elif accept_rate is not None:
        tau = expected_accept_length(accept_rate, cfg.num_steps)
        tau_src = f"[E] (1 - a^(g+1)) / (1 - a) with a = {accept_rate}, g = {cfg.num_steps} (Leviathan et al. 2023)"
    else:
        draft_k = cfg.num_steps if cfg.eagle_topk == 1 else cfg.num_draft_tokens - 1
        tau, lo, hi, tau_src = default_accept_length(cfg.algorithm, draft_k)
        tau_range = (lo, hi)
    if spec_overhead_s == 0.0 and settings.params is not None:
        spec_overhead_s = settings.params.spec_step_overhead_ms * 1e-3
    d_total, d_ar = draft_time(draft, hw, fabric, settings, batch=batch, context_tokens=kv.context_tokens, cfg=cfg)
    verify_settings = settings
    if verify_allreduce_latency_us is not None:
        verify_settings = replace(settings, allreduce_latency_us=verify_allreduce_latency_us)
    verify = decode_step(spec, w, kv, hw, fabric, verify_settings, batch=batch, tokens_per_seq=cfg.num_draft_tokens)
    step = d_total + verify.step_time_s + spec_overhead_s
    tok_s = batch * tau / step
    speedup = tok_s / baseline.decode_tokens_per_s
    cf_tok = cf_speedup = None
    if fabric.world_size > 1 and verify.allreduce.latency_us > baseline.allreduce.latency_us:
        cf_step = step - verify.allreduce_time_s + verify.allreduce_count * baseline.allreduce.latency_us * 1e-6
        cf_tok = batch * tau / cf_step
        cf_speedup = cf_tok / baseline.decode_tokens_per_s
    est = SpeculativeEstimate(
        config=cfg, accepted_tokens_per_step=tau, accepted_tokens_source=tau_src, draft_forwards=cfg.num_steps,
        draft_time_s=d_total, draft_allreduce_time_s=d_ar, verify=verify, verify_time_s=verify.step_time_s,
        verify_allreduce_time_s=verify.allreduce_time_s, spec_overhead_s=spec_overhead_s, step_time_s=step,
        decode_tokens_per_s=tok_s, per_stream_tokens_per_s=tau / step,
        baseline_tokens_per_s=baseline.decode_tokens_per_s, speedup=speedup,
        break_even_accept_length=step / baseline.step_time_s,
        allreduce_share=(d_ar + verify.allreduce_time_s) / step,
        counterfactual_tokens_per_s=cf_tok, counterfactual_speedup=cf_speedup, verdict="",
        accept_length_assumed=tau_range is not None, accept_length_range=tau_range,
        speedup_range=(tuple(batch * t / step / baseline.decode_tokens_per_s for t in tau_range)
                       if tau_range else None))
    return replace(est, verdict=verdict(est, baseline))


def verdict(s: SpeculativeEstimate, base: DecodeStep) -> str:
    cfg = s.config
    v = s.verify
    word = "faster" if s.speedup >= 1.0 else "slower"
    assumed = " (assumed accept length)" if s.accept_length_assumed else ""
    text = (f"{cfg.algorithm} is {s.speedup:.2f}x ({word}){assumed}: {s.accepted_tokens_per_step:.2f} tokens per step "
            f"cost {s.step_time_s * 1e3:.1f} ms, against {base.step_time_s * 1e3:.1f} ms per token without "
            f"speculation, so it breaks even at an accept length of {s.break_even_accept_length:.2f}.")
    if v.allreduce_count:
        text += (f" The verify pass of {cfg.num_draft_tokens} tokens runs {v.allreduce_count} all-reduces of "
                 f"{v.allreduce.payload_bytes // 1024} KiB at {v.allreduce.latency_us:.0f} us each "
                 f"({v.allreduce_time_s * 1e3:.1f} ms; {base.allreduce.latency_us:.0f} us each in plain decode); "
                 f"all-reduces are {s.allreduce_share:.0%} of the step.")
    if v.experts_touched_per_layer > base.experts_touched_per_layer + 0.5:
        text += (f" It touches {v.experts_touched_per_layer:.1f} experts per MoE layer instead of "
                 f"{base.experts_touched_per_layer:.1f}, so it reads "
                 f"{v.weight_bytes_per_gpu_per_step / 1e9:.2f} GB per GPU instead of "
                 f"{base.weight_bytes_per_gpu_per_step / 1e9:.2f} GB.")
    if s.counterfactual_tokens_per_s is not None:
        text += (f" With verify all-reduces at the plain-decode cost ({base.allreduce.latency_us:.0f} us) it "
                 f"would give {s.counterfactual_tokens_per_s:.1f} tok/s ({s.counterfactual_speedup:.2f}x)")
        if s.speedup < 1.0 <= s.counterfactual_speedup:
            text += ": the loss is in the verify pass's communication, not in the draft."
        else:
            text += "."
    return text
