"""kvscope: predict, explain and measure how LLM serving engines size GPU memory at startup.

The library is the product (docs/api.md): ``kvscope.plan(model, gpu, engine=..., **flags)``,
``kvscope.fit(model, gpu, context=..., concurrency=...)`` and ``kvscope.doctor(path)`` return the
objects the CLI renders.
"""

__version__ = "0.1.0"

from . import doctor, fit, plan  # noqa: E402  (each module is also its call: see _callable.py)

__all__ = ["plan", "fit", "doctor", "__version__"]
