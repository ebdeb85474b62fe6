"""Log retention: the days a setting names -> the CDK enum CloudWatch Logs understands."""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_logs as logs

__all__ = ["retention"]

_BY_DAYS: Final[dict[int, logs.RetentionDays]] = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS, 7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS, 150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS, 2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS, 2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}


def retention(days: int) -> logs.RetentionDays:
    """The enum member for ``days`` (already validated by ``Settings``); KeyError otherwise."""
    return _BY_DAYS[days]
