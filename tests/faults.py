"""A fault-injecting HTTP proxy for the S3 API server of the tests: throttling, errors, resets and delays.

It listens on loopback and forwards every request to the moto server behind it, unless a fault is due. Faults are
chosen per request kind (LIST, HEAD, GET, PUT, COPY, DELETE, POST): by *rules* the test arms (this kind, a key
matching this pattern, the next N times, optionally only once a trigger request has passed) and by seeded random
*rates*, bounded in count and in the delay they add. Clients reach it as their ``endpoint_url``: s3fs and botocore
run as in production, their own retries included.

The faults, as a client sees them:

- ``503``: S3's ``SlowDown`` throttling answer; ``500``: ``InternalError``.
- ``reset``: the connection reset before any answer (the request never reached the server).
- ``lost``: the request is served, then the connection is reset before the answer: its outcome is unknown to the
  client (a PUT may have been applied).
- ``delay``: the request is held ``delay_s`` before it is forwarded.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

BUCKET = "faults"
KINDS = ("LIST", "HEAD", "GET", "PUT", "COPY", "DELETE", "POST")
FAULTS = ("503", "500", "reset", "lost", "delay")
_ERRORS = {"503": ("SlowDown", "Please reduce your request rate."),
           "500": ("InternalError", "We encountered an internal error. Please try again.")}
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


@dataclass(frozen=True)
class Request:
    kind: str
    key: str  # bucket/key, or bucket/prefix for a LIST
    body: bytes


@dataclass
class Rule:
    """Inject ``fault`` into the next ``times`` requests of ``kind`` whose key matches ``key`` (a regex searched
    in it), once ``after`` (if given) has matched a request that was forwarded."""

    kind: str
    fault: str
    key: str = ""
    times: int = 1
    after: Callable[[Request], bool] | None = None
    armed: bool = field(default=False, init=False)

    def matches(self, request: Request) -> bool:
        return (self.times > 0 and (self.after is None or self.armed) and request.kind == self.kind
                and re.search(self.key, request.key) is not None)


class FaultProxy:
    """The proxy: start it, point ``endpoint_url`` at :attr:`url`, arm rules or rates, read the counts."""

    def __init__(self, upstream: str, *, seed: int = 0, delay_s: float = 0.2) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.delay_s = delay_s
        self.rules: list[Rule] = []
        self.rates: dict[str, dict[str, float]] = {}
        self.max_faults = 0  # of random faults; rules are bounded by their own times
        self.random = random.Random(seed)
        self.requests: Counter = Counter()  # by kind
        self.faults: Counter = Counter()  # by (kind, fault)
        self.retried = 0  # requests that repeated one a fault answered (same kind and key): a client's retry
        self._faulted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def arm(self, *rules: Rule) -> None:
        with self._lock:
            self.rules.extend(rules)

    def set_rates(self, rates: dict[str, dict[str, float]], max_faults: int, seed: int) -> None:
        """Random faults: ``rates[kind][fault]`` is a probability per request, at most ``max_faults`` in all."""
        with self._lock:
            self.rates, self.max_faults, self.random = rates, max_faults, random.Random(seed)

    def clear(self) -> None:
        with self._lock:
            self.rules, self.rates, self.max_faults = [], {}, 0

    def choose(self, request: Request) -> str | None:
        """The fault for ``request`` (None: forward it), counted."""
        with self._lock:
            self.requests[request.kind] += 1
            if (request.kind, request.key) in self._faulted:
                self._faulted.discard((request.kind, request.key))
                self.retried += 1
            fault = next((rule.fault for rule in self.rules if rule.matches(request)), None)
            if fault is not None:
                rule = next(rule for rule in self.rules if rule.matches(request))
                rule.times -= 1
            elif self.max_faults > 0:
                for candidate, rate in self.rates.get(request.kind, {}).items():
                    if self.random.random() < rate:
                        fault, self.max_faults = candidate, self.max_faults - 1
                        break
            if fault is not None:
                self.faults[(request.kind, fault)] += 1
                self._faulted.add((request.kind, request.key))
            return fault

    def forwarded(self, request: Request) -> None:
        """Arm the rules whose trigger ``request`` is."""
        with self._lock:
            for rule in self.rules:
                if rule.after is not None and not rule.armed and rule.after(request):
                    rule.armed = True

    def counts(self) -> dict[str, dict]:
        with self._lock:
            return {"requests": dict(self.requests), "faults": {f"{k} {f}": n for (k, f), n in self.faults.items()},
                    "retried": self.retried}


def kind_of(method: str, path: str, query: str, headers: dict[str, str]) -> str:
    parameters = parse_qs(query, keep_blank_values=True)
    key_given = "/" in path.strip("/")
    if method == "GET" and not key_given and ("list-type" in parameters or "prefix" in parameters
                                              or "delimiter" in parameters or not query):
        return "LIST"
    if method == "PUT" and "x-amz-copy-source" in headers:
        return "COPY"
    if method == "POST" and "delete" in parameters:
        return "DELETE"
    return method if method in KINDS else "POST"


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # one line per request would drown the test output
            pass

        def _serve(self) -> None:
            body = self._body()
            split = urlsplit(self.path)
            headers = {name.lower(): value for name, value in self.headers.items()}
            kind = kind_of(self.command, split.path, split.query, headers)
            key = unquote(split.path).strip("/")
            if kind == "LIST":  # the bucket, then the prefix listed
                key += "/" + parse_qs(split.query).get("prefix", [""])[0]
            request = Request(kind, key, body)
            fault = proxy.choose(request)
            if fault == "reset":
                self._reset()
                return
            if fault in _ERRORS:
                self._error(int(fault), *_ERRORS[fault])
                return
            if fault == "delay":
                time.sleep(proxy.delay_s)
            status, reason, answer_headers, answer = self._forward(body)
            proxy.forwarded(request)
            if fault == "lost":
                self._reset()
                return
            self.send_response(status, reason)
            for name, value in answer_headers:
                if name.lower() not in _HOP:
                    self.send_header(name, value)
            if not any(name.lower() == "content-length" for name, _ in answer_headers):
                self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    chunk = self.rfile.read(size)
                    self.rfile.readline()
                    if not size:
                        return b"".join(chunks)
                    chunks.append(chunk)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            connection = http.client.HTTPConnection(*proxy.upstream, timeout=60)
            try:
                headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP}
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    headers["Content-Length"] = str(len(body))
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                return answer.status, answer.reason, answer.getheaders(), answer.read()
            finally:
                connection.close()

        def _error(self, status: int, code: str, message: str) -> None:
            text = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
                    f"<Resource>{self.path}</Resource><RequestId>fault-proxy</RequestId></Error>").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(text)

        def _reset(self) -> None:
            # SO_LINGER 0: close() sends a reset, as a dropped connection does, not an orderly end.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

    return Handler
