"""kvscope probe boot: load the probe agent, then chain to the ``sitecustomize`` this one shadows.

``kvscope probe`` puts this directory first on ``PYTHONPATH``, so every Python process the probed
command starts (``spawn`` children, torchrun ranks, engine workers) imports this file at
interpreter start. Stdlib only; any error is swallowed so interpreter start never breaks.
"""

import os
import sys


def _kvscope_probe_boot():
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("KVSCOPE_PROBE_OUT"):
        try:
            if here not in sys.path:
                sys.path.append(here)
            import _kvscope_probe_agent

            _kvscope_probe_agent.install()
        except Exception:
            pass
    # Chain: the sitecustomize that would have run without us (a distro's or a venv's).
    try:
        import importlib.machinery
        import importlib.util

        paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
        if spec is None or spec.loader is None:
            return
        if spec.origin and os.path.abspath(spec.origin) == os.path.abspath(__file__):
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py itself does with a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(exc).__name__, exc))


_kvscope_probe_boot()
del _kvscope_probe_boot
