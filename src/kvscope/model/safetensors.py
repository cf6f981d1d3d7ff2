"""Exact weight bytes from safetensors headers, reading only the header of each file.

Format (huggingface/safetensors ``docs/source/index.mdx``, "Format"): 8-byte little-endian header
length N, then N bytes of JSON mapping tensor names to {dtype, shape, data_offsets}, then the byte
buffer. We never read tensor data. What the reference loader refuses, we refuse as a CheckpointError
naming the file: a header over 100 MB (``MAX_HEADER_SIZE`` in ``safetensors/src/tensor.rs``), offsets
that are negative, overlapping, not contiguous from 0 or past the end of the file, an unknown dtype, a
shape whose element count does not match its byte range, NaN/Infinity numbers and nesting deeper than a
header ever has. A sharded checkpoint's ``model.safetensors.index.json`` is followed: a shard it names
that is absent is reported. Non-regular files (named pipes, sockets, devices) are skipped with a warning
(opening a pipe would block forever).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

MAX_HEADER_BYTES = 100_000_000  # safetensors/src/tensor.rs: MAX_HEADER_SIZE = 100_000_000
MAX_INDEX_BYTES = 64 * 1024 * 1024
# bits per element (safetensors Dtype::bitsize); F4/F6 are packed sub-byte types
DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U8": 8,
              "U16": 16, "U32": 32, "U64": 64, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
              "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4, "C64": 64}
DTYPE_BYTES = {k: max(1, v // 8) for k, v in DTYPE_BITS.items()}
INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors header: name, dtype and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def _bad(label: str, what: str, fix: str = "the file is corrupt or not safetensors; re-download it") -> CheckpointError:
    return CheckpointError(f"{label}: {what}", field=label, fix=fix)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def header_length(head: bytes, label: str) -> int:
    """N from the first 8 bytes, checked against the format's 100 MB cap."""
    if len(head) != 8:
        raise _bad(label, "truncated (no 8-byte header length)", "re-download the checkpoint file")
    (n,) = struct.unpack("<Q", head)
    if n < 2 or n > MAX_HEADER_BYTES:
        raise _bad(label, f"header length {n} is outside [2, {MAX_HEADER_BYTES}] bytes")
    return n


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _entry(label: str, name: str, info: Any) -> tuple[TensorInfo, int, int]:
    if not isinstance(info, dict):
        raise _bad(label, f"tensor {name!r} has a malformed entry")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise _bad(label, f"tensor {name!r} has unknown dtype {str(dtype)[:20]!r} (valid: {', '.join(DTYPE_BITS)})")
    if not isinstance(shape, list) or len(shape) > 16 or any(_int(x) is None or x < 0 for x in shape):
        raise _bad(label, f"tensor {name!r} shape must be a list of at most 16 integers >= 0")
    if not isinstance(offsets, list) or len(offsets) != 2 or any(_int(x) is None for x in offsets):
        raise _bad(label, f"tensor {name!r} data_offsets must be two integers")
    start, end = offsets
    if start < 0 or end < start:
        raise _bad(label, f"tensor {name!r} data_offsets [{start}, {end}] are not 0 <= begin <= end")
    want = -(-math.prod(shape) * DTYPE_BITS[dtype] // 8)
    if end - start != want:
        raise _bad(label, f"tensor {name!r} spans {end - start} bytes but {dtype} x {shape} needs {want}")
    return TensorInfo(name, dtype, tuple(shape), end - start), start, end


def parse_header(raw: bytes, file_size: int | None, label: str) -> list[TensorInfo]:
    """Validate one header (the N bytes after the length). ``file_size``: the whole file's size, or
    None when unknown (then offsets are only checked for overlap)."""
    try:
        meta = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise _bad(label, "header nests too deeply") from None
    except (UnicodeDecodeError, ValueError):
        raise _bad(label, "header is not valid JSON") from None
    if not isinstance(meta, dict):
        raise _bad(label, "header is not a JSON object")
    spans, out = [], []
    for name, info in meta.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise _bad(label, "__metadata__ must map strings to strings")
            continue
        t, start, end = _entry(label, name, info)
        spans.append((start, end, name))
        out.append(t)
    data_len = None if file_size is None else file_size - 8 - len(raw)
    pos = 0
    for start, end, name in sorted(spans):
        if start != pos:
            what = "overlaps the previous tensor" if start < pos else f"leaves a gap at byte {pos}"
            raise _bad(label, f"tensor {name!r} {what}")
        pos = end
    if data_len is not None and pos != data_len:
        what = "points past the end of the file" if pos > data_len else "leaves trailing bytes after the last tensor"
        raise _bad(label, f"the tensors' byte ranges ({pos} B) {what} ({data_len} B of data)",
                   "the file is truncated or corrupt; re-download it")
    return out


def read_header(path: Path) -> list[TensorInfo]:
    label = path.name
    try:
        with open(path, "rb") as f:
            n = header_length(f.read(8), label)
            raw = f.read(n)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise CheckpointError(f"{label}: cannot read ({exc.strerror})", field=label, fix="check the path") from None
    if len(raw) != n:
        raise _bad(label, f"header truncated ({len(raw)} of {n} bytes)", "re-download the checkpoint file")
    return parse_header(raw, size, label)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def index_shards(index: Any, label: str = INDEX_NAME) -> list[str]:
    """Shard file names of a ``model.safetensors.index.json`` (its ``weight_map`` values)."""
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise _bad(label, "has no weight_map of tensor name -> shard file", "re-download the index file")
    shards = sorted(set(wm.values()))
    for s in shards:
        if "/" in s or "\\" in s or s in ("", ".", "..") or not s.endswith(".safetensors"):
            raise _bad(label, f"names shard {s[:80]!r}, not a .safetensors file in the same folder")
    return shards


def _read_index(directory: Path) -> list[str] | None:
    path = directory / INDEX_NAME
    if not path.exists():
        return None
    if not _regular(path):
        warnings.warn(f"{path}: not a regular file, skipped", stacklevel=3)
        return None
    if path.stat().st_size > MAX_INDEX_BYTES:
        raise _bad(INDEX_NAME, f"is larger than {MAX_INDEX_BYTES} bytes")
    try:
        index = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise _bad(INDEX_NAME, "is not valid JSON", "re-download the index file") from None
    return index_shards(index)


def checkpoint_tensors(directory: Path) -> list[TensorInfo]:
    """Every tensor of a local checkpoint directory. With an index, exactly the shards it names (a
    missing one is an error); without, every regular ``*.safetensors`` file."""
    shards = _read_index(directory)
    if shards is not None:
        missing = [s for s in shards if not (directory / s).exists()]
        if missing:
            raise CheckpointError(f"{INDEX_NAME} names {len(missing)} shard(s) that are not in {directory}: "
                                  f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}",
                                  field=INDEX_NAME, fix="download the missing shards")
        files = [directory / s for s in shards]
    else:
        files = sorted(directory.glob("*.safetensors"))
    tensors: list[TensorInfo] = []
    for f in files:
        if not _regular(f):
            warnings.warn(f"{f}: not a regular file (pipe, socket or device), skipped", stacklevel=2)
            continue
        tensors.extend(read_header(f))
    return tensors


_REPLICATED = re.compile(r"(norm|\.gate\.weight$|e_score_correction_bias|kv_a_proj_with_mqa|q_a_proj|"
                         r"indexer|\.bias$|router)")
_KV = re.compile(r"\.(k_proj|v_proj)\.")


def exact_weights_per_rank(tensors: list[TensorInfo], tp: int, num_kv_heads: int | None = None) -> tuple[int, int]:
    """(total bytes, bytes per TP rank): replicated tensors (norms, routers, MLA down-projections,
    biases) count whole on every rank; k/v projections split by KV heads (replicated below one head
    per rank); everything else splits over TP."""
    total = sum(t.nbytes for t in tensors)
    per_rank = 0
    for t in tensors:
        if _REPLICATED.search(t.name):
            per_rank += t.nbytes
        elif _KV.search(t.name) and num_kv_heads and num_kv_heads < tp:
            per_rank += t.nbytes // num_kv_heads
        else:
            per_rank += -(-t.nbytes // tp)
    return total, per_rank
