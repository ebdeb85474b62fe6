"""boto3 sessions sharing one model loader, each still reading the environment when made."""

from __future__ import annotations

import pytest

from holdfast.core.boto import new_session


def test_sessions_share_one_loader_and_its_search_path_stays_short() -> None:
    """Every session reads models through one loader (read once per process), and the folder
    each boto3 session adds to its search path is there once, however many sessions."""
    sessions = [new_session() for _ in range(50)]
    loaders = {id(s._session.get_component("data_loader")) for s in sessions}
    assert len(loaders) == 1
    paths = sessions[0]._session.get_component("data_loader").search_paths
    assert len(paths) == len(set(paths)) <= 4


def test_each_session_resolves_region_endpoint_and_credentials_when_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the environment says when a client is made is what it uses: nothing of an earlier
    session's environment is kept (only the models are shared)."""
    for region, url, key in (("eu-west-1", "http://127.0.0.1:1111", "first"),
                             ("us-east-2", "http://127.0.0.1:2222", "second")):
        monkeypatch.setenv("AWS_DEFAULT_REGION", region)
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
        client = new_session().client("dynamodb")
        assert client.meta.region_name == region
        assert client.meta.endpoint_url == url
        assert client._request_signer._credentials.access_key == key
