"""``HoldfastFleet`` in a user's own stack: the same template as our app's, with no context.

(a) is our app as the CLI synthesizes it (``cli_assembly``: app.py with our cdk.json and its
feature flags); (b) is a plain ``Stack`` holding ``HoldfastFleet(stack, "Fleet", ...)`` in an
``App()`` with no context at all, as a user's app without our cdk.json has it. Logical ids
differ (the fleet's id is part of them in (b)), so both templates are rewritten with each
resource named by its construct path below the fleet before they are compared.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from holdfast.infra.settings import Settings
from tests.infra.conftest import REPO, STACK, cdk_json, cli_env

_FLEET_IDS = ("Default", "Fleet")  # our stack's fleet id, and the user's in (b)


def _short_path(path: str) -> str:
    """``Holdfast/Fleet/Leases/Table/Resource`` -> ``Leases/Table/Resource``."""
    parts = path.split("/")[1:]  # the stack's name
    if parts and parts[0] in _FLEET_IDS:
        parts = parts[1:]
    return "/".join(parts)


def _normalized(template: dict[str, Any], paths: dict[str, str],
                fleet_id: str) -> dict[str, Any]:
    """``Resources`` with every logical id (keys and references) replaced by ``<path>``, the
    fleet's place in construct paths and generated names by ``<fleet>``, construct metadata
    dropped: what is left differs only if the resources do."""
    text = json.dumps(template["Resources"], sort_keys=True)
    # Longest first: no id is a prefix of another's replacement.
    for logical in sorted(paths, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(logical)}\b", f"<{paths[logical]}>", text)
    # Name tags hold the construct path; generated names (task family, scaling policies,
    # construct ids made of a unique id) the path's letters and its hash.
    text = text.replace(f'"{STACK}/{fleet_id}/', '"<fleet>/')
    text = re.sub(rf"{STACK}(?:{fleet_id})?(\w*?)[0-9A-F]{{8}}\b", r"<fleet>\1", text)
    resources: dict[str, Any] = json.loads(text)
    for res in resources.values():
        res.pop("Metadata", None)
        _sort_statement_lists(res)
    # Version reporting is the app's choice (the CLI's), not part of the fleet.
    return {k: v for k, v in resources.items() if v["Type"] != "AWS::CDK::Metadata"}


def _sort_statement_lists(node: Any) -> None:
    """Sort each IAM statement's Action and Resource lists, in place.

    Their order is the one thing the fleet cannot pin: the CDK sorts merged statements'
    lists under the *stack's* ``@aws-cdk/aws-iam:minimizePolicies`` flag, a user's stack may
    not set it, and a construct cannot set context on a stack that already has children.
    IAM gives the order no meaning; which actions on which resources is still compared.
    """
    if isinstance(node, dict):
        for statement in node.get("Statement", []) if isinstance(node.get("Statement"),
                                                                  list) else []:
            for key in ("Action", "Resource"):
                if isinstance(statement.get(key), list):
                    statement[key].sort(key=lambda v: json.dumps(v, sort_keys=True))
        for value in node.values():
            _sort_statement_lists(value)
    elif isinstance(node, list):
        for value in node:
            _sort_statement_lists(value)


def _cli_paths(template: dict[str, Any]) -> dict[str, str]:
    """Logical id -> short construct path, from the CLI's ``aws:cdk:path`` metadata."""
    return {logical: _short_path(res["Metadata"]["aws:cdk:path"])
            for logical, res in template["Resources"].items()}


@pytest.fixture(scope="module")
def user_stack() -> tuple[dict[str, Any], dict[str, str]]:
    """(b): a plain Stack with ``HoldfastFleet`` in an App with no context; its template and
    logical id -> short path."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet

    app = cdk.App()
    assert app.node.try_get_context("@aws-cdk/aws-ec2:restrictDefaultSecurityGroup") is None
    stack = cdk.Stack(app, STACK)
    HoldfastFleet(stack, "Fleet", settings=Settings.from_context(
        {k: v for k, v in cdk_json()["context"].items() if not k.startswith("@")}.get),
        worker_image_directory=REPO)
    template = app.synth().get_stack_by_name(STACK).template
    paths = {stack.resolve(c.logical_id): _short_path(c.node.path)
             for c in stack.node.find_all() if isinstance(c, cdk.CfnElement)}
    return dict(template), paths


def test_user_stack_has_the_same_resources(template_json: dict[str, Any],
                                           user_stack: tuple[dict[str, Any], dict[str, str]],
                                           ) -> None:
    """No feature flags in the app: same resource types, counts and properties (assets too)."""
    user_template, user_paths = user_stack
    ours = _normalized(template_json, _cli_paths(template_json), "Default")
    theirs = _normalized(user_template, user_paths, "Fleet")
    assert Counter(r["Type"] for r in theirs.values()) == Counter(
        r["Type"] for r in ours.values())
    assert "Custom::VpcRestrictDefaultSG" in {r["Type"] for r in theirs.values()}
    assert sorted(theirs) == sorted(ours)
    for name, resource in ours.items():
        assert theirs[name] == resource, name


def test_feature_flags_match_our_cdk_json() -> None:
    """Every flag the construct sets on itself has the value our own app's cdk.json gives."""
    from holdfast.infra.flags import FEATURE_FLAGS

    context = cdk_json()["context"]
    assert {k: context.get(k) for k in FEATURE_FLAGS} == FEATURE_FLAGS


def test_missing_image_is_a_clear_error() -> None:
    """Neither worker_image nor worker_image_directory: an error naming both, at synth."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "NoImage")
    with pytest.raises(SettingsError, match=r"worker_image=.*worker_image_directory="):
        HoldfastFleet(stack, "Fleet", handler="myapp.handler:handle")


def test_image_directory_without_dockerfile(tmp_path: Path) -> None:
    """A worker_image_directory with no Dockerfile is named in the error."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "NoDockerfile")
    with pytest.raises(SettingsError, match="no Dockerfile"):
        HoldfastFleet(stack, "Fleet", worker_image_directory=tmp_path)


def test_keyword_props_are_validated_like_context() -> None:
    """A bad keyword prop fails with the prop's name, as a bad context value does."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "BadProps")
    with pytest.raises(SettingsError, match="min_tasks=0"):
        HoldfastFleet(stack, "Fleet", worker_image="example/worker:1", min_tasks=0)


def test_a_cross_field_error_names_the_python_fields_and_a_setting_given_twice_is_refused(
        ) -> None:
    """min_tasks above max_tasks given in Python: the error names the context keys and the
    fields (it named minTasks alone); a keyword beside a different value of the same field
    in settings= is refused naming both (the keyword won, silently)."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet, Settings
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "Twice")
    with pytest.raises(SettingsError, match=r"minTasks=5 is above maxTasks=2.*in Python: "
                                            r"Settings/HoldfastFleet min_tasks, max_tasks"):
        HoldfastFleet(stack, "A", worker_image="example/worker:1", min_tasks=5, max_tasks=2)
    with pytest.raises(SettingsError, match=r"min_tasks=2 and settings.min_tasks=4"):
        HoldfastFleet(stack, "B", worker_image="example/worker:1", min_tasks=2,
                      settings=Settings(min_tasks=4))
    # The same value both ways, or the field left at its default in settings=: fine.
    HoldfastFleet(stack, "C", worker_image="example/worker:1", min_tasks=4,
                  settings=Settings(min_tasks=4), fleet_name="c")


def test_two_fleets_in_one_stack_have_their_own_order_queues() -> None:
    """Two fleets of one stack named apart get order-queue prefixes apart (shared, each
    sweeper deleted the other's queues); the default fleet keeps the stack's prefix; a second
    fleet of the same name is refused at synth."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "Mine")
    prod = HoldfastFleet(stack, "Prod", worker_image="example/worker:1")
    staging = HoldfastFleet(stack, "Staging", worker_image="example/worker:1",
                            fleet_name="staging")
    assert prod.orders_queue_prefix == "Mine-orders-"
    assert staging.orders_queue_prefix == "Mine-staging-orders-"
    with pytest.raises(SettingsError, match="fleetName"):
        HoldfastFleet(stack, "Again", worker_image="example/worker:1", fleet_name="staging")


def test_fleets_of_two_stacks_that_may_share_an_account_are_named_apart() -> None:
    """Two stacks of one app, environment-agnostic, each with the default fleet name: refused
    at synth (their metrics' service would be one, each scaling on both); in two regions, or
    with a fleet name each, accepted."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.exceptions import SettingsError

    app = cdk.App()
    HoldfastFleet(cdk.Stack(app, "Staging"), "Fleet", worker_image="example/worker:1")
    with pytest.raises(SettingsError, match="fleetName"):
        HoldfastFleet(cdk.Stack(app, "Prod"), "Fleet", worker_image="example/worker:1")
    HoldfastFleet(cdk.Stack(app, "Prod2"), "Fleet", worker_image="example/worker:1",
                  fleet_name="prod")
    app = cdk.App()
    for region in ("eu-west-1", "us-east-1"):
        HoldfastFleet(cdk.Stack(app, f"In-{region}", env=cdk.Environment(
            account="123456789012", region=region)), "Fleet", worker_image="example/worker:1")


def test_no_fleet_s_order_queue_prefix_begins_another_s() -> None:
    """A stack's default fleet (prefix Feeds-orders-) beside a fleet named "orders"
    (Feeds-orders-orders-): refused at synth, since the first fleet's sweeper would delete the
    second's queues."""
    import aws_cdk as cdk

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "Feeds")
    HoldfastFleet(stack, "Main", worker_image="example/worker:1")
    with pytest.raises(SettingsError, match="begin alike"):
        HoldfastFleet(stack, "Orders", worker_image="example/worker:1", fleet_name="orders")


def test_the_task_role_may_run_partiql_updates_only_in_batch_mode() -> None:
    """PartiQLUpdate (its statements cannot be pinned to attributes as UpdateItem is) is
    granted to the worker's task role with renewMode=batch, not with single."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from holdfast.cdk import HoldfastFleet
    from holdfast.infra.settings import Settings

    def task_role_actions(mode: str) -> set[str]:
        stack = cdk.Stack(cdk.App(), f"Renew{mode}")
        fleet = HoldfastFleet(stack, "Fleet", worker_image="example/worker:1",
                              settings=Settings().with_values(renew_mode=mode))
        role_id = stack.get_logical_id(
            fleet.worker_task_role.node.default_child)  # type: ignore[arg-type]
        actions: set[str] = set()
        for policy in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values():
            if {"Ref": role_id} in policy["Properties"]["Roles"]:
                for st in policy["Properties"]["PolicyDocument"]["Statement"]:
                    act = st["Action"]
                    actions |= {act} if isinstance(act, str) else set(act)
        return actions

    assert "dynamodb:PartiQLUpdate" in task_role_actions("batch")
    single = task_role_actions("single")
    assert "dynamodb:PartiQLUpdate" not in single and "dynamodb:UpdateItem" in single


def test_a_user_stack_gets_our_outputs_when_it_asks(template_json: dict[str, Any]) -> None:
    """fleet.add_outputs() gives a user's stack the outputs our stack has (TableName, ...,
    what the deploy docs read back); a second fleet's, after a prefix."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from holdfast.cdk import HoldfastFleet

    stack = cdk.Stack(cdk.App(), "Mine")
    HoldfastFleet(stack, "Fleet", worker_image="example/worker:1").add_outputs()
    HoldfastFleet(stack, "Staging", worker_image="example/worker:1",
                  fleet_name="staging").add_outputs(prefix="Staging")
    outputs = set(Template.from_stack(stack).to_json()["Outputs"])
    ours = set(template_json["Outputs"])
    assert ours and ours <= outputs and {f"Staging{o}" for o in ours} <= outputs


def test_a_vpc_of_the_app_s_own_is_used_as_given() -> None:
    """vpc=<a Vpc made in the same app>: the fleet makes no VPC of its own and puts its
    workers' security group in that one; vpc with vpc_id as well is refused."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk.assertions import Template

    from holdfast.cdk import HoldfastFleet, Settings
    from holdfast.infra.exceptions import SettingsError

    stack = cdk.Stack(cdk.App(), "Shared")
    vpc = ec2.Vpc(stack, "AppVpc", max_azs=2)
    HoldfastFleet(stack, "Fleet", worker_image="example/worker:1", vpc=vpc)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 1)
    template.has_resource_properties("AWS::EC2::SecurityGroup", {
        "GroupDescription": cdk.assertions.Match.string_like_regexp("Holdfast workers"),
        "VpcId": {"Ref": stack.get_logical_id(vpc.node.default_child)}})  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="vpc or vpc_id"):
        HoldfastFleet(cdk.Stack(cdk.App(), "Both"), "Fleet", worker_image="example/worker:1",
                      vpc=vpc, settings=Settings(vpc_id="vpc-0123abcd"))


def test_importing_holdfast_cdk_first_quiets_the_node_20_banner() -> None:
    """`import holdfast.cdk` before aws_cdk: no end-of-life banner from jsii on Node 20."""
    env = {k: v for k, v in cli_env().items()
           if k != "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"}
    proc = subprocess.run(
        [sys.executable, "-c", "import holdfast.cdk, aws_cdk; aws_cdk.App()"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert "end-of-life" not in proc.stderr.lower(), proc.stderr[-2000:]
