"""SGLang sweep: one group (every flag but ``--mem-fraction-static``) set up once, its fractions in bulk.

A group runs ``plan_sglang``'s stages up to the cell once (the release checks, ``validate``,
``settle``, ``weights`` -- cached over groups on what they read --, ``cell``); each fraction then
runs only what the fraction changes, with the engine functions themselves
(``memory.value_error_text``, ``pools.apply_token_constraints``, ``pools.max_num_reqs``,
``pools.runtime_error_text``, ``plan._buffers``, ``plan._memory_pool_error``,
``plan._graph_capture_error``):

    rest = available - pre x (1 - mfs x factor) [- mm]   (memory.profile)
    T = min over PP stages of int(rest x 2^30) // cell   (profile_stages)
    tokens = page-rounded, --max-total-tokens-capped T; requests = max_num_reqs(T)   (pools.request_pools)
    free after the KV buffers and req_to_token -> the memory-pool and CUDA-graph checks   (graph_stage)

Groups whose pool has a configurator of its own (hybrid SWA, mamba state carve, DeepSeek-V4) or a
classic speculative headroom run ``profile_stages`` + ``pool_stage`` + ``graph_stage`` per fraction;
fractions that SGLang refuses (not in (0, 1)) run the whole ``plan``. tests/sweep checks every
point against plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from ..engines.sglang import plan as sp
from ..engines.sglang.memory import value_error_text
from ..engines.sglang.pools import (apply_token_constraints, max_num_reqs, req_to_token_bytes,
                                    req_to_token_extra_context_len, round_to_page, runtime_error_text)
from ..engines.sglang.release import check_modelled, release
from ..errors import KvscopeError
from ..model.load import exact_weights_per_rank_fn, load_spec
from ..plan import reconcile_parallel_sizes, sglang_inputs
from .result import Outcome, fails, invalid, starts

GIB = 1 << 30


def valid_fraction(f: Any) -> bool:
    """What ``engines.sglang.plan.validate`` accepts (None: the engine's default)."""
    return f is None or (isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < 1)


class SGLangSweep:
    """Evaluates groups for one model, GPU and release; caches what groups share."""

    def __init__(self, spec, src, gpu, version: str | None, plan_point: Callable[[dict[str, Any]], Outcome]):
        self.spec, self.src, self.gpu, self.version = spec, src, gpu, version
        self.plan_point = plan_point  # the whole plan at one point (exact fallback)
        self._weights: dict[tuple, Any] = {}
        self._cells: dict[tuple, Any] = {}
        self._drafts: dict[str, Any] = {}
        self._exact_fn: Any = ...
        self._rel = None

    # -- group set-up (what no fraction changes) -------------------------------------------------

    def _draft(self, path: str | None):
        if not path:
            return None
        if path not in self._drafts:
            self._drafts[path] = load_spec(path)[0]
        return self._drafts[path]

    def _exact(self, tp: int) -> int | None:
        if self._exact_fn is ...:
            self._exact_fn = exact_weights_per_rank_fn(self.src, self.spec)
        return self._exact_fn(tp) if self._exact_fn is not None else None

    def _release(self):
        """``plan_sglang``'s first steps: the modelled-release check, then the release's traits."""
        if self._rel is None:
            check_modelled(self.version)
            self._rel = release(self.version)
        return self._rel

    def _setup(self, flags: dict[str, Any]):
        """``kvscope.plan`` -> ``plan_sglang`` up to the cell, with the weights and cells cached on
        the inputs those stages read."""
        spec, gpu = self.spec, self.gpu
        a, measured = sglang_inputs(reconcile_parallel_sizes(flags))
        draft = self._draft(a.speculative_draft_model_path)
        exact = self._exact(a.tp_size)
        rel = self._release()
        sp.validate(spec, a)
        s = sp.settle(spec, gpu, a, rel)
        algo = (a.speculative_algorithm or "").upper()
        wkey = (a.tp_size, a.pp_size, a.attn_tp_size, algo, a.speculative_draft_model_path, measured,
                rel.version, exact)
        loaded = self._weights.get(wkey)
        if loaded is None:
            loaded = self._weights[wkey] = sp.weights(spec, gpu, s, rel, measured, draft, exact)
        ckey = (replace(a, context_length=None, mem_fraction_static=None), s.backend.name, s.kv_bytes, rel.version)
        cells = self._cells.get(ckey)
        if cells is None:
            cells = self._cells[ckey] = sp.cell(spec, gpu, s, rel, draft)
        return a, rel, s, loaded, cells

    # -- one group ---------------------------------------------------------------------------------

    def group(self, flags: dict[str, Any], name: str, fractions: Sequence[Any]) -> list[Outcome]:
        rep = next((f for f in fractions if valid_fraction(f)), ...)
        if rep is ...:
            return [self.plan_point({**flags, name: f}) for f in fractions]
        try:
            a, rel, s, loaded, cells = self._setup({**flags, name: rep})
        except KvscopeError as exc:  # the same for every fraction plan accepts
            err = invalid(exc)
            return [err if valid_fraction(f) else self.plan_point({**flags, name: f}) for f in fractions]
        spec = self.spec
        bulk = (cells.mamba_per_req == 0 and not cells.swa_pool and spec.dsv4 is None
                and not (a.speculative_algorithm and not rel.reqs_from_final_tokens))
        out: list[Outcome | None] = [None] * len(fractions)
        todo: list[tuple[int, float]] = []  # (position, effective fraction) for the bulk loop
        default = None
        for i, f in enumerate(fractions):
            if not valid_fraction(f):
                out[i] = self.plan_point({**flags, name: f})
                continue
            if f is None:
                if default is None:
                    default = sp.settle(spec, self.gpu, replace(a, mem_fraction_static=None), rel)
                s_f = default
            else:
                s_f = None
            if bulk:
                todo.append((i, s_f.mem_fraction_static if s_f is not None else f * s.fraction_factor))
            else:
                s_f = s_f or sp.settle(spec, self.gpu, replace(a, mem_fraction_static=f), rel)
                out[i] = self._staged_point(rel, s_f, loaded, cells)
        if todo:
            for (i, _), o in zip(todo, _Bulk(self, a, rel, s, loaded, cells).points([m for _, m in todo])):
                out[i] = o
        return out  # type: ignore[return-value]

    def _staged_point(self, rel, s, loaded, cells) -> Outcome:
        """The stages of ``plan_sglang`` the fraction reaches, the engine's own functions, and its
        verdict: the weights' out-of-memory first, then the pools', the memory pool's, the graphs'."""
        spec = self.spec
        prof = sp.profile_stages(spec, s, rel, loaded, cells)
        pools = sp.pool_stage(spec, s, rel, cells, prof)
        graphs = sp.graph_stage(spec, s, rel, prof, pools, loaded)
        error = (loaded.load_oom or pools.error or sp._memory_pool_error(self.gpu, s, graphs, pools)
                 or sp._graph_capture_error(self.gpu, rel, graphs, pools))
        sized = pools.starts and loaded.load_oom is None
        return Outcome(pools.tokens if sized else 0, pools.running if sized else None, None,
                       "starts" if error is None else "fails", error)


class _Bulk:
    """A group with one plain token pool: what a fraction changes, in the engine's order
    (``memory.profile`` on every stage, ``pools.request_pools``, ``_buffers``, the graph check)."""

    def __init__(self, sweep: SGLangSweep, a, rel, s, loaded, cells):
        spec = sweep.spec
        self.gpu, self.a, self.rel, self.s, self.loaded, self.cells = sweep.gpu, a, rel, s, loaded, cells
        self.spec = spec
        self.prof = prof = sp.profile_stages(spec, s, rel, loaded, cells)  # its fraction-free inputs
        pools = sp.pool_stage(spec, s, rel, cells, prof)
        self.graph_bytes = sp.graph_stage(spec, s, rel, prof, pools, loaded).graph_bytes
        self.extra = req_to_token_extra_context_len(
            rel, speculative_algorithm=a.speculative_algorithm, num_draft_tokens=a.speculative_num_draft_tokens,
            num_steps=a.speculative_num_steps, topk=a.speculative_eagle_topk, page_size=s.page_size)
        self.post_min = min(loaded.post)
        self.cell_bytes = [c.cell_bytes for c in cells.stages]

    def points(self, fractions: Sequence[float]) -> list[Outcome]:
        """The outcome at each effective fraction (the loop binds every fraction-free figure once)."""
        loaded, rel, s, prof, a, gpu = self.loaded, self.rel, self.s, self.prof, self.a, self.gpu
        if loaded.load_oom is not None:  # fail_stage: the start died loading its weights
            return [fails(loaded.load_oom)] * len(fractions)
        pre, avail, mm = prof.pre_gib, prof.avail_gib, prof.mm_gib
        value_error, final = rel.no_kv_value_error, rel.reqs_from_final_tokens
        page, cap, ctx, running_flag, dp = s.page_size, a.max_total_tokens, s.context_len, a.max_running_requests, \
            a.attn_dp_size
        cells, graph_bytes, extra, post_min = self.cell_bytes, self.graph_bytes, self.extra, self.post_min
        classic_weights = None if rel.draft_in_budget else loaded.draft_weights
        spec, all_cells = self.spec, self.cells
        out: list[Outcome] = []
        append = out.append
        for mfs in fractions:
            rest = avail - pre * (1 - mfs) - mm  # memory.profile
            if value_error and rest <= 0:
                append(fails(value_error_text(mfs, avail, pre)))
                continue
            rest_bytes = int(rest * GIB)
            profiled = min([rest_bytes // c if c else 0 for c in cells])  # min over PP stages
            tokens, _ = apply_token_constraints(round_to_page(profiled, page) if final else profiled, page, cap)
            if tokens <= 0:
                append(fails(runtime_error_text(rel, mfs)))
                continue
            pool, running = max_num_reqs(rel, token_capacity=tokens, profiled_tokens=profiled, context_len=ctx,
                                         max_running_requests=running_flag, attn_dp_size=dp)
            # graph_stage's free memory after the pools, then plan_sglang's checks on it
            kv_alloc, kv_reserved, draft_kv, mamba_bytes = sp._buffers(spec, s, rel, all_cells, prof, tokens, None)
            classic = 0 if classic_weights is None else classic_weights + draft_kv
            r2t = req_to_token_bytes(rel, pool, ctx, extra_context_len=extra)
            free = post_min - kv_reserved - draft_kv - mamba_bytes - classic - r2t
            if free < graph_bytes or free + classic < 0:  # _memory_pool_error / _graph_capture_error may raise
                pools = sp.Pools(error=None, tokens=tokens, swa_tokens=None, profiled=profiled, req_pool_size=pool,
                                 running=running, req_to_token_bytes=r2t, kv_alloc=kv_alloc, kv_reserved=kv_reserved,
                                 draft_kv=draft_kv, mamba_bytes=mamba_bytes, warnings=())
                graphs = sp.Graphs(graph_bytes=graph_bytes, activation_bytes=0, classic_draft_bytes=classic,
                                   headroom_bytes=0, free_before_bytes=free)
                error = sp._memory_pool_error(gpu, s, graphs, pools) or sp._graph_capture_error(gpu, rel, graphs, pools)
                if error is not None:  # the pools were sized: plan reports them with the error
                    append(fails(error, tokens, running))
                    continue
            append(Outcome(tokens, running, None, "starts", None))
        return out


