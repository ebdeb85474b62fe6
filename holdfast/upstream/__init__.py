"""The demo upstream: a loopback WebSocket server of deterministic, resumable sequenced streams.

Used by the demo, the tests, the chaos suite and the benchmarks; ``holdfast upstream`` runs it.
"""

from __future__ import annotations

from holdfast.upstream.connlog import ConnLog, ConnRecord, Overlap
from holdfast.upstream.feed import head_seq, message_for
from holdfast.upstream.server import UpstreamServer

__all__ = ["ConnLog", "ConnRecord", "Overlap", "UpstreamServer", "head_seq", "message_for"]
