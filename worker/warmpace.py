"""The pace of a stopping worker's warm handoffs (``worker.stopping``, step 1): how many it
offers at once (``warm_at_once``: the fewest that fit the warm phase), how many it grows to
once the phase has a pace (``warm_slots``, ``warm_pace``), and which streams at its queue's end
the offers will not reach before the phase ends (``beyond_warm_reach``: drained and released
at once). Pure arithmetic on counts and milliseconds: ``stop_streams`` (``worker.stopping``)
starts the phase with ``warm_at_once``, ``Handoffs.offer_at_stop`` (``worker.handoff``) asks
``warm_pace`` as the phase goes on.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["WARM_AT_ONCE_AIM", "WARM_AT_ONCE_AT_STOP", "WARM_AT_ONCE_LEAST", "WARM_CYCLE_MS",
           "WARM_PACE_AFTER_MS", "WARM_REACH_SLACK", "WARM_SLOTS_AIM", "beyond_warm_reach",
           "warm_at_once", "warm_pace", "warm_slots"]

# Warm handoffs a stopping worker has in flight at once (``warm_at_once``, ``warm_slots``); it
# offers the next as one ends, for as long as an offer can still end before the drain
# deadline, and releases the rest break-before-make, still to their named successors. 100
# offered at once by each stopping worker (the bench's deploy) queued past the warm-up wait
# (30-99 % missed it) and past the stop budget; 20 at once, with 80 releases beside them,
# slowed the warm ones to the releases' pace. Fewer at once, fewer in each gap's way: in the
# bench's one-at-a-time deploy (100 streams per worker, 25 s budget) the gap was p50 / p99
# 0.25 / 0.42-0.82 s with 20 at once, 0.19 / 0.33 with 10, 0.16 / 0.27 with 5 (the machine's
# CPU was full in the handoffs' seconds at 20); the stop took 3-7 s, 4-8 s and 10 s. So a stop
# runs the fewest at once that hand its streams over in three quarters of its warm phase, at a
# cycle of ``WARM_CYCLE_MS`` each.
WARM_AT_ONCE_AT_STOP: Final = 20  # the most
WARM_AT_ONCE_LEAST: Final = 5
# One warm handoff's cycle (WARM, connect, READY, the next frame, the transfer, TAKE), as
# measured with 5 at once on the local fleet: 100 streams in 10 s.
WARM_CYCLE_MS: Final = 500
WARM_AT_ONCE_AIM: Final = 0.75  # the share of the warm phase the first estimate aims at
# The warm phase's pace is taken after this long, and its reach over-estimated this much: a
# stream released early that an offer would have reached loses its warm handoff, one kept
# waiting past the phase loses budget for its release. A SIGTERMed worker with 1,000 streams
# and 8 s handed 65-96 over warm in the phase's 1.8 s, and the other 900 waited it out
# delivering before their releases began: in 3 of 5 runs some 200-290 missed the budget.
WARM_PACE_AFTER_MS: Final = 500
WARM_REACH_SLACK: Final = 1.5
# More warm offers are added early enough to reach the queue in this share of the time left:
# aiming at all of it, a new-first deploy (three stops at once on the bench's machine) added
# them only in the phase's last seconds and 46 of 300 streams were drained cold.
WARM_SLOTS_AIM: Final = 0.5


def _slot_reach(per_offer_ms: float, time_ms: float, share: float) -> float:
    """How many offers one slot reaches in ``share`` of ``time_ms`` at ``per_offer_ms`` each:
    those it begins then and the one in flight. The one rule behind how many slots a stop
    starts with, how many it grows to, and what the slots it has will not reach."""
    return time_ms * share / per_offer_ms + 1


def beyond_warm_reach(waiting: int, offered: int, slot_ms: int, left_ms: int, at_once: int,
                      ) -> int:
    """How many of the ``waiting`` streams (the last of the stop's warm queue) no warm offer
    will reach before the warm phase ends, at the pace so far per offer in flight
    (``offered`` begun in ``slot_ms``, as ``warm_slots``: a new one begins as one ends, so
    after the first ``at_once`` this is the pace they end at) with ``WARM_REACH_SLACK``, for
    the ``at_once`` slots: those are drained and released now, not at the phase's end. Asked
    only once the phase has a pace (``warm_pace``)."""
    if offered <= 0 or slot_ms <= 0 or left_ms <= 0:
        return 0
    reach = at_once * _slot_reach(slot_ms / offered, left_ms, WARM_REACH_SLACK)
    return max(0, waiting - math.ceil(reach))


def warm_at_once(streams: int, phase_ms: int) -> int:
    """How many warm handoffs a stop of ``streams`` runs at once in a warm phase of
    ``phase_ms``: the fewest that reach them in ``WARM_AT_ONCE_AIM`` of it at
    ``WARM_CYCLE_MS`` each, between ``WARM_AT_ONCE_LEAST`` and ``WARM_AT_ONCE_AT_STOP``."""
    if phase_ms <= 0:
        return WARM_AT_ONCE_AT_STOP
    need = math.ceil(streams / _slot_reach(WARM_CYCLE_MS, phase_ms, WARM_AT_ONCE_AIM))
    return max(WARM_AT_ONCE_LEAST, min(WARM_AT_ONCE_AT_STOP, need))


def warm_slots(waiting: int, offered: int, slot_ms: int, left_ms: int, at_once: int) -> int:
    """The warm offers to keep in flight from now on: as many as reach the ``waiting`` streams
    in half of ``left_ms`` (``WARM_SLOTS_AIM``) at the pace so far per offer in flight
    (``offered`` begun in ``slot_ms``, the offers allowed in flight summed over the phase's
    milliseconds); at least ``at_once`` (a stop starts with the fewest, ``warm_at_once``,
    and adds more only when the pace says they will not do: a stream reached late is still
    warm, one drained is not), at most ``WARM_AT_ONCE_AT_STOP``."""
    if offered <= 0 or slot_ms <= 0 or left_ms <= 0:
        return at_once
    need = math.ceil(waiting / _slot_reach(slot_ms / offered, left_ms, WARM_SLOTS_AIM))
    return max(at_once, min(WARM_AT_ONCE_AT_STOP, need))


def warm_pace(elapsed_ms: int, waiting: int, offered: int, slot_ms: int, left_ms: int, *,
              at_once: int) -> tuple[int, int]:
    """A stop's warm phase, ``elapsed_ms`` in: the warm offers to keep in flight
    (``warm_slots``) and how many of the queue's last streams to drain now
    (``beyond_warm_reach``, for that many slots). Nothing changes before
    ``WARM_PACE_AFTER_MS``: the phase's first offers, all begun at once, would make it look
    slow, and a stream drained early that an offer would have reached loses its warm handoff."""
    if elapsed_ms < WARM_PACE_AFTER_MS:
        return at_once, 0
    wider = warm_slots(waiting, offered, slot_ms, left_ms, at_once)
    return wider, beyond_warm_reach(waiting, offered, slot_ms, left_ms, wider)
