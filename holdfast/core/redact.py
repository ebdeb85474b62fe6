"""URLs made safe for logs, ``last_error`` and CLI output, as pure functions.

A ``ws_url`` may carry secrets anywhere: user info (``wss://user:pw@h/``), the path
(``/token/SECRET``), matrix parameters (``;jsessionid=SECRET``), the query and the fragment.
``redact`` keeps the scheme, host, port and query parameter names; the path becomes a short
hash (the same path always gives the same hash, so log lines of one stream can be matched up)
unless ``paths`` is set (``HOLDFAST_LOG_URL_PATHS``), and then matrix parameter values are
still masked. ``scrub`` removes a URL's secrets from any text (an exception message, a stored
``last_error``).
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, quote, urlsplit

from holdfast.core.model import MAX_URL_LEN

__all__ = ["MASK", "path_hash", "redact", "redact_urls_in", "scrub"]

MASK = "***"
_MAX_KEY = 64
_MIN_SECRET = 4  # shorter values are replaced only where the whole URL appears
# A WebSocket URL inside free text (a message body that could not be parsed): up to a
# quote, a backslash or whitespace, the ends of a URL inside JSON.
_URL_IN_TEXT = re.compile(r"wss?://[^\s\"'\\]+", re.IGNORECASE)


def path_hash(path: str) -> str:
    """The 8-hex-digit hash ``redact`` shows instead of a path."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def redact(url: str, *, paths: bool = False) -> str:
    """``url`` without user info, query values, matrix parameters or fragment. Never raises.

    ``wss://u:pw@feed.example.com:8443/cam/17;sid=x?token=abc#f`` becomes
    ``wss://feed.example.com:8443/<1f0c9a2e>?token=***`` (``paths``:
    ``wss://feed.example.com:8443/cam/17;sid=***?token=***``).
    """
    try:
        parts = urlsplit(str(url)[:MAX_URL_LEN])
        host = parts.netloc.rpartition("@")[2]
        head = f"{parts.scheme.lower()}://{host}" if parts.netloc or parts.scheme in (
            "ws", "wss") else (f"{parts.scheme.lower()}:" if parts.scheme else "")
        if paths:
            path = "/".join(_mask_matrix(segment) for segment in parts.path.split("/"))
        else:
            path = parts.path if parts.path in ("", "/") else f"/<{path_hash(parts.path)}>"
        query = "&".join(_mask_param(c) for c in parts.query.split("&") if c)
        return f"{head}{path}" + (f"?{query}" if query else "")
    except Exception:  # a log helper must not fail on garbage
        return "<unparseable url>"


def _mask_param(component: str) -> str:
    """``key=***``; a component without ``=`` is all value (``?SECRET``): ``***``."""
    if "=" not in component:
        return MASK
    key = parse_qsl(component, keep_blank_values=True)[0][0]
    return f"{quote(key[:_MAX_KEY], safe='')}={MASK}"


def _mask_matrix(segment: str) -> str:
    name, sep, params = segment.partition(";")
    if not sep:
        return segment
    return name + "".join(f";{p.partition('=')[0][:_MAX_KEY]}={MASK}" for p in params.split(";"))


def scrub(text: str, url: str, *, paths: bool = False) -> str:
    """``text`` with ``url`` and each of its secrets replaced as ``redact`` shows them."""
    if not text or not url:
        return text
    try:
        parts = urlsplit(url[:MAX_URL_LEN])
        userinfo = parts.netloc.rpartition("@")[0]
        secrets = [userinfo, *userinfo.split(":"), parts.fragment]
        secrets += [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
        # As written too: decoding turns "+" into a space, so a base64 signature's decoded
        # form never matched the text an error quotes.
        secrets += [c.partition("=")[2] for c in parts.query.split("&") if "=" in c]
        secrets += [c for c in parts.query.split("&") if c and "=" not in c]
        for segment in parts.path.split("/"):
            secrets += [p.partition("=")[2] or p for p in segment.split(";")[1:]]
        swaps = {url: redact(url, paths=paths)}
        if not paths:
            bare = "/".join(segment.partition(";")[0] for segment in parts.path.split("/"))
            for path in (bare, parts.path):  # with and without matrix parameters
                if len(path) >= _MIN_SECRET:
                    swaps[path] = f"/<{path_hash(parts.path)}>"
        swaps.update((s, MASK) for s in secrets if len(s) >= _MIN_SECRET and s not in swaps)
        out = text
        for secret in sorted(swaps, key=len, reverse=True):
            out = out.replace(secret, swaps[secret])
            if (quoted := quote(secret, safe="")) != secret:
                out = out.replace(quoted, swaps[secret])
        return out
    except Exception:  # a log helper must not fail on garbage
        return "<error text withheld: it could not be scrubbed>"


def redact_urls_in(text: str, *, paths: bool = False) -> str:
    """``text`` with every ws:// or wss:// URL in it shown as ``redact`` shows it: for text
    whose URL is not known apart (a nudge that could not be parsed)."""
    return _URL_IN_TEXT.sub(lambda m: redact(m.group(0), paths=paths), text)
