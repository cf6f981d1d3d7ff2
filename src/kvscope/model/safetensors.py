"""Exact weight bytes from safetensors headers, reading only the header of each file.

Format: 8-byte little-endian header length N, then N bytes of JSON mapping tensor names to
{dtype, shape, data_offsets}. We never read tensor data. Headers are capped (100 MiB, like the
reference implementation's limit) and validated; a corrupt one is a CheckpointError naming the file.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError

MAX_HEADER_BYTES = 100 * 1024 * 1024
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 1}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def read_header(path: Path) -> list[TensorInfo]:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path.name}: truncated (no 8-byte header length)", field=path.name,
                                      fix="re-download the checkpoint file")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path.name}: header length {n} is outside (0, {MAX_HEADER_BYTES}]",
                                      field=path.name, fix="the file is corrupt or not safetensors; re-download it")
            raw = f.read(n)
            size = path.stat().st_size
    except OSError as exc:
        raise CheckpointError(f"{path.name}: cannot read ({exc.strerror})", field=path.name, fix="check the path") from None
    if len(raw) != n:
        raise CheckpointError(f"{path.name}: header truncated ({len(raw)} of {n} bytes)", field=path.name,
                              fix="re-download the checkpoint file")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path.name}: header is not valid JSON", field=path.name,
                              fix="the file is corrupt; re-download it") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path.name}: header is not a JSON object", field=path.name, fix="re-download it")
    out = []
    data_len = size - 8 - n
    for name, info in meta.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(info["dtype"])
            shape = tuple(int(x) for x in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path.name}: tensor {name!r} has a malformed entry", field=path.name,
                                  fix="the file is corrupt; re-download it") from None
        if end < start or end > data_len:
            raise CheckpointError(f"{path.name}: tensor {name!r} points past the end of the file", field=path.name,
                                  fix="the file is truncated; re-download it")
        out.append(TensorInfo(name, dtype, shape, end - start))
    return out


def checkpoint_tensors(directory: Path) -> list[TensorInfo]:
    files = sorted(directory.glob("*.safetensors"))
    tensors: list[TensorInfo] = []
    for f in files:
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
