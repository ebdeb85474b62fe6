"""The app's writes to its streams' items in the soak: each an action of ``Soak.step``.

- ``stop`` / ``start``: ``desired_state`` set STOPPED or STARTED (``UpdateItem``), as
  ``holdfast stop`` and ``holdfast start`` do (at least two streams stay running);
- ``create``: a new stream (``create_stream``);
- ``overwrite``: a held stream's whole item written again as it was inserted (``PutItem``):
  owner, epoch and checkpoint go, and its holder must take it back
  (``holdfast.core.overwrites``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holdfast.core.schema import STARTED, STOPPED
from holdfast.core.store import wall_clock_ms
from holdfast.core.table import create_stream, inserted_item, set_desired_state

if TYPE_CHECKING:
    from holdfast.chaos.soak import Soak

__all__ = ["APP_WRITES", "AppWrites"]

APP_WRITES = ("stop", "start", "create", "overwrite")


class AppWrites:
    """The app's writes of one soak (its table, streams and random draws)."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak

    def write(self, kind: str, live: list[str]) -> None:
        """One write of ``kind`` (one of ``APP_WRITES``), if one applies now; ``live``: the
        running workers (an overwrite hits only a stream one of them holds)."""
        soak = self.soak
        if kind == "stop" and len(soak.good) - len(soak.stopped) > 2:
            cid = soak.rng.choice([c for c in soak.good if c not in soak.stopped])
            at = wall_clock_ms()
            set_desired_state(soak.ddb, soak.pf.table, cid, STOPPED)
            soak.stopped.add(cid)
            soak.act("stop", cid, at=at)
        elif kind == "start" and soak.stopped:
            cid = soak.rng.choice(sorted(soak.stopped))
            at = wall_clock_ms()
            set_desired_state(soak.ddb, soak.pf.table, cid, STARTED)
            soak.stopped.discard(cid)
            soak.act("start", cid, at=at)
        elif kind == "create":
            cid = f"n{len(soak.good):02d}-s"
            at = wall_clock_ms()
            soak.urls[cid] = f"{soak.pf.base_url}/s/{cid}"
            create_stream(soak.ddb, soak.pf.table, cid, soak.urls[cid])
            soak.good.append(cid)
            soak.act("create", cid, at=at)
        elif kind == "overwrite" and (held := [
                c for c in soak.good if c not in soak.stopped
                and (s := soak.sampler.latest.get(c)) is not None
                and (owner := s.live_owner()) and owner.partition("#")[0] in live]):
            # An app writing its row whole, as it inserted it: owner, epoch and checkpoint go.
            # Over a running holder's: over a dead one's (killed, its session not expired yet)
            # the checkpoint is gone with both (its next holder starts at the upstream's
            # head), a loss the app's write makes (docs/concepts/protocol.md).
            cid = soak.rng.choice(held)
            at = wall_clock_ms()
            soak.ddb.put_item(TableName=soak.pf.table, Item=inserted_item(cid, soak.urls[cid]))
            soak.act("overwrite", cid, "PutItem of the whole item", at=at)
