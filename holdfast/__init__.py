"""Holdfast: leased, self-healing fleets of outbound WebSocket connections.

The public API, importable from here: ``Message`` (what a handler receives), ``Handler``
(its type), the sink fence (``fenced_put``, ``fence_key``, ``StaleEpoch``), the test
fixture's types (``LocalFleet``, ``FleetOptions``, ``FleetTiming``), and what a resume protocol
of your own implements (``ResumeProtocol``, ``Parsed``, ``parse_json_seq``). Everything under
``holdfast.<module>`` that is not listed here is private and may change.

The names are resolved on first use (PEP 562), not at import: ``holdfast.core`` ships inside
the Lambda asset with this file, and must not drag the worker, the CLI or rich along with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holdfast.core.lazyexports import lazy_exports

__all__ = ["FleetOptions", "FleetTiming", "Handler", "LocalFleet", "Message", "Parsed",
           "ResumeProtocol", "StaleEpoch", "__version__", "fence_key", "fenced_put",
           "parse_json_seq"]

__version__ = "0.1.0"

# Public name -> the module it lives in.
_PUBLIC = {
    "Message": "holdfast.worker.handler",
    "Handler": "holdfast.worker.handler",
    "StaleEpoch": "holdfast.sink",
    "fence_key": "holdfast.sink",
    "fenced_put": "holdfast.sink",
    "LocalFleet": "holdfast.testing",
    "FleetOptions": "holdfast.testing",
    "FleetTiming": "holdfast.testing",
    # A resume protocol of your own (HOLDFAST_PROTOCOL='package.module:factory').
    "ResumeProtocol": "holdfast.worker.protocol",
    "Parsed": "holdfast.worker.protocol",
    "parse_json_seq": "holdfast.worker.protocol",
}

if TYPE_CHECKING:
    from holdfast.sink import StaleEpoch, fence_key, fenced_put
    from holdfast.testing import FleetOptions, FleetTiming, LocalFleet
    from holdfast.worker.handler import Handler, Message
    from holdfast.worker.protocol import Parsed, ResumeProtocol, parse_json_seq
else:
    # Only at run time: seen by a type checker, a module ``__getattr__`` makes every name
    # exist (``from holdfast import Mesage`` passed ``mypy --strict`` as ``Any``).
    __getattr__ = lazy_exports(__name__, _PUBLIC)
