"""Bundled model configs, addressable by Hugging Face id (case-insensitive), or local paths.

Data lives in ``catalog/data/<org>--<name>/`` (``config.json`` or ``config.partial.json``,
optional ``hf_quant_config.json``, ``meta.json`` with the public source of each file).
"""

from __future__ import annotations

import difflib
import json
import re
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class ModelSource:
    """Where a model's config came from."""

    ref: str  # what the user typed
    name: str  # HF id or path
    config: Mapping[str, Any]
    hf_quant_config: Mapping[str, Any] | None
    checkpoint_dir: Path | None  # local dir with *.safetensors, when given
    meta: Mapping[str, Any]  # catalog meta.json (source, total_size_bytes, ...) or {}
    partial: bool = False  # config.partial.json: trimmed copy, values unverified


@lru_cache(maxsize=1)
def _index() -> dict[str, Path]:
    out: dict[str, Path] = {}
    if DATA_DIR.is_dir():
        for d in DATA_DIR.iterdir():
            if d.is_dir() and "--" in d.name:
                out[d.name.replace("--", "/", 1).lower()] = d
    return out


def list_models(with_config_only: bool = True) -> list[str]:
    """HF ids of the bundled models (those with a usable config by default)."""
    ids = []
    for d in _index().values():
        meta = _read_json(d / "meta.json") if (d / "meta.json").exists() else {}
        hf_id = meta.get("hf_id") or d.name.replace("--", "/", 1)
        if not with_config_only or (d / "config.json").exists() or (d / "config.partial.json").exists():
            ids.append(hf_id)
    return sorted(ids, key=str.lower)


def _related_with_config(meta: Mapping[str, Any]) -> list[str]:
    """Bundled models with a config that the catalog's notes name as related (the base model of an
    Instruct, the BF16 config of a quantized repo, a sibling variant) -- never a guess by name."""
    notes = str(meta.get("notes") or "")
    index = _index()
    out = []
    for token in re.findall(r"[A-Za-z0-9_.\-]+--[A-Za-z0-9_.\-]+", notes):
        d = index.get(token.rstrip(".").replace("--", "/", 1).lower())
        if d is not None and ((d / "config.json").exists() or (d / "config.partial.json").exists()):
            out.append(d.name.replace("--", "/", 1))
    return out


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})", field=str(path.name),
                          fix="pass an intact config.json") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", field=str(path.name),
                          fix="check the path") from None


def _from_dir(ref: str, d: Path, name: str, meta: Mapping[str, Any], checkpoint: bool) -> ModelSource:
    partial = False
    cfg_path = d / "config.json"
    if not cfg_path.exists() and (d / "config.partial.json").exists():
        cfg_path, partial = d / "config.partial.json", True
    if not cfg_path.exists():
        near = _related_with_config(meta)
        also = (f"; a related bundled config: {', '.join(near)} ({meta.get('notes')})" if near else "")
        raise ConfigError(f"no config.json for {name}", field="config.json",
                          fix="pass a checkpoint directory or a config.json path (kvscope has only metadata for "
                              f"this model){also}")
    cfg = _read_json(cfg_path)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{cfg_path} is not a JSON object", field="config.json", fix="pass a Hugging Face config.json")
    hq = _read_json(d / "hf_quant_config.json") if (d / "hf_quant_config.json").exists() else None
    return ModelSource(ref=ref, name=name, config=cfg, hf_quant_config=hq,
                       checkpoint_dir=d if checkpoint else None, meta=meta, partial=partial)


def load_model_source(ref: str) -> ModelSource:
    """Resolve a model reference: a config.json file, a checkpoint dir, or a bundled HF id."""
    path = Path(os.path.expanduser(ref))
    if path.is_file():
        cfg = _read_json(path)
        if not isinstance(cfg, dict):
            raise ConfigError(f"{path} is not a JSON object", field="config.json", fix="pass a Hugging Face config.json")
        hq_path = path.parent / "hf_quant_config.json"
        hq = _read_json(hq_path) if hq_path.exists() and path.name == "config.json" else None
        return ModelSource(ref=ref, name=str(path), config=cfg, hf_quant_config=hq, checkpoint_dir=None, meta={})
    if path.is_dir():
        return _from_dir(ref, path, str(path), {}, checkpoint=True)
    d = _index().get(ref.strip().lower())
    if d is None:
        from . import hub

        cfg, hq, why = hub.fetch_config(ref.strip())
        if cfg is not None:
            return ModelSource(ref=ref, name=ref.strip(), config=cfg, hf_quant_config=hq, checkpoint_dir=None,
                               meta={"source": f"huggingface hub: {ref.strip()}/config.json"})
        close = difflib.get_close_matches(ref.lower(), list(_index()), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "pass a local config.json or checkpoint dir"
        raise ConfigError(f"unknown model {ref!r} (not a file, a directory, or a bundled model id; {why})",
                          field="model", fix=hint)
    meta = _read_json(d / "meta.json") if (d / "meta.json").exists() else {}
    return _from_dir(ref, d, meta.get("hf_id") or d.name.replace("--", "/", 1), meta, checkpoint=False)
