"""holdfast.core.tracing: off by default, the OTLP-JSON line format, the no-SDK fallback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from holdfast.core import names, tracing
from holdfast.core.nudge import TRACE_ATTRIBUTE, Nudge, trace_attributes, traceparent_of
from holdfast.fleet.procs import REPO_ROOT


def _run(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), **env},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_span_line_is_one_otlp_json_object() -> None:
    """Hex ids, the parent, OTLP kind, nanosecond strings and typed attributes, one line."""
    provider = TracerProvider(resource=Resource.create({"service.name": "t"}))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent") as parent:
        child = tracer.start_span("child", attributes={
            names.TRACE_ATTR_STREAM_ID: "s-1", "n": 3, "ok": True, "x": 1.5})
        child.end()
    line = tracing.span_line(child)  # type: ignore[arg-type]
    assert line.endswith("\n") and line.count("\n") == 1
    obj = json.loads(line)
    assert obj["traceId"] == format(parent.get_span_context().trace_id, "032x")
    assert obj["parentSpanId"] == format(parent.get_span_context().span_id, "016x")
    assert len(obj["spanId"]) == 16 and obj["name"] == "child" and obj["kind"] == 1
    assert int(obj["endTimeUnixNano"]) >= int(obj["startTimeUnixNano"]) > 0
    assert {a["key"]: a["value"] for a in obj["attributes"]} == {
        names.TRACE_ATTR_STREAM_ID: {"stringValue": "s-1"}, "n": {"intValue": "3"},
        "ok": {"boolValue": True}, "x": {"doubleValue": 1.5}}
    assert {"key": "service.name", "value": {"stringValue": "t"}} in obj["resource"][
        "attributes"]


def test_unknown_mode_is_refused() -> None:
    """A typo in HOLDFAST_TRACING is an error, not silently off."""
    with pytest.raises(ValueError, match="HOLDFAST_TRACING"):
        tracing.mode_of({names.ENV_TRACING: "xray"})
    assert tracing.mode_of({}) == "off"


def test_nudge_carries_traceparent_as_a_message_attribute() -> None:
    """The trace context is a string attribute, read back by traceparent_of; none when off."""
    tp = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    nudge = Nudge("c-1", "released", 3, traceparent=tp)
    attrs = trace_attributes(nudge.traceparent)
    assert attrs == {TRACE_ATTRIBUTE: {"DataType": "String", "StringValue": tp}}
    assert traceparent_of({"MessageAttributes": attrs}) == tp
    assert trace_attributes(Nudge("c-1", "released").traceparent) == {}
    assert traceparent_of({}) is None and traceparent_of({"MessageAttributes": 3}) is None
    assert nudge == Nudge("c-1", "released", 3)  # the trace is not part of the nudge's identity


def test_off_by_default_installs_nothing(tmp_path: Path) -> None:
    """Unset: the global provider stays the API's proxy, no span starts, no file is written."""
    out = _run(f"""
        from opentelemetry import trace
        from holdfast.core import tracing
        import holdfast.worker.__main__  # the worker's own import path, too
        assert tracing.setup("holdfast-worker") is False
        assert not tracing.enabled()
        assert tracing.start_span("claim", "s") is None and tracing.inject(None) is None
        with tracing.attached("00-{"1" * 32}-{"2" * 16}-01"):
            pass
        print(type(trace.get_tracer_provider()).__name__)
    """, {names.ENV_TRACE_FILE: str(tmp_path / "spans.jsonl")})
    assert out == "ProxyTracerProvider"
    assert list(tmp_path.iterdir()) == []


def test_file_mode_appends_linked_spans(tmp_path: Path) -> None:
    """file: spans are appended as lines; an attached traceparent makes the next span a child."""
    spans = tmp_path / "spans.jsonl"
    spans.write_text("earlier line\n")
    _run("""
        from holdfast.core import tracing
        assert tracing.setup("holdfast-router")
        route = tracing.start_span("route", "s-1")
        tp = tracing.inject(route)
        route.end()
        with tracing.attached(tp):
            claim = tracing.start_span("claim", "s-1", worker_id="w1")
        claim.end()
        tracing.shutdown()
    """, {names.ENV_TRACING: "file", names.ENV_TRACE_FILE: str(spans)})
    lines = spans.read_text().splitlines()
    assert lines[0] == "earlier line"
    route, claim = (json.loads(line) for line in lines[1:])
    assert claim["traceId"] == route["traceId"] and claim["parentSpanId"] == route["spanId"]
    assert {"key": names.TRACE_ATTR_WORKER_ID, "value": {"stringValue": "w1"}} in claim[
        "attributes"]


def test_no_sdk_means_off(tmp_path: Path) -> None:
    """Without opentelemetry installed (a Lambda without the ADOT layer) the router imports
    and tracing stays off even when asked for."""
    out = _run("""
        import sys
        for name in ("opentelemetry", "opentelemetry.sdk", "opentelemetry.trace"):
            sys.modules[name] = None  # ImportError on import
        from holdfast.core import tracing
        import holdfast.lambdas.router.handler
        assert tracing.start_span("route", "s") is None
        print(tracing.enabled())
    """, {names.ENV_TRACING: "otlp", "AWS_DEFAULT_REGION": "us-east-1",
          names.ENV_TABLE: "t", names.ENV_QUEUE_URL: "http://q"})
    assert out == "False"


def test_a_handed_on_nudge_keeps_its_trace() -> None:
    """A stopping worker's fresh copy of a nudge carries the same traceparent attribute (and
    one more hop: holdfast.core.nudge.HOPS)."""
    from holdfast.worker.settle import copy_of

    tp = "00-" + "3" * 32 + "-" + "4" * 16 + "-01"
    body = '{"conn_id":"c1","reason":"moved","epoch":null}'
    received = {"Body": body, "MessageAttributes": {
        TRACE_ATTRIBUTE: {"StringValue": tp, "DataType": "String", "StringListValues": []}}}
    assert copy_of(2, received) == {
        "Id": "2", "MessageBody": '{"conn_id":"c1","reason":"moved","epoch":null,"hops":1}',
        "MessageAttributes": {TRACE_ATTRIBUTE: {"DataType": "String", "StringValue": tp}}}
    assert "MessageAttributes" not in copy_of(0, {"Body": body})
