"""taskstopped Lambda: an ECS task reported STOPPED -> its worker session declared dead now."""

from __future__ import annotations

__all__: list[str] = []
