"""Holdfast: leased, self-healing fleets of outbound WebSocket connections.

Kept import-free on purpose: ``holdfast.core`` is shipped inside the Lambda asset and must
not drag the CLI, the local AWS launcher or rich along with it.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
