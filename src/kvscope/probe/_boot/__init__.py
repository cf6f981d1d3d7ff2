"""Directory put first on ``PYTHONPATH`` by ``kvscope probe``: ``sitecustomize`` + the agent.

Nothing here is imported by kvscope itself at run time; the package marker only makes setuptools
ship these files.
"""
