"""``holdfast up``: the local fleet (local AWS, runner, upstream, workers) and its scenarios."""

from __future__ import annotations

__all__: list[str] = []
