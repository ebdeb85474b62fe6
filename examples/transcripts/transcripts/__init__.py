"""A transcription-like Holdfast consumer: every upstream message becomes one segment item."""

from __future__ import annotations

__all__: list[str] = []
