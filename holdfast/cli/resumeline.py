"""The line ``holdfast resume`` prints: ``resume_line``.

The command itself (its read, its write, its errors) is ``holdfast.cli.ops``'s; this module
only words the outcome, from the item as it was before the write, so an operator learns what
the stream was, which messages the new checkpoint skips or delivers again, and what still
keeps it from being claimed.
"""

from __future__ import annotations

from holdfast.cli.opscommon import printable
from holdfast.core.model import LeaseItem
from holdfast.core.redact import scrub
from holdfast.core.store import wall_clock_ms

__all__ = ["resume_line"]


def resume_line(item: LeaseItem, *, restarted: bool, after_seq: int | None) -> str:
    """The line ``resume`` prints, from the item as it was before the write."""
    conn_id, seq = item.conn_id, item.last_seq if after_seq is None else after_seq
    where = "its start" if seq is None else f"after last_seq {seq}"
    # Only the desired state was written, and it was STARTED: nothing changed.
    verb = "already started" if item.started and not restarted else "resumed"
    said = f"{verb} {conn_id} from {where}"
    was = item.last_seq
    if after_seq is not None and was != after_seq:
        # The checkpoint moved: said, so a step back (messages delivered again) is not silent.
        if was is None:
            said += f" (it had no checkpoint: messages up to {after_seq} skipped)"
        elif was > after_seq:
            said += f" (was {was}: messages {after_seq + 1}-{was} will be delivered again)"
        else:
            said += f" (was {was}: messages {was + 1}-{after_seq} skipped)"
    left_s = ((item.lease_expires_at_ms or 0) - wall_clock_ms()) / 1000
    if item.lease_owner:
        said += f"; held by {printable(item.lease_owner)}"
    elif left_s > 0 and item.successor and not restarted:
        # Released to a named successor, which takes it within its hold: --now would end the
        # hold and send the stream to whoever polls first.
        said += (f"; handing over to {printable(item.successor)} (within {left_s:.0f} s)")
    elif left_s > 0 and not restarted:
        # A give-up's back-off outlives a stop (only a holder's release ends one), so the
        # operator is told, with the way to end it.
        error = printable(scrub(item.last_error, item.ws_url)[:200]) if item.last_error else ""
        said += (f"; in back-off for {left_s:.0f} s more ({printable(item.status or 'BACKOFF')}"
                 f"{': ' + error if error else ''}); "
                 f"`holdfast resume {conn_id} --now` retries at once")
    return said
