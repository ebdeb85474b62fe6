"""What a soak's checks judge with and produce: the limits, each violation, the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from holdfast.core.handoff import TAKE_TIMEOUT_MS, WARM_TIMEOUT_MS

__all__ = ["Limits", "Verdict", "Violation"]


@dataclass(frozen=True, slots=True)
class Limits:
    lease_ms: int
    heartbeat_ms: int
    skew_ms: int
    sweep_ms: int
    scan_ms: int = 300
    slack_ms: int = 1000
    resume_grace_ms: int = 2000
    nudge_visibility_ms: int = 2000
    handoff_overlap_ms: int = WARM_TIMEOUT_MS + TAKE_TIMEOUT_MS + 1000


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    conn_id: str | None
    at_ms: int
    text: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations
