"""A Lambda-like context object for invoking handlers outside Lambda.

It carries what Powertools and ordinary handlers read: names, ARN, memory, request id, log group
and stream, and ``get_remaining_time_in_millis()`` counting down from the invocation's timeout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["LocalContext"]


@dataclass
class LocalContext:
    """What Lambda passes as ``context``; ``timeout_ms`` starts counting at construction."""

    function_name: str
    timeout_ms: int = 60_000
    memory_limit_in_mb: int = 256
    function_version: str = "$LATEST"
    region: str = "us-east-1"
    account: str = "000000000000"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    monotonic: Callable[[], float] = time.monotonic
    _deadline: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._deadline = self.monotonic() + self.timeout_ms / 1000

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"local/[{self.function_version}]{self.aws_request_id[:8]}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self.monotonic()) * 1000))
