"""Use-case modules that are also their own entry point: ``kvscope.plan(...)``, ``kvscope.fit(...)``,
``kvscope.doctor(path)``.

``kvscope.plan`` is both the module ``kvscope/plan.py`` and the library call. A plain function of
that name in ``kvscope/__init__.py`` would be replaced by the module as soon as anything imports
``kvscope.plan`` (the import system binds a submodule on its package), so the module itself is made
callable instead: ``from kvscope.plan import Engine`` and ``kvscope.plan("Qwen/Qwen3-8B", "h100-sxm")``
both work, whatever the import order.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable


class CallableModule(types.ModuleType):
    """A module whose call is its use-case function (``__call_target__``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__call_target__(*args, **kwargs)


def make_callable(module_name: str, target: Callable[..., Any]) -> None:
    module = sys.modules[module_name]
    module.__call_target__ = target  # type: ignore[attr-defined]
    module.__class__ = CallableModule
