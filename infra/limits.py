"""AWS's own limits that the settings are checked against (``infra.settings``) and the network
is built within (``infra.network``): one place for each number the services impose.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FARGATE_MEMORY", "LOG_RETENTION_DAYS", "MAX_STOP_TIMEOUT_S", "STOP_EXIT_S", "VPC_AZS"]

# The values CloudWatch Logs accepts for a retention period.
LOG_RETENTION_DAYS: Final = frozenset({
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
    3288, 3653,
})
# Fargate CPU units -> the memory sizes (MiB) allowed with them.
FARGATE_MEMORY: Final[dict[int, range]] = {
    256: range(512, 2049, 512),
    512: range(1024, 4097, 1024),
    1024: range(2048, 8193, 1024),
    2048: range(4096, 16385, 1024),
    4096: range(8192, 30721, 1024),
    8192: range(16384, 61441, 4096),
    16384: range(32768, 122881, 8192),
}
MAX_STOP_TIMEOUT_S: Final = 120  # ECS: a container's stopTimeout on Fargate
# What a stopping worker needs after its stop budget before ECS's SIGKILL: exit, log flush.
STOP_EXIT_S: Final = 10
# The availability zones a new VPC spans (and so the most NAT gateways it can use).
VPC_AZS: Final = 2
