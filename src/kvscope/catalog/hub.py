"""Hugging Face hub fallback for models the catalog does not bundle, in plain stdlib HTTP.

What is read: ``config.json``, ``hf_quant_config.json`` when the repo has one, and the safetensors
*headers* of the weights -- two HTTP range requests per shard (the 8-byte length, then the header),
following ``model.safetensors.index.json`` -- as hf-mem does. Weights are never downloaded.

- ``MODEL@REV`` picks a revision (branch, tag or commit; default ``main``);
- ``HF_ENDPOINT`` (default https://huggingface.co) and ``HF_TOKEN`` (or ``$HF_HOME/token``) as the hub
  client reads them; the token is never sent to another host after a redirect;
- the hub client's own cache (``$HF_HUB_CACHE``) is read first, offline;
- results are cached in ``$KVSCOPE_CACHE_DIR`` (default ``~/.cache/kvscope/hub``): a second run is offline;
- on: with the ``kvscope[hub]`` extra installed, or ``KVSCOPE_HUB=1``; off: ``KVSCOPE_HUB=0``,
  ``KVSCOPE_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``;
- every request has a short timeout (``KVSCOPE_HUB_TIMEOUT``, default 1.5 s) and no retries, so an
  offline machine gets its one-line error at once.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from ..errors import CheckpointError
from ..model.safetensors import INDEX_NAME, TensorInfo, header_length, index_shards, parse_header

HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,99}$")
MAX_JSON_BYTES = 64 * 1024 * 1024


class HubError(Exception):
    """One line saying why the hub could not answer (the caller turns it into a ConfigError)."""


def parse_ref(ref: str) -> tuple[str, str]:
    """``org/name@rev`` -> (``org/name``, ``rev``); revision ``main`` when none is given."""
    repo, _, rev = ref.partition("@")
    return repo, rev or "main"


def _off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def enabled() -> bool:
    if _off("KVSCOPE_OFFLINE") or _off("HF_HUB_OFFLINE") or os.environ.get("KVSCOPE_HUB", "").strip() == "0":
        return False
    if _off("KVSCOPE_HUB"):
        return True
    try:
        import huggingface_hub  # noqa: F401  (the [hub] extra: its presence switches the fallback on)
    except ImportError:
        return False
    return True


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _token() -> str | None:
    tok = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if tok:
        return tok.strip()
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    try:
        return (home / "token").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _timeout() -> float:
    try:
        return max(0.1, float(os.environ.get("KVSCOPE_HUB_TIMEOUT", "1.5")))
    except ValueError:
        return 1.5


def cache_root() -> Path:
    base = os.environ.get("KVSCOPE_CACHE_DIR")
    if base:
        return Path(base) / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvscope" / "hub"


def _cache_dir(repo: str, rev: str) -> Path:
    return cache_root() / repo.replace("/", "--") / urllib.parse.quote(rev, safe="")


class _Redirect(urllib.request.HTTPRedirectHandler):
    """Follow the hub's redirects (LFS files live on a CDN) keeping the Range header, and drop the
    token when the redirect leaves the endpoint's host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.headers.pop("Authorization", None)
        return new


def _get(url: str, byte_range: tuple[int, int] | None = None, limit: int = MAX_JSON_BYTES) -> tuple[bytes, Any]:
    req = urllib.request.Request(url, headers={"User-Agent": "kvscope"})
    tok = _token()
    if tok:
        req.add_header("Authorization", f"Bearer {tok}")
    if byte_range is not None:
        req.add_header("Range", f"bytes={byte_range[0]}-{byte_range[1]}")
    opener = urllib.request.build_opener(_Redirect)
    try:
        with opener.open(req, timeout=_timeout()) as resp:
            body = resp.read(limit + 1)
            headers = resp.headers
    except urllib.error.HTTPError as exc:
        what = url.rsplit("/", 1)[-1]
        if exc.code in (401, 403):
            raise HubError(f"HTTP {exc.code} for {what}: gated or private repo (accept its license and set HF_TOKEN)") from None
        if exc.code == 404:
            raise HubError(f"HTTP 404: {what} not found (check the id and revision)") from None
        raise HubError(f"HTTP {exc.code} for {what}") from None
    except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HubError(f"cannot reach {urllib.parse.urlsplit(url).netloc} ({str(reason).splitlines()[0][:80]})") from None
    if len(body) > limit:
        raise HubError(f"{url.rsplit('/', 1)[-1]} is larger than {limit} bytes")
    return body, headers


def _url(repo: str, rev: str, filename: str) -> str:
    return f"{endpoint()}/{repo}/resolve/{urllib.parse.quote(rev, safe='')}/{filename}"


def _json(body: bytes, what: str) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HubError(f"{what} is not valid JSON") from None


def _hf_cache_file(repo: str, rev: str, filename: str) -> Path | None:
    """A file in the huggingface_hub cache (``models--org--name/snapshots/<commit>/``), if present."""
    root = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    d = root / f"models--{repo.replace('/', '--')}"
    commit = rev
    ref = d / "refs" / rev
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
    p = d / "snapshots" / commit / filename
    return p if p.is_file() else None


def _cached_json(repo: str, rev: str, filename: str, optional: bool = False) -> Any:
    """JSON file from our cache, the hub client's cache, or the hub (then cached). ``optional``: a 404
    is cached as absent and returns None."""
    d = _cache_dir(repo, rev)
    mine, absent = d / filename, d / (filename + ".absent")
    if mine.is_file():
        return _json(mine.read_bytes(), filename)
    if optional and absent.is_file():
        return None
    theirs = _hf_cache_file(repo, rev, filename)
    if theirs is not None:
        return _json(theirs.read_bytes(), filename)
    try:
        body, _ = _get(_url(repo, rev, filename))
    except HubError as exc:
        if optional and str(exc).startswith("HTTP 404"):
            _write(absent, b"")
            return None
        raise
    data = _json(body, filename)
    _write(mine, body)
    return data


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs the next run a fetch


def fetch_config(ref: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None, str]:
    """(config, hf_quant_config, reason). ``config`` is None when it could not be fetched."""
    repo, rev = parse_ref(ref)
    if not HF_ID.match(repo) or not REVISION.match(rev) or ".." in rev:
        return None, None, "not a Hugging Face id"
    if not enabled():
        return None, None, "hub access off (install kvscope[hub] or set KVSCOPE_HUB=1; unset KVSCOPE_OFFLINE/HF_HUB_OFFLINE)"
    try:
        cfg = _cached_json(repo, rev, "config.json")
        if not isinstance(cfg, dict):
            return None, None, "hub: config.json is not a JSON object"
        hq = _cached_json(repo, rev, "hf_quant_config.json", optional=True)
    except HubError as exc:
        return None, None, f"hub: {exc}"
    return cfg, hq if isinstance(hq, dict) else None, "hub"


def _remote_header(repo: str, rev: str, shard: str) -> list[TensorInfo]:
    url = _url(repo, rev, shard)
    head, headers = _get(url, (0, 7), limit=8)
    total = _content_total(headers)
    n = header_length(head[:8], shard)
    raw, _ = _get(url, (8, 8 + n - 1), limit=n)
    if len(raw) != n:
        raise CheckpointError(f"{shard}: the hub sent {len(raw)} of {n} header bytes", field=shard,
                              fix="retry; the server may not support range requests")
    return parse_header(raw, total, shard)


def _content_total(headers: Any) -> int | None:
    m = re.match(r"bytes \d+-\d+/(\d+)", str(headers.get("Content-Range") or ""))
    return int(m.group(1)) if m else None


def fetch_tensors(ref: str) -> list[TensorInfo]:
    """Every tensor of the repo's safetensors checkpoint, from its headers (cached after the first run).
    Raises HubError (unreachable, 404, 401) or CheckpointError (a corrupt header, a missing shard)."""
    repo, rev = parse_ref(ref)
    cache = _cache_dir(repo, rev) / "tensors.json"
    if cache.is_file():
        return [TensorInfo(n, d, tuple(s), b) for n, d, s, b in _json(cache.read_bytes(), "tensors.json")]
    index = _cached_json(repo, rev, INDEX_NAME, optional=True)
    shards = index_shards(index) if index is not None else ["model.safetensors"]
    tensors: list[TensorInfo] = []
    for shard in shards:
        try:
            tensors.extend(_remote_header(repo, rev, shard))
        except HubError as exc:
            if not str(exc).startswith("HTTP 404"):
                raise
            if index is not None:
                raise CheckpointError(f"{INDEX_NAME} names {shard}, which the hub does not have", field=INDEX_NAME,
                                      fix="the repo is incomplete; pass a complete checkpoint") from None
            tensors = []  # no safetensors at all (a .bin-only repo): the caller estimates from the config
            break
    _write(cache, json.dumps([[t.name, t.dtype, list(t.shape), t.nbytes] for t in tensors]).encode())
    return tensors
