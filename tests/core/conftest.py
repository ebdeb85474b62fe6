"""Fixtures of the lease-store tests: a client on each backend, a settable clock, a store."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.store import LeaseStore
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock


@pytest.fixture
def ddb(any_aws: LocalAws) -> Any:
    return client_for(any_aws, "dynamodb")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(any_aws: LocalAws, ddb: Any, clock: Clock) -> LeaseStore:
    return LeaseStore(ddb, any_aws.table, lease_ms=LEASE_MS, skew_ms=SKEW_MS, clock=clock)
