"""A progress line on stderr for anything that runs longer than about a second — only on a terminal.

``with progress("doctor: reading big.log"): ...`` shows ``doctor: reading big.log … 3 s`` after
``delay`` seconds, updated a few times a second, and erases it when the block ends. When stderr is
not a TTY (pipes, CI, ``--json`` consumers, tests) nothing is written, so output stays byte-identical.
``KVSCOPE_NO_PROGRESS=1`` turns it off on a terminal too.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import IO, Iterator

__all__ = ["progress"]

_FRAMES = "|/-\\"


def _enabled(stream: IO[str]) -> bool:
    if os.environ.get("KVSCOPE_NO_PROGRESS"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress(label: str, delay: float = 1.0, stream: IO[str] | None = None, interval: float = 0.25) -> Iterator[None]:
    """Show ``label`` with a spinner and the elapsed seconds while the block runs (after ``delay`` s)."""
    out = sys.stderr if stream is None else stream
    if not _enabled(out):
        yield
        return
    stop = threading.Event()
    shown = threading.Event()
    start = time.monotonic()

    def spin() -> None:
        if stop.wait(delay):
            return
        i = 0
        while not stop.is_set():
            out.write(f"\r{label} {_FRAMES[i % 4]} {time.monotonic() - start:.0f} s")
            out.flush()
            shown.set()
            i += 1
            stop.wait(interval)

    t = threading.Thread(target=spin, name="kvscope-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        if shown.is_set():
            out.write("\r\033[K")
            out.flush()
