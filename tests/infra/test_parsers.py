"""Context value parsers: JSON and ``-c key=value`` strings alike, errors naming the key."""

from __future__ import annotations

import re

import pytest

from holdfast.infra.exceptions import SettingsError
from holdfast.infra.parsers import (
    MAX_PORTS,
    boolean,
    check_key_spelling,
    choice,
    context_keys,
    image_uri,
    int_in,
    layer_arn,
    matching,
    tcp_ports,
    tracing_mode,
    worker_check,
)


def test_integers_from_json_or_text_within_their_range() -> None:
    """An int or its decimal text within [lo, hi]; a bool, other text or out of range fails."""
    parse = int_in(1, 10)
    assert parse("k", 3) == 3 and parse("k", " 7 ") == 7
    for bad in (True, "0x3", "3.5", 11, "0"):
        with pytest.raises(SettingsError, match=r"^k="):
            parse("k", bad)


def test_booleans_and_tracing_accept_the_usual_spellings() -> None:
    """true/1/yes and false/0/no; tracing takes off/xray or the old booleans."""
    assert boolean("k", "Yes") is True and boolean("k", 0) is False
    assert tracing_mode("k", True) == "xray" and tracing_mode("k", "OFF") == "off"
    for parse in (boolean, tracing_mode):
        with pytest.raises(SettingsError, match=r"^k="):
            parse("k", "maybe")


def test_choices_and_patterns() -> None:
    """A choice is normalised to lowercase; an empty match clears the setting."""
    assert choice("a", "b")("k", " B ") == "b"
    with pytest.raises(SettingsError, match="one of a, b"):
        choice("a", "b")("k", "c")
    digits = matching(re.compile(r"^\d+$"), "digits")
    assert digits("k", " 12 ") == "12" and digits("k", "") is None
    with pytest.raises(SettingsError, match="expected digits"):
        digits("k", "x")


def test_ports_are_distinct_and_bounded() -> None:
    """Ports as an int, a comma list or a JSON list; repeats kept once; at most MAX_PORTS."""
    assert tcp_ports("k", 443) == (443,) and tcp_ports("k", "443, 8443,443") == (443, 8443)
    assert tcp_ports("k", [80, 443]) == (80, 443)
    for bad in ("0", "http", [True], list(range(1, MAX_PORTS + 2))):
        with pytest.raises(SettingsError, match=r"^k="):
            tcp_ports("k", bad)


TOKEN_URI = "${Token[AWS.AccountId.7]}.dkr.ecr.${Token[AWS.Region.10]}.amazonaws.com/w:1"


@pytest.mark.parametrize("uri", [
    "nginx", "nginx:1.25", "library/nginx:latest", "localhost:5000/worker",
    "public.ecr.aws/aws-observability/aws-otel-collector:v0.43.3",
    "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/holdfast-worker:2024-01-01_1",
    "ghcr.io/acme/worker@sha256:" + "a" * 64, "acme/worker:1@sha256:" + "0f" * 32,
    "[::1]:5000/worker:dev", "My.Registry.example:443/a__b/c-d.e:T_1", TOKEN_URI,
])
def test_image_uris_in_every_usual_form_are_accepted(uri: str) -> None:
    """registry[:port]/repository[:tag][@digest] forms pass, as do values holding CDK tokens."""
    assert image_uri("k", f" {uri} ") == uri
    assert image_uri("k", "") is None


@pytest.mark.parametrize("uri", [
    "my image:1", "worker:1 x", "worker:tag with space", "Worker:1", "repo:", "repo:ta/g",
    "repo@sha256:xyz", "https://ghcr.io/acme/worker", "acme//worker", "acme/worker;rm",
    "a/" + "b" * 254, "ré/worker", "worker:1\tx",
])
def test_impossible_image_uris_are_refused(uri: str) -> None:
    """Spaces, uppercase repositories, empty tags, schemes, over 255 characters: refused."""
    with pytest.raises(SettingsError, match=r"^k=.*expected an image URI"):
        image_uri("k", uri)


def test_layer_arns_need_every_part() -> None:
    """A layer version ARN (partition, region, 12-digit account, name, version) passes; a
    function ARN, a missing version, a short account or free text is refused."""
    for arn in ("arn:aws:lambda:eu-west-1:901920570463:layer:aws-otel-python-arm64-ver-1-32-0:2",
                "arn:aws-cn:lambda:cn-north-1:123456789012:layer:my_layer:10",
                "arn:aws:lambda:${Token[AWS.Region.10]}:901920570463:layer:x:1"):
        assert layer_arn("k", arn) == arn
    for bad in ("arn:aws:lambda:eu-west-1:901920570463:layer:otel",
                "arn:aws:lambda:eu-west-1:90192057046:layer:otel:1",
                "arn:aws:lambda:eu-west-1:901920570463:function:otel:1",
                "arn:aws:lambda:eu-west-1:901920570463:layer:otel:1 x", "otel-layer",
                "arn:aws:lambda:eu-west-1:901920570463:layer:" + "x" * 100 + ":1"):
        with pytest.raises(SettingsError, match=r"^k=.*Lambda layer version ARN"):
            layer_arn("k", bad)


def test_worker_check_runs_the_workers_reading_and_names_the_key() -> None:
    """The worker's check gets {variable: value}; its refusal becomes a SettingsError naming
    the key, the expected shape and the worker's own words; tokens and blanks are not checked."""
    seen: list[dict[str, str]] = []

    def check(env: dict[str, str]) -> None:
        seen.append(dict(env))
        if env["VAR"] != "good":
            raise ValueError("VAR is bad")
    parse = worker_check("VAR", check, "a good value")
    assert parse("k", " good ") == "good" and seen == [{"VAR": "good"}]
    with pytest.raises(SettingsError, match=r"^k='bad': expected a good value; .*VAR is bad"):
        parse("k", "bad")
    assert parse("k", "${Token[X.1]}") == "${Token[X.1]}" and parse("k", " ") is None
    assert len(seen) == 2


def test_misspelt_keys_name_the_setting_meant() -> None:
    """A key close to a known one (case aside) is refused, every such key in one message."""
    known = {"minTasks", "maxTasks", "leaseSeconds"}
    with pytest.raises(SettingsError, match=r"^unknown context key 'minTask': did you mean "
                                            r"'minTasks'\?$"):
        check_key_spelling(["minTask", "minTasks"], known)
    with pytest.raises(SettingsError, match=r"'MAXTASKS'.*'maxTasks'.*; .*'lease_seconds'.*"
                                            r"'leaseSeconds'"):
        check_key_spelling(["MAXTASKS", "lease_seconds"], known)


def test_keys_far_from_ours_and_cdk_flags_are_left_alone() -> None:
    """The app's own keys, and keys with ':' or '@' however close, are never refused."""
    check_key_spelling(["minTasks", "myTeam", "cli-telemetry", "aws:cdk:minTasks", "minTasks@2",
                        "@aws-cdk/core:minTasks", "acknowledged-issue-numbers"],
                       {"minTasks", "maxTasks"})


def test_context_keys_come_from_the_lookups_node_or_mapping() -> None:
    """A mapping's get gives its keys, a node's try_get_context its get_all_context(); any other
    callable gives none."""
    class Node:
        def get_all_context(self) -> dict[str, object]:
            return {"minTask": 3}

        def try_get_context(self, key: str) -> object:
            return self.get_all_context().get(key)

    assert context_keys({"a": 1, "b": 2}.get) == ["a", "b"]
    assert context_keys(Node().try_get_context) == ["minTask"]
    assert context_keys(lambda key: None) == []
