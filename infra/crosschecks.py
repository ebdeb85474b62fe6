"""The checks of ``Settings`` that read more than one field: timings the worker would refuse,
Fargate's CPU and memory pairs, buffers that must fit the task's memory, the stop budget
against ECS's stop timeout, capacity ranges, a removal the table's protection would refuse.

Apart from ``infra.settings``, which parses each field alone: each check here names the
context keys it read (``k``), so an error says what to change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from holdfast.core import names
from holdfast.core.exceptions import ConfigError
from holdfast.core.framebuffers import check_buffers_fit
from holdfast.core.rules import LeaseTiming
from holdfast.infra.exceptions import SettingsError
from holdfast.infra.limits import (
    FARGATE_MEMORY,
    LOG_RETENTION_DAYS,
    MAX_STOP_TIMEOUT_S,
    STOP_EXIT_S,
)

if TYPE_CHECKING:
    from holdfast.infra.settings import Settings

__all__ = ["check_cross_field"]


def check_cross_field(s: Settings, k: Callable[[str], str]) -> None:
    """Raise ``SettingsError`` naming the keys (``k``: field -> context key) of the first
    combination of ``s``'s fields that cannot deploy or run."""
    try:
        LeaseTiming.from_env(s.timing_environment)  # as the worker and Lambdas read it
    except ConfigError as exc:
        raise SettingsError(f"{k('lease_seconds')}/{k('heartbeat_seconds')}/"
                            f"{k('skew_ms')}: {exc}") from None
    if s.min_tasks > s.max_tasks:
        raise SettingsError(f"{k('min_tasks')}={s.min_tasks} is above "
                            f"{k('max_tasks')}={s.max_tasks}")
    memory = FARGATE_MEMORY.get(s.task_cpu)
    if memory is None:
        raise SettingsError(f"{k('task_cpu')}={s.task_cpu}: Fargate allows "
                            f"{', '.join(map(str, FARGATE_MEMORY))}")
    if s.task_memory_mib not in memory:
        raise SettingsError(
            f"{k('task_memory_mib')}={s.task_memory_mib}: with {s.task_cpu} CPU units "
            f"Fargate allows {memory.start}..{memory.stop - 1} MiB in steps of {memory.step}")
    try:  # the worker's own check, on what the stack gives it (it would exit 2 at start)
        check_buffers_fit({names.ENV_MAX_CONNECTIONS: str(s.max_connections_per_task),
                           names.ENV_TASK_MEMORY_MIB: str(s.task_memory_mib)})
    except ConfigError as exc:
        raise SettingsError(f"{k('max_connections_per_task')}/{k('task_memory_mib')}: "
                            f"{exc}") from None
    if s.log_retention_days not in LOG_RETENTION_DAYS:
        raise SettingsError(f"{k('log_retention_days')}={s.log_retention_days}: "
                            f"CloudWatch allows {sorted(LOG_RETENTION_DAYS)}")
    # A graceful stop checkpoints and releases every lease within shutdown_seconds; ECS
    # must not SIGKILL before that (10 s for exit and log flush), or the task's leases wait
    # out a full expiry instead of moving at once.
    need = s.shutdown_seconds + STOP_EXIT_S
    if need > MAX_STOP_TIMEOUT_S:
        raise SettingsError(
            f"{k('lease_seconds')}={s.lease_seconds}/{k('heartbeat_seconds')}="
            f"{s.heartbeat_seconds}: their sum is the stop budget, which with "
            f"{STOP_EXIT_S} s to exit must fit ECS's stop timeout of at most "
            f"{MAX_STOP_TIMEOUT_S} s: at most {MAX_STOP_TIMEOUT_S - STOP_EXIT_S} s together")
    if s.stop_timeout_seconds < need:
        raise SettingsError(
            f"{k('stop_timeout_seconds')}={s.stop_timeout_seconds}: must be at least "
            f"the stop budget ({s.shutdown_seconds} s: the worker's default or "
            f"{k('lease_seconds')} + {k('heartbeat_seconds')}, the larger) "
            f"+ {STOP_EXIT_S} = {need} s")
    if s.table_read_min > s.table_read_max:
        raise SettingsError(f"{k('table_read_min')} is above {k('table_read_max')}")
    if s.table_write_min > s.table_write_max:
        raise SettingsError(f"{k('table_write_min')} is above {k('table_write_max')}")
    if s.removal_policy == "destroy" and s.deletion_protection:
        raise SettingsError(f"{k('removal_policy')}=destroy needs "
                            f"{k('deletion_protection')}=false, or the delete would fail")
