"""The Holdfast worker: holds, heartbeats, resumes and hands over outbound WebSocket streams.

``python -m worker`` runs one (configuration from the environment, see ``worker.config``).
Modules, KCL-style: ``claimer`` (nudges and the fallback sweep), ``holdings`` (claims and
releases), ``held`` (one held stream's lease state), ``delivery`` (which frame reaches the
handler), ``connection`` (one connection task), ``checkpointer`` (checkpoint writes
and self-fencing), ``session`` (the worker's one heartbeat), ``supervisor`` (runs them all and
stops them gracefully); every DynamoDB lease call goes through ``holdfast.core``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holdfast.core.lazyexports import lazy_exports

__all__ = ["Message", "Supervisor", "WorkerConfig", "load_config"]

# Imported on first use, as ``holdfast``'s own names are: ``python -m holdfast.worker.health``
# (the container's health check, every 30 s) then loads the probe, not the whole worker (0.45 s
# and 42 MB a probe), and runpy no longer warns that it was imported before it ran.
_LAZY = {"Message": "holdfast.worker.handler", "Supervisor": "holdfast.worker.supervisor",
         "WorkerConfig": "holdfast.worker.config", "load_config": "holdfast.worker.config"}

if TYPE_CHECKING:
    from holdfast.worker.config import WorkerConfig, load_config
    from holdfast.worker.handler import Message
    from holdfast.worker.supervisor import Supervisor
else:
    # Only at run time: seen by a type checker, a module ``__getattr__`` makes every name
    # exist (``from holdfast import Mesage`` passed ``mypy --strict`` as ``Any``).
    __getattr__ = lazy_exports(__name__, _LAZY)
