"""Typical accept lengths per draft kind, from published measurements (used when none is given).

Each kind has a per-token acceptance ``a`` (central, low, high) chosen so that the chain formula
``E[tau] = (1 - a^(k+1)) / (1 - a)`` (Leviathan et al. 2023) spans the published points listed with
it; ``k`` is the number of draft tokens per step. The estimate built from it is labelled
**assumed**: acceptance depends on the model pair, the prompts and the temperature (Kimi-K3 EAGLE-3:
1.94 tokens/step on chat vs 3.93 on a repetitive loop, lightseekorg/tokenspeed#1305), so a measured
``--accept-length`` (SGLang logs ``accept len``, vLLM ``Mean acceptance length``) always wins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass



def chain_accept_length(rate: float, draft_tokens: int) -> float:
    """Leviathan et al. 2023: ``(1 - a^(k+1)) / (1 - a)`` tokens per verify, bonus token included."""
    if rate >= 1.0:
        return float(draft_tokens + 1)
    return (1.0 - rate ** (draft_tokens + 1)) / (1.0 - rate)


@dataclass(frozen=True)
class PublishedPoint:
    draft_tokens: int  # k (speculative tokens per step)
    accept_length: float  # mean tokens per step, bonus token included
    setting: str
    source: str


@dataclass(frozen=True)
class AcceptDefault:
    kind: str  # EAGLE | EAGLE3 | NEXTN (MTP) | NGRAM
    rate: float  # per-token acceptance, central
    rate_lo: float
    rate_hi: float
    points: tuple[PublishedPoint, ...]

    def accept_length(self, draft_tokens: int, which: str = "value") -> float:
        a = {"value": self.rate, "lo": self.rate_lo, "hi": self.rate_hi}[which]
        return chain_accept_length(a, draft_tokens)

    def to_dict(self) -> dict:
        return asdict(self)


ACCEPT_DEFAULTS: dict[str, AcceptDefault] = {
    "EAGLE": AcceptDefault("EAGLE", 0.55, 0.50, 0.62, (
        PublishedPoint(2, 1.89, "EAGLE-1 head for Llama-3.1-8B-Instruct, MT-bench, vLLM V1, batch 1",
                       "https://github.com/vllm-project/vllm/pull/16035"),
        PublishedPoint(4, 2.08, "same, 4 speculative tokens", "https://github.com/vllm-project/vllm/pull/16035"),
    )),
    "EAGLE3": AcceptDefault("EAGLE3", 0.62, 0.47, 0.76, (
        PublishedPoint(5, 2.45, "EAGLE-3 for MiniCPM3, RTX 4090, vLLM, 1-10 concurrent (2.44-2.47)",
                       "https://github.com/vllm-project/vllm/pull/24243"),
        PublishedPoint(4, 3.07, "Kimi K2.5 + AQ-MedAI eagle3, vLLM, GSM8K: draft acceptance 51.78 % of 4",
                       "https://github.com/vllm-project/vllm/pull/35966"),
        PublishedPoint(7, 2.88, "RedHat EAGLE-3 for Llama-3.3-70B, MT-bench, temperature 1",
                       "nebius/EAGLE3-Llama-3.3-70B-Instruct model card (shared/specs/perf.md §4.3)"),
        PublishedPoint(3, 1.94, "Kimi-K3 EAGLE-3, topk 1, 3 steps, chat output",
                       "https://github.com/lightseekorg/tokenspeed/issues/1305"),
    )),
    "NEXTN": AcceptDefault("NEXTN", 0.75, 0.65, 0.90, (
        PublishedPoint(1, 1.9, "DeepSeek-V3 MTP (NextN) module, SGLang, ~1.9 for 2 draft tokens",
                       "https://github.com/sgl-project/sglang/pull/3582"),
        PublishedPoint(3, 2.59, "GLM-5.1 MTP, vLLM, per-position 0.785/0.527/0.277",
                       "local-inference-lab/rtx6kpro models/glm5.1 benchmarks (shared/specs/perf.md §4.1)"),
        PublishedPoint(3, 3.03, "Qwen3.5-397B MTP, vLLM, per-position 0.85/0.67/0.51",
                       "local-inference-lab/rtx6kpro optimization/speculative-decoding.md (shared/specs/perf.md §4.3)"),
    )),
    "NGRAM": AcceptDefault("NGRAM", 0.60, 0.50, 0.78, (
        PublishedPoint(3, 2.16, "n-gram prompt lookup, Qwen3-32B-FP8, vLLM 0.9.0.1, first window",
                       "https://github.com/vllm-project/vllm/issues/19254"),
        PublishedPoint(3, 2.46, "same run, second window", "https://github.com/vllm-project/vllm/issues/19254"),
        PublishedPoint(3, 2.83, "same run, third window", "https://github.com/vllm-project/vllm/issues/19254"),
    )),
}


def default_accept_length(algorithm: str, draft_tokens: int) -> tuple[float, float, float, str]:
    """(central, low, high, source text) of the assumed accept length for ``draft_tokens`` per step."""
    d = ACCEPT_DEFAULTS[algorithm]
    pts = "; ".join(f"{p.accept_length} at k={p.draft_tokens} ({p.setting}, {p.source})" for p in d.points)
    text = (f"assumed: typical {algorithm} per-token acceptance {d.rate} (range {d.rate_lo}-{d.rate_hi}) "
            f"-> {d.accept_length(draft_tokens):.2f} tokens/step at k={draft_tokens}; published: {pts}. "
            "Pass --accept-length with your measured value")
    return d.accept_length(draft_tokens), d.accept_length(draft_tokens, "lo"), d.accept_length(draft_tokens, "hi"), text
