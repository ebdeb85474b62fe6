"""The Holdfast worker: holds, heartbeats, resumes and hands over outbound WebSocket streams.

``python -m worker`` runs one (configuration from the environment, see ``worker.config``).
Modules, KCL-style: ``claimer`` (nudges and the fallback sweep), ``renewer`` (heartbeats and
self-fencing), ``stream`` (one connection task), ``supervisor`` (owns them all and stops them
gracefully); every DynamoDB lease call goes through ``holdfast.core``.
"""

from __future__ import annotations

from worker.config import WorkerConfig, load_config
from worker.handler import Message
from worker.supervisor import Worker

__all__ = ["Message", "Worker", "WorkerConfig", "load_config"]
