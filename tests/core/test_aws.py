"""``holdfast.core.aws``'s clients: where their region comes from, and the error without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from holdfast.core.aws import dynamodb_client
from holdfast.core.exceptions import ConfigError


def test_aws_region_is_read_after_botocores_own_sources(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """AWS_REGION (read by the AWS CLI and the CDK, not by botocore) gives the region when
    botocore finds none; AWS_DEFAULT_REGION, botocore's own, wins over it."""
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert dynamodb_client().meta.region_name == "eu-west-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert dynamodb_client().meta.region_name == "us-east-1"


def test_no_region_is_one_line_naming_both_variables(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """With no region anywhere, the error says what to set."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"set AWS_DEFAULT_REGION or AWS_REGION"):
        dynamodb_client()
