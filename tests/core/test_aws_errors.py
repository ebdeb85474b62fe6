"""holdfast.core.aws.call: a throttled answer is noted for the process (the heartbeat's cue)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from holdfast.core import aws
from holdfast.core.exceptions import StoreUnavailable


def _refuse(code: str) -> object:
    raise ClientError({"Error": {"Code": code, "Message": code}}, "UpdateItem")


def test_a_throttled_call_is_noted_and_other_errors_are_not() -> None:
    """ThrottlingException marks the process as throttled now; an internal error does not."""
    aws._THROTTLED_AT_S.clear()
    with pytest.raises(StoreUnavailable):
        aws.call("op", _refuse, code="InternalServerError")
    assert aws.throttled_at_s() is None
    with pytest.raises(StoreUnavailable):
        aws.call("op", _refuse, code="ThrottlingException")
    assert aws.throttled_at_s() is not None
    aws._THROTTLED_AT_S.clear()


def test_a_throttle_botocore_retries_itself_is_noted_too() -> None:
    """The clients' retry hook notes every throttled answer, also one a retry then hides."""
    aws._THROTTLED_AT_S.clear()
    aws._note_throttled_answer(response=(None, {"Error": {"Code": "InternalServerError"}}))
    aws._note_throttled_answer(response=None, attempts=2)  # a connection error: no answer
    assert aws.throttled_at_s() is None
    aws._note_throttled_answer(response=(None, {"Error": {"Code": "ThrottlingException"}}))
    assert aws.throttled_at_s() is not None
    aws._THROTTLED_AT_S.clear()
