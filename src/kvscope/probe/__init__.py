"""kvscope probe: measure a live engine start from the inside, without modifying engine files.

- ``_boot/`` is put on ``PYTHONPATH``: ``sitecustomize`` loads ``_kvscope_probe_agent`` (stdlib
  only) in every Python process of the probed command; the agent wraps the targets listed in
  ``kvscope.hooks.<engine>`` (via ``targets``) and writes one JSONL file per process.
- ``runner`` runs the command; ``records`` reads the files and verifies attachment;
  ``timeline.timeline_from_probe_dir`` turns them into the shared ``Timeline``; ``live`` reads a
  running server's endpoints (``--url``).
"""

from __future__ import annotations

from kvscope.probe.timeline import timeline_from_probe_dir

__all__ = ["timeline_from_probe_dir"]
