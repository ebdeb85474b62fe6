"""moto's server for the local fleet, without three per-request costs that made it the bottleneck.

Found with the start-burst bench (300 streams inserted at once, 3 workers): "routed -> claimed"
was 4-6 s p50 and 7-12 s p99 on a quiet machine with moto 5.2.6, while DynamoDB Local, the
router and the workers sat idle. The workers' SQS receives took 2-11 s each and moto served
5-10 requests a second. A py-spy profile of moto during the burst (CPU-bound, one core):

- a third of its samples in ``DomainDispatcherApplication.get_application``, which for every
  request, under one process-wide lock, lists moto's package directory (a ``stat`` per service)
  and tries every service's URL patterns to learn that a request signed for ``sqs`` is for SQS;
- another third in ``Queue.attributes``, which counts the queue's visible, delayed and in-flight
  messages (three scans of every message) and which moto builds four times per message it
  receives, only to read ``MessageRetentionPeriod``
  (``SQSBackend.is_message_valid_based_on_retention_period``);
- each of those scans asks the time per message through ``moto.core.utils.unix_time``, which
  builds two ``datetime`` objects (and imports ``datetime.UTC``) per call.

``install()`` takes the three out, keeping what moto answers: the application is remembered per
signed (service, region, target prefix) for the services the local stack serves; the retention
check reads the one attribute it needs; ``moto.sqs.models`` asks the clock with ``time.time()``
(every call there is for "now"). Each patch checks that moto still has what it replaces and is
skipped with a line on stderr otherwise, so a moto release that changes them runs unpatched,
slower but correct. Run as ``python -m holdfast.localaws.moto_server`` with moto.server's
arguments.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CACHED_SERVICES", "dispatch_key", "install", "main"]

# The services the local stack serves from moto (DynamoDB only when DynamoDB Local is missing).
# Their application depends on nothing but the signed service, region and target prefix.
CACHED_SERVICES = frozenset({"sqs", "dynamodb"})


def dispatch_key(environ: dict[str, Any]) -> tuple[str, str, str] | None:
    """(service, region, target prefix) of a SigV4-signed request to a cached service, else
    None (unsigned, moto's own API, or another service: moto's dispatch decides)."""
    if str(environ.get("PATH_INFO", "")).startswith("/moto-api"):
        return None
    auth = str(environ.get("HTTP_AUTHORIZATION") or "")
    try:
        # "AWS4-HMAC-SHA256 Credential=AKID/date/region/service/aws4_request, ..."
        scope = auth.split(",", maxsplit=1)[0].split()[1]
        _, _, region, service, _ = scope.split("/")
    except (IndexError, ValueError):
        return None
    if service.lower() not in CACHED_SERVICES:
        return None
    target = str(environ.get("HTTP_X_AMZ_TARGET") or "").split(".", 1)[0]
    return service.lower(), region, target


def _now(original: Callable[..., float], scale: float) -> Callable[..., float]:
    """moto's ``unix_time`` (``scale`` 1) or ``unix_time_millis`` (1000): ``time.time()`` for
    "now", the original for a given datetime."""
    def now(dt: Any = None) -> float:
        return time.time() * scale if dt is None else original(dt)
    return now


def install() -> list[str]:
    """Apply the patches moto still has the hooks for; returns their names."""
    import moto.server
    from moto.sqs import models

    applied: list[str] = []
    dispatcher = getattr(moto.server, "DomainDispatcherApplication", None)
    if dispatcher is not None and hasattr(dispatcher, "get_application"):

        class CachingDispatcher(dispatcher):  # type: ignore[misc, valid-type]
            """moto's dispatcher, remembering the application per signed service."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._by_key: dict[tuple[str, str, str], Any] = {}

            def get_application(self, environ: dict[str, Any]) -> Any:
                key = dispatch_key(environ)
                if key is None:
                    return super().get_application(environ)
                app = self._by_key.get(key)
                if app is None:
                    app = self._by_key[key] = super().get_application(environ)
                return app

        # moto.server.main builds its application from this module-level name.
        setattr(moto.server, "DomainDispatcherApplication", CachingDispatcher)  # noqa: B010
        applied.append("dispatch")

    backend = getattr(models, "SQSBackend", None)
    if backend is not None and hasattr(backend, "is_message_valid_based_on_retention_period"):

        def is_message_valid_based_on_retention_period(
                self: Any, queue_name: str, message: Any) -> bool:
            queue = self.get_queue(queue_name)
            retain_until = float(queue.message_retention_period) + message.sent_timestamp / 1000
            return bool(retain_until > time.time())

        backend.is_message_valid_based_on_retention_period = (
            is_message_valid_based_on_retention_period)
        applied.append("retention")

    if callable(getattr(models, "unix_time", None)) and callable(
            getattr(models, "unix_time_millis", None)):
        models.unix_time = _now(models.unix_time, 1.0)  # type: ignore[attr-defined]
        models.unix_time_millis = _now(models.unix_time_millis, 1000.0)  # type: ignore[attr-defined]
        applied.append("clock")
    return applied


def main(argv: list[str] | None = None) -> None:
    applied = install()
    missing = sorted({"dispatch", "retention", "clock"} - set(applied))
    print(f"holdfast moto_server: patched {', '.join(applied) or 'nothing'}"
          + (f"; moto changed, not patched: {', '.join(missing)}" if missing else ""),
          file=sys.stderr, flush=True)
    import moto.server

    moto.server.main(argv)


if __name__ == "__main__":
    main()
