"""What ``LocalFleet.assert_no_loss`` finds in the records, beside the missed-seq check: plain
functions of the recorder's records and the seq checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from holdfast.core.names import LOG_HANDLER_RAISED, LOG_HANDLER_TIMED_OUT
from holdfast.fleet.moves import json_records
from holdfast.fleet.recorder import Handled
from holdfast.fleet.report import SeqCheck

__all__ = ["failing_streams", "last_handler_error", "sink_problems"]


def failing_streams(records: Iterable[Handled], conn_ids: Iterable[str]) -> list[str]:
    """The streams of ``conn_ids`` delivered to whose every handler call raised: the
    handler never completed a message of theirs, whatever their checkpoints say."""
    raised: dict[str, list[int]] = {}
    done: set[str] = set()
    for rec in records:
        if rec.raised:
            raised.setdefault(rec.conn_id, []).append(rec.seq)
        else:
            done.add(rec.conn_id)
    return [f"{c}: every one of its {len(raised[c])} handler calls raised (seqs "
            f"{min(raised[c])}-{max(raised[c])})" for c in conn_ids
            if c in raised and c not in done]


def sink_problems(checks: dict[str, SeqCheck],
                  stored: Callable[[str], Iterable[int]]) -> list[str]:
    """What the user's sink lacks of what each stream's checkpoint says was handled."""
    problems = []
    for conn_id, check in checks.items():
        if check.first is None or check.checkpoint is None:
            continue  # nothing delivered, or nothing checkpointed: nothing claimed handled
        have = set(stored(conn_id))
        lacks = [s for s in range(check.first, check.checkpoint + 1) if s not in have]
        if lacks:
            problems.append(
                f"{conn_id}: the sink lacks {len(lacks)} seq(s) the checkpoint "
                f"{check.checkpoint} says were handled (from {check.first}): {lacks[:10]}")
    return problems


def last_handler_error(lines: Iterable[str], conn_id: str) -> str | None:
    """The last handler failure the workers' JSON log ``lines`` record for ``conn_id``, as
    "seq N: error", or None: a test that timed out says why, not only where the logs are
    (pytest's temporary folder, gone a few runs later)."""
    found = None
    for rec in json_records(lines, conn_id):
        if (rec.get("conn_id") == conn_id
                and rec.get("message") in (LOG_HANDLER_RAISED, LOG_HANDLER_TIMED_OUT)):
            found = f"seq {rec.get('seq')}: {str(rec.get('error'))[:300]}"
    return found
