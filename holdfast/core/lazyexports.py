"""Names a package exports but imports on first use (PEP 562), so importing the package costs
nothing: ``holdfast`` (the public API) and ``holdfast.worker`` (whose health probe, run every
30 s in the container, must not load the whole worker). In ``holdfast.core`` because the
Lambda asset carries ``holdfast/__init__.py`` and that package only."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``where`` from its module."""
    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)
    return __getattr__
