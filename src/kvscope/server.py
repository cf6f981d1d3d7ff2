"""``kvscope serve``'s HTTP server: the standard library's ``http.server``, 127.0.0.1 by default.

Routes (the handlers are injected by ``commands/serve.py``, which answers them with the same parser
and library calls as the CLI, so the page's numbers are ``--json``'s):

- ``GET /``: the what-if page (``report/serve_page.py``); the query string carries the inputs.
- ``GET /api/plan?model=…&gpu=…&tp=…&mem-fraction-static=…``: ``{"json": plan --json, "curve": …,
  "timeline_svg": …, "curve_svg": …, "command": …}``.
- ``POST /api/doctor`` (JSON ``{"log": text, "engine": …, "model": …}``): ``{"json": doctor --json,
  "html": …}``.
- ``GET /api/options``: bundled models, GPUs, engine versions.

Bad input answers 400 with ``{"error": "<the CLI's one line>"}``; anything else 500 with one line.
A request never stops the server.
"""

from __future__ import annotations

import json
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping
from urllib.parse import parse_qsl, urlsplit

from .errors import KvscopeError

__all__ = ["make_server", "Routes", "InputError", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 64 << 20  # a pasted or uploaded log (doctor reads up to its own limit)


class InputError(Exception):
    """Bad input that is not a KvscopeError (an argparse message): answered 400 with its line."""


class Routes:
    """What the server answers: ``page(query)`` -> HTML; the API callables -> JSON-able dicts."""

    def __init__(self, page: Callable[[Mapping[str, str]], str], plan: Callable[[Mapping[str, str]], dict],
                 doctor: Callable[[Mapping[str, Any]], dict], options: Callable[[], dict]) -> None:
        self.page, self.plan, self.doctor, self.options = page, plan, doctor, options


def _handler(routes: Routes, quiet: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kvscope"

        def log_message(self, fmt: str, *args: Any) -> None:  # noqa: D401 -- one line per request, or none
            if not quiet:
                super().log_message(fmt, *args)

        def _send(self, status: int, body: str, ctype: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", f"{ctype}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, ensure_ascii=False), "application/json")

        def _answer(self, fn: Callable[[], Any], html: bool = False) -> None:
            try:
                out = fn()
            except KvscopeError as exc:
                self._json(400, {"error": f"kvscope: error: {exc}"})
            except InputError as exc:
                self._json(400, {"error": str(exc)})
            except Exception as exc:  # noqa: BLE001 -- the server's edge: one line, keep serving
                where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
                loc = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
                self._json(500, {"error": f"kvscope: internal error: {type(exc).__name__}: {exc}{loc}"})
            else:
                if html:
                    self._send(200, out, "text/html")
                else:
                    self._json(200, out)

        def do_GET(self) -> None:  # noqa: N802 -- http.server's name
            url = urlsplit(self.path)
            query = dict(parse_qsl(url.query, keep_blank_values=False))
            if url.path in ("/", "/index.html"):
                self._answer(lambda: routes.page(query), html=True)
            elif url.path == "/api/plan":
                self._answer(lambda: routes.plan(query))
            elif url.path == "/api/options":
                self._answer(routes.options)
            else:
                self._json(404, {"error": f"kvscope: error: no such page: {url.path}"})

        def do_POST(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            if url.path != "/api/doctor":
                self._json(404, {"error": f"kvscope: error: no such endpoint: {url.path}"})
                return
            self._answer(lambda: routes.doctor(self._body()))

        def _body(self) -> Mapping[str, Any]:
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise InputError("kvscope: error: bad Content-Length") from None
            if n < 0 or n > MAX_BODY_BYTES:
                raise InputError(f"kvscope: error: request body {n} bytes is out of range (0 .. {MAX_BODY_BYTES})")
            raw = self.rfile.read(n)
            try:
                body = json.loads(raw.decode("utf-8") or "{}")
            except (UnicodeDecodeError, ValueError) as exc:
                raise InputError(f"kvscope: error: request body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise InputError("kvscope: error: request body must be a JSON object")
            return body

    return Handler


def make_server(routes: Routes, host: str = "127.0.0.1", port: int = 8765, quiet: bool = False) -> ThreadingHTTPServer:
    """A threading HTTP server bound to ``host:port`` (port 0: any free port); call ``serve_forever``."""
    server = ThreadingHTTPServer((host, port), _handler(routes, quiet))
    server.daemon_threads = True
    return server
