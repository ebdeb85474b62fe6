"""Lease items a careless or hostile writer could insert: each looks STARTED, none is usable.

The soak inserts them into a running fleet; every component must leave them alone (a clear
error, BACKOFF or a skipped record), never hold one RUNNING, never stop on one.
"""

from __future__ import annotations

from typing import Any

from holdfast.core.schema import STARTED

__all__ = ["hostile_items"]


def hostile_items(pk: str, base_url: str) -> dict[str, dict[str, Any]]:
    """Raw items a careless or hostile writer could insert, each with a STARTED-looking face."""
    def item(cid: str, **attrs: dict[str, Any]) -> dict[str, Any]:
        return {"Pk": {"S": f"{pk}{cid}"}, "lease_expires_at_ms": {"N": "0"}, **attrs}
    s = {"S": STARTED}
    return {
        "bad-no-url": item("bad-no-url", desired_state=s),
        "bad-url-type": item("bad-url-type", desired_state=s, ws_url={"N": "5"}),
        "bad-state": item("bad-state", desired_state={"S": "PAUSED"},
                          ws_url={"S": f"{base_url}/s/bad-state"}),
        "bad-metadata": item("bad-metadata", desired_state=s,
                             ws_url={"S": "ws://169.254.169.254/latest/meta-data/"}),
        "bad-file": item("bad-file", desired_state=s, ws_url={"S": "file:///etc/passwd"}),
        "bad-http": item("bad-http", desired_state=s,
                         ws_url={"S": base_url.replace("ws://", "http://") + "/s/bad-http"}),
        "bad-seq-type": item("bad-seq-type", desired_state=s, last_seq={"S": "abc"},
                             ws_url={"S": f"{base_url}/s/bad-seq-type"}),
        # (A number in lease_owner is refused by DynamoDB itself: it keys the owner index.)
        "bad-epoch-type": item("bad-epoch-type", desired_state=s, lease_epoch={"S": "one"},
                               ws_url={"S": f"{base_url}/s/bad-epoch-type"}),
        # NULLs (boto3's resource layer writes None so), which conditions do not read as
        # absent: never claimable, or every checkpoint refused.
        "bad-epoch-null": item("bad-epoch-null", desired_state=s, lease_epoch={"NULL": True},
                               ws_url={"S": f"{base_url}/s/bad-epoch-null"}),
        "bad-seq-null": item("bad-seq-null", desired_state=s, last_seq={"NULL": True},
                             ws_url={"S": f"{base_url}/s/bad-seq-null"}),
        "bad id spaces": item("bad id spaces", desired_state=s,
                              ws_url={"S": f"{base_url}/s/spaces"}),
    }
