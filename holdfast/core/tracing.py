"""OpenTelemetry tracing of the acquisition path; off unless ``HOLDFAST_TRACING`` says so.

One trace per acquisition: the router's (or sweeper's) span for the record, whose W3C
``traceparent`` rides in the nudge's message attributes (``holdfast.core.nudge``), then the
worker's ``claim`` span and its ``connect`` and ``first message handled`` children.

- ``off`` (default): nothing is set up; the API's no-op provider stays, ``start_span`` returns
  None and callers skip their span code, so the per-message path carries nothing.
- ``file``: every span is appended as one OTLP-JSON line (``span_line``) to
  ``HOLDFAST_TRACE_FILE``, synchronously (a killed process loses none; spans are few).
- ``otlp``: batched to the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (http/protobuf).

The SDK is imported only when tracing is on, and a missing SDK means off: the Lambda asset
imports without OpenTelemetry installed (the ADOT layer brings it when tracing is on).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from holdfast.core import names

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.trace import Span

__all__ = ["StreamTrace", "attached", "enabled", "flush", "inject", "mode_of", "setup",
           "shutdown", "span_line", "start_span"]

_TRACEPARENT = "traceparent"
# Set once per process by ``setup``: the component (service) name and, when on, the provider.
_state: dict[str, Any] = {}


def mode_of(env: Mapping[str, str]) -> str:
    """The tracing mode ``env`` asks for; ``ValueError`` names an unknown one."""
    mode = env.get(names.ENV_TRACING, "off").strip().lower() or "off"
    if mode not in names.TRACING_MODES:
        raise ValueError(f"{names.ENV_TRACING} must be one of {', '.join(names.TRACING_MODES)},"
                         f" not {mode!r}")
    return mode


def setup(component: str, env: Mapping[str, str] | None = None) -> bool:
    """Set up tracing for this process as ``component``; True if spans are recorded.

    The first call wins (the local runner imports the router, which sets itself up).
    """
    if "component" in _state:
        return enabled()
    env = os.environ if env is None else env
    mode = mode_of(env)
    _state["component"] = component
    if mode == "off":
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError:
        return False  # asked for, but this runtime has no SDK: stay a no-op
    provider = TracerProvider(resource=Resource.create({"service.name": component}))
    if mode == "file":
        path = env.get(names.ENV_TRACE_FILE)
        if not path:
            raise ValueError(f"{names.ENV_TRACING}=file needs {names.ENV_TRACE_FILE}")
        # Append mode (O_APPEND) and one write per line: processes share the file safely.
        out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        provider.add_span_processor(SimpleSpanProcessor(
            ConsoleSpanExporter(out=out, formatter=span_line)))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["provider"] = provider
    try:
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    except ImportError:
        return True  # our own spans still link the path; AWS calls just go unseen
    BotocoreInstrumentor().instrument()  # type: ignore[no-untyped-call]
    return True


def enabled() -> bool:
    """True once ``setup`` has installed a recording provider."""
    return "provider" in _state


def start_span(name: str, stream_id: str, *, worker_id: str | None = None,
               parent: Span | None = None, start_ns: int | None = None) -> Span | None:
    """A started span carrying the stream (and worker) id; None when tracing is off.

    The parent is ``parent`` if given, else the current context (an ``attached`` nudge).
    """
    if not enabled():
        return None
    from opentelemetry import trace

    attrs: dict[str, str] = {names.TRACE_ATTR_STREAM_ID: stream_id,
                             names.TRACE_ATTR_COMPONENT: str(_state["component"])}
    if worker_id:
        attrs[names.TRACE_ATTR_WORKER_ID] = worker_id
    ctx = trace.set_span_in_context(parent) if parent is not None else None
    return trace.get_tracer("holdfast").start_span(name, context=ctx, attributes=attrs,
                                                   start_time=start_ns)


def inject(span: Span | None) -> str | None:
    """The W3C ``traceparent`` that makes a receiver's spans children of ``span``."""
    if span is None:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get(_TRACEPARENT)


def attached(traceparent: str | None) -> contextlib.AbstractContextManager[object]:
    """Within: the current context is the remote parent ``traceparent`` names (if tracing).

    Off (or no trace): a shared null context, nothing else, on the per-nudge path.
    """
    if not enabled() or not traceparent:
        return _NULL
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({_TRACEPARENT: traceparent})
    return trace.use_span(trace.get_current_span(parent))


_NULL: contextlib.nullcontext[None] = contextlib.nullcontext()


def flush(timeout_ms: int = 2000) -> None:
    """Export what is buffered (the Lambda, at the end of each invocation)."""
    provider: TracerProvider | None = _state.get("provider")
    if provider is not None:
        provider.force_flush(timeout_ms)


def shutdown() -> None:
    """Flush and stop exporting (a graceful process exit)."""
    provider: TracerProvider | None = _state.get("provider")
    if provider is not None:
        provider.shutdown()


class StreamTrace:
    """A worker's spans of one held stream after its claim: ``connect``, then ``first message
    handled``, both children of the stream's ``claim`` span, which has ended by then.

    Created only when tracing is on and dropped at the first handled message, so a held
    stream's per-message path carries one ``is None`` check and nothing else.
    """

    def __init__(self, claim: Span, conn_id: str, worker_id: str) -> None:
        self.claim, self.conn_id, self.worker_id = claim, conn_id, worker_id
        self._connect: Span | None = None
        self._first: Span | None = None

    def connecting(self) -> None:
        """A dial begins; the first one starts ``connect`` (reconnects before it opens count)."""
        if self._connect is None and self._first is None:
            self._connect = start_span(names.SPAN_CONNECT, self.conn_id,
                                       worker_id=self.worker_id, parent=self.claim)

    def connected(self) -> None:
        """The WebSocket is open: ``connect`` ends, waiting for the first message begins."""
        if self._connect is not None:
            self._connect.end()
            self._connect = None
        if self._first is None:
            self._first = start_span(names.SPAN_FIRST_MESSAGE, self.conn_id,
                                     worker_id=self.worker_id, parent=self.claim)

    def close(self) -> None:
        """End what is still open: at the first handled message (the trace is complete, the
        caller drops it), or when the stream stops before it."""
        for span in (self._connect, self._first):
            if span is not None:
                span.end()
        self._connect = self._first = None


# --- the file format: one OTLP-JSON span per line ------------------------------------------
def _value(v: object) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}  # int64 is a string in OTLP JSON
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attributes(attrs: Mapping[str, object] | None) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in (attrs or {}).items()]


def span_line(span: ReadableSpan) -> str:
    """``span`` as one line of OTLP JSON (hex ids, times in unix nanoseconds as strings)."""
    ctx, parent = span.context, span.parent
    obj: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x") if ctx else "",
        "spanId": format(ctx.span_id, "016x") if ctx else "",
        "parentSpanId": format(parent.span_id, "016x") if parent else "",
        "name": span.name,
        "kind": span.kind.value + 1,  # OTLP counts from UNSPECIFIED = 0
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _attributes(span.attributes),
        "status": {"code": span.status.status_code.value},
        "resource": {"attributes": _attributes(span.resource.attributes)},
    }
    return json.dumps(obj, separators=(",", ":")) + "\n"
