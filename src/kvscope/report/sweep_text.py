"""``kvscope sweep`` output: CSV (a header of the columns, one line per point) or JSON.

Both carry exactly the rows of ``kvscope.sweep()`` (sweep/result.py): the point's flag values, then
tokens, max_running_requests, max_concurrency, verdict and error. Empty CSV cells are ``None``.
"""

from __future__ import annotations

import csv
import json
from typing import Any, TextIO

__all__ = ["write_csv", "write_json"]


def write_csv(sweep: Any, out: TextIO) -> None:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(sweep.columns)
    w.writerows(sweep.rows)


def write_json(sweep: Any, out: TextIO) -> None:
    json.dump(sweep.to_dict(), out, indent=1)
    out.write("\n")
