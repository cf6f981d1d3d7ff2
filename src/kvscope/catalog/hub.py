"""Optional Hugging Face hub fallback for models the catalog does not bundle (extra: ``kvscope[hub]``).

Only ``config.json`` and, when the repo has one, ``hf_quant_config.json`` are fetched (a few KB);
never weights. Nothing here runs unless ``huggingface_hub`` is installed, the reference looks like
an HF id (``org/name``) and neither ``KVSCOPE_OFFLINE`` nor ``HF_HUB_OFFLINE`` is set. Any failure
(offline, gated repo, missing file) returns a one-line reason; the caller turns it into the usual
ConfigError, so kvscope behaves exactly as offline.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping

HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def enabled() -> bool:
    if os.environ.get("KVSCOPE_OFFLINE", "") not in ("", "0") or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return False
    return True


def _read(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def fetch_config(repo_id: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None, str]:
    """(config, hf_quant_config, reason). ``config`` is None when it could not be fetched."""
    if not HF_ID.match(repo_id):
        return None, None, "not a Hugging Face id"
    if not enabled():
        return None, None, "hub access off (install kvscope[hub]; unset KVSCOPE_OFFLINE/HF_HUB_OFFLINE)"
    from huggingface_hub import hf_hub_download

    try:
        cfg = _read(hf_hub_download(repo_id, "config.json", etag_timeout=5))
    except Exception as exc:  # noqa: BLE001 - offline, gated, 404: all mean "not available here"
        return None, None, f"hub: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    if not isinstance(cfg, dict):
        return None, None, "hub: config.json is not a JSON object"
    try:
        hq = _read(hf_hub_download(repo_id, "hf_quant_config.json", etag_timeout=5))
    except Exception:  # noqa: BLE001 - most repos have none
        hq = None
    return cfg, hq if isinstance(hq, dict) else None, "hub"
