"""kvscope: predict, explain and measure how LLM serving engines size GPU memory at startup.

The library is the product (docs/api.md): ``kvscope.plan(model, gpu, engine=..., **flags)``,
``kvscope.fit(model, gpu, context=..., concurrency=...)``, ``kvscope.doctor(path)`` and
``kvscope.sweep(model, gpu, grid=...)`` return the objects the CLI renders.

Each is imported on first use (PEP 562 ``__getattr__``), so ``import kvscope`` and the CLI's start
cost only what the chosen call needs (docs/performance.md); each module is also its own call
(_callable.py).
"""

__version__ = "0.1.0"

_API = ("plan", "fit", "doctor", "sweep")
__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")  # binds the submodule on the package
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted({*globals(), *_API})
