"""Resume protocols: how a (re)connection asks the upstream to continue, and how frames carry seq.

The default (``query``) appends ``from_seq=<checkpoint+1>`` to ``ws_url`` and reads JSON text
frames with an integer ``seq``. ``header`` sends the same number in an ``X-From-Seq`` header and
``frame`` sends ``{"from_seq": N}`` as the first frame. ``HOLDFAST_PROTOCOL="pkg.mod:factory"``
plugs in any other: a zero-argument callable returning a ``ResumeProtocol``.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import unquote_plus

from holdfast.core import jsontext
from holdfast.core.model import MAX_SEQ
from holdfast.worker.handler import HandlerLoadError

__all__ = [
    "FirstFrameProtocol",
    "HeaderProtocol",
    "Parsed",
    "QueryParamProtocol",
    "ResumeProtocol",
    "checked",
    "is_seq",
    "load_protocol",
    "parse_json_seq",
    "with_query_param",
]

_NOT_JSON = "not JSON"
_BINARY_JSON = ("a binary frame that looks like JSON with a seq: the built-in protocol reads "
                "seqs from text frames only, so this stream is never checkpointed (send text "
                "frames, or plug in a protocol that parses these)")


@dataclass(frozen=True, slots=True)
class Parsed:
    """A frame as the handler sees it: ``seq`` None when the frame carries no integer seq.

    ``malformed``: a text frame that is not JSON at all (or nests too deep to parse), or whose
    seq is there but not a sequence number (``"42"``, ``42.0``, ``-3``); it is still handed
    on, with seq None, and the connection counts it (``MalformedFrames``) and logs ``why``.
    """

    seq: int | None
    data: str | bytes
    malformed: bool = False
    why: str = ""


@runtime_checkable
class ResumeProtocol(Protocol):
    """What a resume protocol decides; ``next_seq`` is None when there is no checkpoint yet."""

    def url(self, ws_url: str, next_seq: int | None) -> str: ...

    def headers(self, next_seq: int | None) -> dict[str, str]: ...

    def first_frames(self, next_seq: int | None) -> list[str]: ...

    def parse(self, frame: str | bytes) -> Parsed: ...


def with_query_param(url: str, name: str, value: str) -> str:
    """``url`` with ``name=value`` in its query, as text: an existing ``name`` parameter is
    replaced where it stands (later duplicates dropped), else the pair is appended. Every
    other character of the URL is kept as written."""
    base, hash_, fragment = url.partition("#")
    path, _, query = base.partition("?")
    pair = f"{name}={value}"
    out: list[str] = []
    for component in query.split("&") if query else []:
        if unquote_plus(component.partition("=")[0]) != name:
            out.append(component)
        elif pair not in out:
            out.append(pair)
    if pair not in out:
        if out and out[-1] == "":
            out.pop()  # a trailing "&": reuse it
        out.append(pair)
    return f"{path}?{'&'.join(out)}{hash_}{fragment}"


def parse_json_seq(frame: str | bytes, key: str = "seq") -> Parsed:
    """``Parsed(seq, frame)`` for a JSON object frame with an integer ``key``; else seq None.

    Never raises. A binary frame is opaque (no seq, not parsed: its bytes need not be UTF-8);
    one that starts like a JSON object naming ``key`` is ``malformed``, saying why.
    A text frame that is not JSON is ``malformed`` (for one that does not start with ``{``,
    judged by its first character); so is one nesting deeper than the
    interpreter's recursion limit (~1000), which ``json.loads`` refuses with RecursionError:
    uncaught, that one frame killed the stream on every replay.
    """
    if isinstance(frame, bytes):
        # Opaque, but one that looks like a JSON object naming the key says so: an upstream
        # sending its JSON in binary frames was silently never checkpointed, each reconnect
        # resuming wherever the upstream was (a quick look at the first bytes, nothing parsed).
        if frame[:1] == b"{" and f'"{key}"'.encode() in frame[:4096]:
            return Parsed(None, frame, malformed=True, why=_BINARY_JSON)
        return Parsed(None, frame)
    # Only an object can carry a seq; the cheap test spares parsing arrays and scalars (JSON
    # may begin with whitespace: an object after a newline carries its seq too).
    if not frame.startswith("{") and not (frame[:1].isspace() and
                                          frame.lstrip().startswith("{")):
        malformed = not _looks_like_json(frame)
        return Parsed(None, frame, malformed=malformed, why=_NOT_JSON if malformed else "")
    try:
        obj = jsontext.loads(frame)
    except ValueError:
        return Parsed(None, frame, malformed=True, why=_NOT_JSON)
    seq = obj.get(key) if isinstance(obj, dict) else None
    if seq is None:  # no seq, or a null one (a control frame)
        return Parsed(None, frame)
    if is_seq(seq):
        return Parsed(seq, frame)
    # Present but not a sequence number ("42", 42.0, -3): silently seq-less, such a stream
    # never had a checkpoint and resumed wherever the upstream was after every drop.
    return Parsed(None, frame, malformed=True,
                  why=f"its {key!r} is not an integer from 0 to 2**63-1: {str(seq)[:20]!r}")


def is_seq(value: object) -> bool:
    """Whether ``value`` is a sequence number: an int from 0 to 2**63-1 (bool is an int
    subclass: ``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEQ


def checked(parsed: Parsed) -> Parsed:
    """A plugged-in protocol's ``Parsed`` with its seq checked as the built-in parser checks
    it: one that is not a sequence number (-3, True, "42") is handed on seq-less and
    malformed, saying so, never taken as the checkpoint."""
    if parsed.seq is None or is_seq(parsed.seq):
        return parsed
    return Parsed(None, parsed.data, malformed=True,
                  why=f"the protocol plug-in's seq is not an integer from 0 to 2**63-1: "
                      f"{str(parsed.seq)[:20]!r}")


def _looks_like_json(frame: str) -> bool:
    """Whether a text frame that is not an object could be JSON (an array, a number...).

    Judged by its first character only: parsing a large array just to count it would cost
    more than the frame is worth, and such a frame carries no seq either way.
    """
    head = frame.lstrip()[:1]
    return head != "" and (head in '[{"-0123456789' or frame.strip() in ("true", "false",
                                                                           "null"))


class _JsonSeq:
    """What the built-in protocols share: frames are JSON with the seq under ``seq_key``, and
    by default nothing is added to the URL, the headers or the first frames."""

    __slots__ = ()
    seq_key: str

    def url(self, ws_url: str, next_seq: int | None) -> str:
        return ws_url

    def headers(self, next_seq: int | None) -> dict[str, str]:
        return {}

    def first_frames(self, next_seq: int | None) -> list[str]:
        return []

    def parse(self, frame: str | bytes) -> Parsed:
        return parse_json_seq(frame, self.seq_key)


@dataclass(frozen=True, slots=True)
class QueryParamProtocol(_JsonSeq):
    """Resume with a query parameter (default ``from_seq``), replacing any already present.

    The rest of the URL is kept byte for byte (a signed URL stays valid): the parameter is
    appended as text, never re-encoded with the user's query.
    """

    param: str = "from_seq"
    seq_key: str = "seq"

    def url(self, ws_url: str, next_seq: int | None) -> str:
        if next_seq is None:
            return ws_url
        return with_query_param(ws_url, self.param, str(next_seq))


@dataclass(frozen=True, slots=True)
class HeaderProtocol(_JsonSeq):
    """Resume with a request header on the opening handshake."""

    header: str = "X-From-Seq"
    seq_key: str = "seq"

    def headers(self, next_seq: int | None) -> dict[str, str]:
        return {} if next_seq is None else {self.header: str(next_seq)}


@dataclass(frozen=True, slots=True)
class FirstFrameProtocol(_JsonSeq):
    """Resume by sending ``{"<key>": N}`` (or ``{}`` without a checkpoint) as the first frame."""

    key: str = "from_seq"
    seq_key: str = "seq"

    def first_frames(self, next_seq: int | None) -> list[str]:
        return [json.dumps({} if next_seq is None else {self.key: next_seq})]


_BUILTIN: dict[str, type[_JsonSeq]] = {
    "query": QueryParamProtocol, "header": HeaderProtocol, "frame": FirstFrameProtocol}


def load_protocol(spec: str | None) -> ResumeProtocol:
    """``query`` / ``header`` / ``frame``, or ``pkg.mod:factory``; ``HandlerLoadError`` if bad."""
    if not spec or spec in _BUILTIN:
        return _BUILTIN[spec or "query"]()
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise HandlerLoadError(f"HOLDFAST_PROTOCOL={spec[:80]!r} must be one of "
                               f"{', '.join(_BUILTIN)} or 'package.module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
        protocol = factory()
    except Exception as exc:
        raise HandlerLoadError(f"HOLDFAST_PROTOCOL={spec!r} cannot be loaded: "
                               f"{type(exc).__name__}: {exc}") from None
    if not isinstance(protocol, ResumeProtocol):
        raise HandlerLoadError(f"HOLDFAST_PROTOCOL={spec!r} did not return a ResumeProtocol "
                               "(needs url, headers, first_frames and parse)")
    return protocol
