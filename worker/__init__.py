"""The Holdfast worker: holds, heartbeats, resumes and hands over outbound WebSocket streams.

``python -m worker`` runs one (configuration from the environment, see ``worker.config``).
Modules, KCL-style: ``claimer`` (nudges and the fallback sweep), ``holdings`` (claims and
releases), ``held`` (one held stream's lease state), ``delivery`` (which frame reaches the
handler), ``connection`` (one connection task), ``checkpointer`` (checkpoint writes
and self-fencing), ``session`` (the worker's one heartbeat), ``supervisor`` (runs them all and
stops them gracefully); every DynamoDB lease call goes through ``holdfast.core``.
"""

from __future__ import annotations

from holdfast.worker.config import WorkerConfig, load_config
from holdfast.worker.handler import Message
from holdfast.worker.supervisor import Supervisor

__all__ = ["Message", "Supervisor", "WorkerConfig", "load_config"]
