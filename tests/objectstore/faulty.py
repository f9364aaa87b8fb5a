"""An S3 that misbehaves: an HTTP proxy in front of the local S3 server that injects
the faults S3 and the networks to it are known for.

Each request, chosen at random (seeded) at the rates given:

- ``slowdown``: answered ``503 SlowDown`` (S3's throttling) and not forwarded;
- ``reset``: the connection is reset before the request is forwarded;
- ``lost``: a write (PUT, POST, DELETE) is forwarded and applied, then the
  connection is reset instead of answering: the caller cannot know it landed;
- ``lost_commit``: the same, for the write of a Delta commit file
  (``_delta_log/N.json``), at a rate of its own.

:meth:`FaultyS3.outage` makes the endpoint unreachable (every connection reset)
until :meth:`FaultyS3.restore`. The proxy forwards each request as it came,
``Host`` header included, so the caller's signature still holds. Counts of what
was injected are in :attr:`FaultyS3.injected`.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

WRITES = frozenset({"PUT", "POST", "DELETE"})
KINDS = ("slowdown", "reset", "lost", "lost_commit")
COMMIT = re.compile(r"/_delta_log/\d{20}\.json(\?|$)")
SLOW_DOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
             b"<Message>Please reduce your request rate.</Message></Error>")
#: hop-by-hop headers this proxy sets itself on an answer
HOP = frozenset({"transfer-encoding", "connection", "keep-alive", "content-length"})


class FaultyS3:
    """A fault-injecting proxy on a free port of 127.0.0.1 in front of ``upstream``
    (``host:port``); a context manager. ``rates`` maps ``slowdown``, ``reset``,
    ``lost`` and ``lost_commit`` to the share of requests (of writes, of commit
    files' writes) that get it."""

    def __init__(self, upstream: str, rates: dict[str, float] | None = None,
                 seed: int = 0) -> None:
        self.upstream = upstream
        self.rates = dict(rates or {})
        unknown = set(self.rates) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kind(s): {sorted(unknown)}")
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.down = False
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"faulty-s3-{self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def outage(self) -> None:
        """Reset every connection from now on, as an unreachable endpoint would."""
        self.down = True

    def restore(self) -> None:
        self.down = False

    def fault_for(self, method: str, path: str) -> str | None:
        """The fault this request gets (None: forwarded and answered), counted."""
        with self._lock:
            self.requests += 1
            if self.down:
                fault: str | None = "outage"
            else:
                draw = self._random.random()
                fault = None
                commit = method == "PUT" and COMMIT.search(path) is not None
                for kind in KINDS:
                    rate = self.rates.get(kind, 0.0)
                    if (kind == "lost" and method not in WRITES) or (
                            kind == "lost_commit" and not commit):
                        continue
                    if draw < rate:
                        fault = kind
                        break
                    draw -= rate
            if fault is not None:
                self.injected[fault] += 1
            return fault

    def __enter__(self) -> FaultyS3:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()


class Reset(Exception):
    """Raised inside a handler to reset its connection."""


def _handler(proxy: FaultyS3) -> type[BaseHTTPRequestHandler]:
    host, port = proxy.upstream.rsplit(":", 1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        upstream: http.client.HTTPConnection | None = None

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (Reset, OSError, http.client.HTTPException):
                self.reset()

        def reset(self) -> None:
            """Close the client's connection with a TCP reset (no answer)."""
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
            except OSError:
                pass

        def finish(self) -> None:
            try:
                super().finish()
            except OSError:
                pass

        def relay(self) -> None:
            fault = proxy.fault_for(self.command, self.path)
            if fault in ("outage", "reset"):
                raise Reset
            body = self.body()
            if fault == "slowdown":
                self.answer(503, [("Content-Type", "application/xml")], SLOW_DOWN)
                return
            status, headers, answer = self.forward(body)
            if fault in ("lost", "lost_commit"):  # applied upstream; its answer never arrives
                raise Reset
            self.answer(status, headers, answer)

        def body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            for attempt in (1, 2):  # a kept connection the server closed: once more
                if self.upstream is None:
                    self.upstream = http.client.HTTPConnection(host, int(port), timeout=120)
                try:
                    self.upstream.putrequest(self.command, self.path, skip_host=True,
                                             skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in ("transfer-encoding", "content-length"):
                            self.upstream.putheader(name, value)
                    self.upstream.putheader("Content-Length", str(len(body)))
                    self.upstream.endheaders(body)
                    response = self.upstream.getresponse()
                    answer = response.read()
                    return response.status, response.getheaders(), answer
                except (OSError, http.client.HTTPException):
                    self.upstream.close()
                    self.upstream = None
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        def answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response_only(status)
            length = str(len(body))
            for name, value in headers:
                if name.lower() == "content-length" and self.command == "HEAD":
                    length = value
                elif name.lower() not in HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = relay

    return Handler
