"""The shared core: table schema, lease rules and the one DynamoDB lease store.

Both the worker and the Lambdas import from here; nothing in this package may depend on the
worker, the CLI or the infrastructure code.
"""

from __future__ import annotations

__all__: list[str] = []
