"""Use-case: ``plan`` over a grid of engine flags, one row per point, in bulk.

``sweep(model, gpu, grid={...}, engine="sglang" | "vllm", **flags)`` is what ``kvscope sweep``
writes: for every point of the grid (the cartesian product of its axes, the last varying fastest)
the KV tokens, the request limit, vLLM's max concurrency, the verdict and the engine's error --
exactly what ``kvscope.plan`` gives at that point (tests/sweep checks it on random grids).

What a point does not change is computed once: the model and GPU per sweep, the weights per
parallel layout, the settled flags and the cell per group (all axes but the fraction); the fraction
axis (SGLang ``mem_fraction_static``, vLLM ``gpu_memory_utilization``) then runs only the engine's
budget arithmetic per value (sweep/sglang.py, sweep/vllm.py).

>>> s = sweep("Qwen/Qwen3-8B", "h100-sxm", grid={"mem_fraction_static": "0.5:0.9:0.2", "tp": [1, 2]})
>>> s.columns
('mem_fraction_static', 'tp_size', 'tokens', 'max_running_requests', 'max_concurrency', 'verdict', 'error')
>>> [(r[0], r[1], r[2], r[5]) for r in s.rows]
[(0.5, 1, 175215, 'starts'), (0.5, 2, 447551, 'starts'), (0.7, 1, 289801, 'starts'), (0.7, 2, 671130, 'starts'), (0.9, 1, 404388, 'starts'), (0.9, 2, 894709, 'starts')]
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Literal, Mapping

from .._callable import make_callable
from ..errors import FlagError, KvscopeError
from .grid import FRACTION_AXIS, normalize, split_fraction
from .result import COLUMNS, Outcome, Sweep, fails, invalid, starts

__all__ = ["sweep", "Sweep", "COLUMNS", "point_outcome"]


def point_outcome(model: str, gpu: str | None, *, engine: str = "sglang", **kwargs: Any) -> Outcome:
    """``kvscope.plan`` at one point as a sweep row's figures (the reference the sweep equals)."""
    from ..plan import plan

    try:
        t = plan(model, gpu, engine=engine, **kwargs)  # type: ignore[arg-type]
    except KvscopeError as exc:
        return invalid(exc)
    return timeline_outcome(t)


def timeline_outcome(t: Any) -> Outcome:
    conc = getattr(t.extra, "max_concurrency", None) if t.engine == "vllm" else None
    if t.starts:
        return starts(t.kv_cache_tokens, t.max_running_requests, conc)
    return fails(t.error, t.kv_cache_tokens, t.max_running_requests, conc)


def sweep(model: str, gpu: str | None = None, *, grid: Mapping[str, Any] | Iterable[str],
          engine: Literal["sglang", "vllm"] = "sglang", engine_version: str | None = None,
          gpu_memory_mib: int | None = None, **flags: Any) -> Sweep:
    """``plan`` at every point of ``grid`` (axis -> values, a ``"0.5:0.95:0.01"`` / ``"8k,32k"`` string,
    or ``NAME=VALUES`` strings); ``flags`` are fixed engine flags, as for ``plan``."""
    from ..hardware.gpus import get_gpu
    from ..model.load import checkpoint_tensors_of, load_spec
    from ..plan import _serving_flags, _sglang, _vllm, reconcile_parallel_sizes

    if engine not in FRACTION_AXIS:
        raise FlagError(f"unknown engine {engine!r}", field="engine", fix="use 'sglang' or 'vllm'")
    axes = normalize(grid)
    served = sorted({n for n, _ in axes} & set(SERVING_FLAGS))
    if served:
        raise FlagError(f"{served[0]} changes the model: it is a fixed flag, not a grid axis", field=served[0],
                        fix=f"pass {served[0]}=VALUE as a flag (one sweep per value)")
    clash = sorted(set(flags) & {n for n, _ in axes})
    if clash:
        raise FlagError(f"{clash[0]} is both a fixed flag and a grid axis", field=clash[0], fix="give it once")
    _check_names(engine, [*flags, *(n for n, _ in axes)])
    spec, src = load_spec(model)
    spec, src = _serving_flags(spec, src, engine, engine_version, flags)  # as plan(): fixed for the sweep
    flags = {k: v for k, v in flags.items() if k not in SERVING_FLAGS}
    g = get_gpu(gpu, gpu_memory_mib)

    tensors = checkpoint_tensors_of(src) if engine == "vllm" else None  # exact vLLM weights (as plan())

    def plan_point(point: dict[str, Any]) -> Outcome:
        try:
            flags_ = reconcile_parallel_sizes(point)
            t = _vllm(spec, g, engine_version, flags_, tensors, check_fixes=False) if engine == "vllm" else \
                _sglang(spec, src, g, engine_version, flags_, check_fixes=False)  # a sweep reads no fixes
        except KvscopeError as exc:
            return invalid(exc)
        return timeline_outcome(t)

    if engine == "vllm":
        from .vllm import VllmSweep
        evaluator: Any = VllmSweep(spec, g, engine_version, plan_point, tensors)
    else:
        from .sglang import SGLangSweep
        evaluator = SGLangSweep(spec, src, g, engine_version, plan_point)
    name, fractions, others = split_fraction(axes, engine, flags)
    return Sweep(engine, engine_version, spec.name, g.key, axes,
                 _rows(axes, name, _groups(evaluator, flags, name, fractions, others)))


def _groups(evaluator: Any, flags: dict[str, Any], name: str, fractions: tuple[Any, ...], others) -> dict:
    """Each group (one value of every axis but the fraction, by index) -> its outcome per fraction."""
    names = [n for n, _ in others]
    base = {k: v for k, v in flags.items() if k != name}
    groups = {}
    for combo in itertools.product(*(range(len(v)) for _, v in others)):
        point = {**base, **{n: others[i][1][j] for i, (n, j) in enumerate(zip(names, combo))}}
        groups[combo] = evaluator.group(point, name, fractions)
    return groups


SERVING_FLAGS = ("quantization", "dtype")  # applied to the model (plan._serving_flags): fixed, not axes


def _check_names(engine: str, names: list[str]) -> None:
    """Every axis and fixed flag is one ``plan`` takes for the engine; ``--quantization`` / ``--dtype``
    change the model itself, so they are fixed flags, not axes."""
    import dataclasses

    from ..plan import SGLANG_MEASURED, VLLM_MEASURED

    parallel = ("tp_size", "pp_size", "dp_size", "tensor_parallel_size", "pipeline_parallel_size",
                "data_parallel_size")
    if engine == "vllm":
        from ..engines.vllm.args import _LIBRARY_ONLY, OPTIONS
        known = {*OPTIONS, *_LIBRARY_ONLY, *VLLM_MEASURED}
    else:
        from ..engines.sglang.args import SGLangArgs
        known = {f.name for f in dataclasses.fields(SGLangArgs)} | set(SGLANG_MEASURED)
    known |= {*parallel, *SERVING_FLAGS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FlagError(f"not a{'' if engine == 'vllm' else 'n'} {'vLLM' if engine == 'vllm' else 'SGLang'} flag "
                        f"kvscope models: {unknown[0]}", field=unknown[0],
                        fix=f"use the engine's flag names in Python spelling: {', '.join(sorted(known))}")


def _rows(axes, name: str, groups) -> tuple[tuple[Any, ...], ...]:
    """Rows in grid order (the last axis fastest): each point's values, then its outcome."""
    values = [v for _, v in axes]
    frac = next((k for k, (n, _) in enumerate(axes) if n == name), None)
    if frac is None:
        keys = itertools.product(*(range(len(v)) for v in values))
        return tuple((*vals, *groups[key][0]) for vals, key in zip(itertools.product(*values), keys))
    before = [range(len(v)) for v in values[:frac]]
    after = [range(len(v)) for v in values[frac + 1:]]
    n = len(values[frac])
    order = ((key_b + key_a, i) for key_b in itertools.product(*before) for i in range(n)
             for key_a in itertools.product(*after))
    return tuple((*vals, *groups[key][i]) for vals, (key, i) in zip(itertools.product(*values), order))


make_callable(__name__, sweep)  # kvscope.sweep(...) is sweep(...)
