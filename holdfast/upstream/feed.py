"""What a stream sends, as pure functions: seq n of a stream is always the same message.

A stream starts when its id is first seen and then produces ``rate`` messages per second; seq
``n`` becomes available ``n / rate`` seconds after the start. A client that reconnects with
``from_seq`` gets the messages it missed replayed, identical to the first time, then live ones.
"""

from __future__ import annotations

import hashlib
import json
import math

__all__ = ["frame_for", "head_seq", "message_for", "seq_due_s"]


def head_seq(elapsed_s: float, rate: float) -> int:
    """The newest available seq ``elapsed_s`` seconds after the stream started (seq 0 at once)."""
    return max(0, math.floor(elapsed_s * rate + 1e-9))


def seq_due_s(seq: int, rate: float) -> float:
    """Seconds after the start at which ``seq`` becomes available."""
    return seq / rate


def message_for(stream_id: str, seq: int, start_wall_ms: int, rate: float) -> dict[str, object]:
    """The message with this seq: deterministic for (stream id, seq, start, rate)."""
    digest = hashlib.blake2s(f"{stream_id}:{seq}".encode(), digest_size=8).hexdigest()
    return {"seq": seq, "ts": start_wall_ms + round(seq_due_s(seq, rate) * 1000),
            "data": f"{stream_id}/{seq}/{digest}"}


def frame_for(stream_id: str, seq: int, start_wall_ms: int, rate: float) -> str:
    """``message_for`` as the JSON text frame sent on the wire."""
    return json.dumps(message_for(stream_id, seq, start_wall_ms, rate), separators=(",", ":"))
