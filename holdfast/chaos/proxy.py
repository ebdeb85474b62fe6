"""A loopback HTTP proxy in front of DynamoDB Local or moto: counts calls, injects faults.

One module, two uses: the benchmarks count DynamoDB / SQS requests *at the client* (every HTTP
request a worker sends, retries included, which is what AWS bills), and the chaos soak makes the
backend fail for a while without touching the worker's code:

- ``error``:    answer HTTP 500 ``InternalServerError`` without forwarding (nothing applied);
- ``timeout``:  hold the request until the window ends, then drop the connection (the client's
                read timeout fires first: an unknown outcome, nothing applied);
- ``lost``:     forward (the write IS applied), then drop the connection: the ambiguous case;
- ``latency``:  forward after ``delay_s``;
- ``throttle``: answer HTTP 400 ``ThrottlingException`` or ``ProvisionedThroughputExceeded
                Exception`` (alternately) without forwarding, on ``fraction`` of the calls.

Every request's wall time is kept (``calls_between``), so a checker can compare call rates in
and before a fault window.

With ``capacity=True`` (the benchmarks) it also asks DynamoDB for ``ReturnConsumedCapacity=
INDEXES`` on every call that accepts it and adds up the units the answers report (or, where
DynamoDB Local reports none, estimates them): see ``holdfast.chaos.consumed``.

Signatures are not re-computed: DynamoDB Local and moto do not verify them (a test checks that
DynamoDB Local accepts a body the proxy changed after signing).
"""

from __future__ import annotations

import bisect
import http.client
import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from holdfast.chaos.consumed import CapacityKey, ask_for_capacity, consumed_of

__all__ = ["FaultKind", "FaultProxy", "FaultWindow", "items_of", "operation_of"]

FaultKind = Literal["error", "timeout", "lost", "latency", "throttle"]
_THROTTLES = ("ThrottlingException", "ProvisionedThroughputExceededException")
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """One injected fault period, in wall-clock milliseconds (for the checker's timeline)."""

    kind: FaultKind
    start_ms: int
    end_ms: int
    delay_s: float = 0.0
    fraction: float = 1.0  # of the calls faulted (throttle)


def operation_of(headers: dict[str, str], body: bytes) -> str:
    """The API operation of a request: ``X-Amz-Target`` (JSON protocols) or ``Action=`` (query)."""
    target = headers.get("x-amz-target", "")
    if target:
        return target.rsplit(".", 1)[-1]
    try:
        action = parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]
    except ValueError:
        action = ""
    return action or "unknown"


def items_of(op: str, body: bytes) -> int:
    """Items one request touches: statements of a PartiQL batch, entries of an SQS batch (what
    DynamoDB bills per item and SQS per 64 KB chunk of a request), else 1."""
    if op not in ("BatchExecuteStatement", "SendMessageBatch", "DeleteMessageBatch",
                  "BatchWriteItem", "TransactWriteItems"):
        return 1
    try:
        doc = json.loads(body)
    except ValueError:
        return 1
    if not isinstance(doc, dict):
        return 1
    for key in ("Statements", "Entries", "TransactItems"):
        if isinstance(doc.get(key), list):
            return len(doc[key])
    if isinstance(doc.get("RequestItems"), dict):
        return sum(len(v) for v in doc["RequestItems"].values() if isinstance(v, list))
    return 1


class _QuietServer(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of clients opening pooled connections
    # at once (three workers claiming 30 new streams) overflowed it, and each dropped SYN came
    # back after the kernel's 1 s retransmit: measured as 1 s reads in the start-burst bench.
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that timed out and hung up (the faults make them) is not worth a traceback.
        return


class FaultProxy:
    """Forward every request to ``target_url``; ``inject`` a fault for a while; count ops."""

    def __init__(self, target_url: str, *, name: str = "proxy", capacity: bool = False,
                 index_keys: Mapping[str, Mapping[str, frozenset[str]]] | None = None) -> None:
        parts = urlsplit(target_url)
        self.name = name
        self.capacity = capacity  # ask for and add up ConsumedCapacity (DynamoDB only)
        self.index_keys = dict(index_keys or {})  # table -> index -> keys, for estimates
        self.consumed: defaultdict[CapacityKey, float] = defaultdict(float)  # units
        self.unpriced: Counter[str] = Counter()  # op -> calls that reported no capacity
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.counts: Counter[str] = Counter()
        self.faulted: Counter[str] = Counter()
        self.items: Counter[str] = Counter()  # op -> items (see ``items_of``)
        self.windows: list[FaultWindow] = []
        self._lock = threading.Lock()
        self._fault: tuple[FaultKind, float, float] | None = None  # kind, until (mono), delay
        self._fraction = 1.0
        self._rng = random.Random(0)  # which calls a partial throttle hits: reproducible
        self._throttled = 0
        self.stamps: list[int] = []  # wall ms of every request, in arrival order
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=name,
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inject(self, kind: FaultKind, seconds: float, delay_s: float = 0.3,
               fraction: float = 1.0) -> FaultWindow:
        """Apply ``kind`` to every request (``throttle``: to ``fraction`` of them) for
        ``seconds`` from now."""
        now_ms = time.time_ns() // 10**6
        window = FaultWindow(kind, now_ms, now_ms + round(seconds * 1000), delay_s, fraction)
        with self._lock:
            self._fault = (kind, time.monotonic() + seconds, delay_s)
            self._fraction = fraction
            self.windows.append(window)
        return window

    def calls_between(self, lo_ms: int, hi_ms: int) -> int:
        """Requests that arrived in [lo_ms, hi_ms) (wall ms)."""
        with self._lock:
            return bisect.bisect_left(self.stamps, hi_ms) - bisect.bisect_left(self.stamps, lo_ms)

    def _throttle_code(self) -> str | None:
        """The error code for this request under a throttle window, or None to let it pass."""
        with self._lock:
            if self._rng.random() >= self._fraction:
                return None
            self._throttled += 1
            return _THROTTLES[self._throttled % 2]

    def clear(self) -> None:
        with self._lock:
            self._fault = None

    def current_fault(self) -> tuple[FaultKind, float, float] | None:
        with self._lock:
            if self._fault is not None and time.monotonic() >= self._fault[1]:
                self._fault = None
            return self._fault

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def snapshot_items(self) -> dict[str, int]:
        with self._lock:
            return dict(self.items)

    def snapshot_consumed(self) -> dict[CapacityKey, float]:
        with self._lock:
            return dict(self.consumed)

    def snapshot_unpriced(self) -> dict[str, int]:
        with self._lock:
            return dict(self.unpriced)

    def _account(self, op: str, body: bytes, status: int, reply: bytes) -> None:
        found = consumed_of(op, body, status, reply, self.index_keys)
        with self._lock:
            if found is None:
                self.unpriced[op] += 1
                return
            for key, units in found:
                self.consumed[key] += units

    def _count(self, op: str, faulted: bool, items: int = 1) -> None:
        with self._lock:
            # Appended under the lock, so the list stays sorted (up to the clock's resolution).
            self.stamps.append(max(time.time_ns() // 10**6, self.stamps[-1] if self.stamps
                                   else 0))
            self.counts[op] += 1
            self.items[op] += items
            if faulted:
                self.faulted[op] += 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPConnection | None = None

            def log_message(self, format: str, *args: object) -> None:
                return  # one line per request would drown the soak's output

            def do_POST(self) -> None:
                self._proxy()

            def do_GET(self) -> None:
                self._proxy()

            def _proxy(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                fault = proxy.current_fault()
                throttle = None
                if fault is not None and fault[0] == "throttle":
                    throttle = proxy._throttle_code()
                    fault = None if throttle is None else fault
                op = operation_of(headers, body)
                proxy._count(op, fault is not None, items_of(op, body))
                if proxy.capacity:
                    body = ask_for_capacity(headers, body)
                if fault is not None:
                    kind, until, delay = fault
                    if throttle is not None:
                        self._answer(400, json.dumps({
                            "__type": f"com.amazonaws.dynamodb.v20120810#{throttle}",
                            "message": "Rate exceeded (injected by the chaos proxy)"}).encode(),
                            {})
                        return
                    if kind == "error":
                        self._answer(500, json.dumps({
                            "__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
                            "message": "injected by the chaos proxy"}).encode(), {})
                        return
                    if kind == "timeout":
                        time.sleep(max(0.0, until - time.monotonic()))
                        self.close_connection = True
                        return
                    if kind == "latency":
                        time.sleep(delay)
                try:
                    status, reply, out_headers = self._forward(body, headers)
                except (OSError, http.client.HTTPException):
                    self.close_connection = True
                    return
                if proxy.capacity:
                    proxy._account(op, body, status, reply)  # a "lost" write is billed too
                if fault is not None and fault[0] == "lost":
                    self.close_connection = True  # applied, but the client never hears it
                    return
                self._answer(status, reply, out_headers)

            def _forward(self, body: bytes, headers: dict[str, str]
                         ) -> tuple[int, bytes, dict[str, str]]:
                send = {k: v for k, v in headers.items() if k not in _HOP}
                for attempt in (1, 2):  # a pooled upstream connection may have gone stale
                    if self.upstream is None:
                        self.upstream = http.client.HTTPConnection(*proxy.target, timeout=60)
                    try:
                        self.upstream.request(self.command, self.path, body, send)
                        resp = self.upstream.getresponse()
                        data = resp.read()
                        return resp.status, data, {k: v for k, v in resp.getheaders()
                                                   if k.lower() not in _HOP}
                    except (OSError, http.client.HTTPException):
                        self.upstream.close()
                        self.upstream = None
                        if attempt == 2:
                            raise
                raise AssertionError("unreachable")

            def _answer(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "content-type" not in {k.lower() for k in headers}:
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
