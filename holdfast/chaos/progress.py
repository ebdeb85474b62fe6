"""The soak's progress invariant: a healthy stream held at the end of the chaos phase is
delivering, not only owned. From evidence only: no clock, no I/O.

The other checks read ownership from the table (re-owned in time) and seqs from the recorder
(no gap between the first and the last handled): a stream held by a live session whose
connection died, or that never resumed, passed them all. Here each healthy stream STARTED and
held by a live owner in the last scan of the chaos phase must have had a handler call within
the quiet allowance before the phase ended (or any time after it).
"""

from __future__ import annotations

from holdfast.chaos.evidence import Evidence, Sample
from holdfast.chaos.timeliness import fault_extension
from holdfast.chaos.verdict import Limits, Verdict, Violation
from holdfast.core.schema import STARTED

__all__ = ["QUIET_SLACK_MS", "check_progress"]

# A held stream of the demo upstream gets a frame every 0.1 s: seconds without a call are a
# stall, not a quiet feed. The slack covers a call a busy machine starts late.
QUIET_SLACK_MS = 5000


def quiet_allowed_ms(ev: Evidence, limits: Limits, until_ms: int) -> int:
    """How long before ``until_ms`` a held stream may have been without a handler call: a
    lease and the re-own bound (it may have just been taken over), the slack, more for the
    DynamoDB faults near the end and a kill or pause (a nudge its worker had swallowed)."""
    base = (limits.lease_ms + limits.skew_ms + limits.sweep_ms + limits.scan_ms
            + limits.slack_ms + QUIET_SLACK_MS)
    allowed = base + fault_extension(ev.faults, until_ms - base, base, limits.lease_ms)
    if any(a.kind in ("sigkill", "sigstop", "sigterm")
           and until_ms - allowed - limits.lease_ms <= a.wall_ms <= until_ms
           for a in ev.actions):
        allowed += limits.nudge_visibility_ms
    return allowed


def check_progress(ev: Evidence, limits: Limits, until_ms: int, verdict: Verdict) -> None:
    """Every healthy stream held at the end delivered within the quiet allowance of it (a
    stream started or created later than that is not judged: it may not have begun)."""
    allowed = quiet_allowed_ms(ev, limits, until_ms)
    last: dict[str, Sample] = {}
    for s in sorted(ev.samples, key=lambda s: s.wall_ms):
        if s.wall_ms <= until_ms and s.conn_id not in ev.expected_bad:
            last[s.conn_id] = s
    latest_call: dict[str, int] = {}
    for h in ev.handled:
        latest_call[h.conn_id] = max(latest_call.get(h.conn_id, 0), h.wall_ms)
    begun: dict[str, int] = {}
    for a in ev.actions:
        if a.kind in ("start", "create"):
            begun[a.target] = max(begun.get(a.target, 0), a.wall_ms)
    judged = 0
    for conn_id, s in sorted(last.items()):
        owner = s.live_owner()
        if (s.state != STARTED or s.waiting() or owner is None
                or begun.get(conn_id, 0) > until_ms - allowed):
            continue
        judged += 1
        call = latest_call.get(conn_id)
        if call is None or call < until_ms - allowed:
            verdict.violations.append(Violation(
                "no-progress", conn_id, until_ms,
                f"{conn_id}: held by {owner} at the end, but "
                + ("its handler was never called" if call is None else
                   f"its handler's last call was {until_ms - call} ms before the end")
                + f" (allowed {allowed} ms)"))
    verdict.stats["progress"] = {"judged": judged, "quiet_allowed_ms": allowed}
