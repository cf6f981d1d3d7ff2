"""Bundled model configs, addressable by Hugging Face id (case-insensitive), or local paths.

Data lives in ``catalog/data/<org>--<name>/`` (``config.json`` or ``config.partial.json``,
optional ``hf_quant_config.json``, ``meta.json`` with the public source of each file). A ``meta.json``
``missing_fields`` list marks a copy known to lack a field that changes the arithmetic: such an entry is
refused with one line naming the field (or read from the hub when it is on), never planned. Ids the
catalog lacks go to the hub (``catalog/hub.py``) when it is on.
"""

from __future__ import annotations

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
        with os.scandir(DATA_DIR) as entries:  # DirEntry.is_dir needs no stat per entry (start-up cost)
            for d in entries:
                if "--" in d.name and d.is_dir():
                    out[d.name.replace("--", "/", 1).lower()] = DATA_DIR / d.name
    return out


def list_models(with_config_only: bool = True) -> list[str]:
    """HF ids of the bundled models (by default those with a usable config: not metadata-only, not
    known to lack a field that changes the arithmetic)."""
    ids = []
    for d in _index().values():
        meta = _read_json(d / "meta.json") if (d / "meta.json").exists() else {}
        hf_id = meta.get("hf_id") or d.name.replace("--", "/", 1)
        usable = ((d / "config.json").exists() or (d / "config.partial.json").exists()) and not meta.get("missing_fields")
        if not with_config_only or usable:
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


_MAX_JSON_BYTES = 64 << 20  # a config.json is kilobytes; bigger is not one (and would be read whole)


def _read_json(path: Path) -> Any:
    try:
        if path.exists() and not path.is_file():  # a named pipe or device would block or never end
            raise ConfigError(f"{path} is not a regular file", field=str(path.name), fix="pass a config.json file")
        if path.stat().st_size > _MAX_JSON_BYTES:
            raise ConfigError(f"{path} is {path.stat().st_size:,} bytes, more than a config.json can be "
                              f"({_MAX_JSON_BYTES:,})", field=str(path.name), fix="pass the model's config.json")
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})", field=str(path.name),
                          fix="pass an intact config.json") from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, a 5,000-digit number, nesting too deep
        raise ConfigError(f"{path} is not a readable JSON config ({type(exc).__name__}: {str(exc)[:80]})",
                          field=str(path.name), fix="pass an intact config.json") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", field=str(path.name),
                          fix="check the path") from None


def _refuse_missing(name: str, meta: Mapping[str, Any]) -> None:
    """A bundled copy known to lack a field that changes the arithmetic (meta.json ``missing_fields``)
    is refused with one line naming the field, never planned with a silently wrong number."""
    missing = [str(f) for f in meta.get("missing_fields") or ()]
    if missing:
        raise ConfigError(f"the bundled config of {name} lacks {missing[0]} (only a trimmed public copy was found)",
                          field=missing[0], fix="pass the checkpoint's own config.json or directory, or turn the hub "
                                                "on (kvscope[hub] or KVSCOPE_HUB=1) to read the hub's file")


def _from_dir(ref: str, d: Path, name: str, meta: Mapping[str, Any], checkpoint: bool) -> ModelSource:
    partial = False
    cfg_path = d / "config.json"
    if not cfg_path.exists() and (d / "config.partial.json").exists():
        cfg_path, partial = d / "config.partial.json", True
    if not checkpoint and (meta.get("missing_fields") or not cfg_path.exists()):
        remote = _from_hub(ref, name)  # a metadata-only or incomplete entry: the hub's file, when reachable
        if remote is not None:
            return remote
        _refuse_missing(name, meta)
    if not cfg_path.exists():
        near = _related_with_config(meta)
        also = (f"; a related bundled config: {', '.join(near)} ({meta.get('notes')})" if near else "")
        raise ConfigError(f"no config.json for {name}", field="config.json",
                          fix="pass a checkpoint directory or a config.json path, or turn the hub on (kvscope[hub] "
                              f"or KVSCOPE_HUB=1); kvscope has only metadata for this model{also}")
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
            return _hub_source(ref, cfg, hq)
        import difflib  # only for the did-you-mean of an unknown id (import cost)

        close = difflib.get_close_matches(ref.lower(), list(_index()), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "pass a local config.json or checkpoint dir"
        raise ConfigError(f"unknown model {ref!r} (not a file, a directory, or a bundled model id; {why})",
                          field="model", fix=hint)
    meta = _read_json(d / "meta.json") if (d / "meta.json").exists() else {}
    return _from_dir(ref, d, meta.get("hf_id") or d.name.replace("--", "/", 1), meta, checkpoint=False)


def _hub_source(ref: str, cfg: Mapping[str, Any], hq: Mapping[str, Any] | None) -> ModelSource:
    from . import hub

    repo, rev = hub.parse_ref(ref.strip())
    return ModelSource(ref=ref, name=repo, config=cfg, hf_quant_config=hq, checkpoint_dir=None,
                       meta={"source": f"huggingface hub: {repo}@{rev}/config.json", "hub": {"repo": repo, "revision": rev}})


def _from_hub(ref: str, name: str) -> ModelSource | None:
    """The hub's config for a bundled id whose bundled copy is missing or incomplete; None when the hub
    is off or unreachable (the caller then refuses with the bundled entry's own reason)."""
    from . import hub

    if not hub.enabled():
        return None
    cfg, hq, _ = hub.fetch_config(name if "@" not in ref else ref.strip())
    return _hub_source(ref if "@" in ref else name, cfg, hq) if cfg is not None else None


@dataclass(frozen=True)
class CatalogEntry:
    """One bundled model as ``kvscope models`` lists it (facts read from its config, never guessed)."""

    hf_id: str
    kind: str  # model | eagle3 | extra
    config: str  # full | partial | none
    source: str
    meta: Mapping[str, Any]


def catalog_entries(with_config_only: bool = True) -> list[CatalogEntry]:
    out = []
    for d in _index().values():
        meta = _read_json(d / "meta.json") if (d / "meta.json").exists() else {}
        cfg = "full" if (d / "config.json").exists() else "partial" if (d / "config.partial.json").exists() else "none"
        if with_config_only and cfg == "none":
            continue
        hf_id = meta.get("hf_id") or d.name.replace("--", "/", 1)
        out.append(CatalogEntry(hf_id, str(meta.get("kind") or "model"), cfg, str(meta.get("source") or ""), meta))
    return sorted(out, key=lambda e: e.hf_id.lower())
