"""Where workers run: a new VPC by default, public subnets without NAT, or an existing VPC."""

from __future__ import annotations

from typing import Any

import pytest

from infra.exceptions import SettingsError
from infra.settings import Settings
from infra.stack import stack_environment
from tests.infra.conftest import one_resource, resources


def test_new_vpc_has_private_subnets_nat_endpoint_and_flow_logs(
        template_json: dict[str, Any]) -> None:
    """Two AZs of private worker subnets, one NAT, a DynamoDB gateway endpoint, flow logs."""
    assert len(resources(template_json, "AWS::EC2::NatGateway")) == 1
    endpoint = one_resource(template_json, "AWS::EC2::VPCEndpoint")["Properties"]
    assert "dynamodb" in str(endpoint["ServiceName"])
    assert endpoint.get("VpcEndpointType", "Gateway") == "Gateway"
    flow = one_resource(template_json, "AWS::EC2::FlowLog")["Properties"]
    assert flow["TrafficType"] == "REJECT"
    assert len(resources(template_json, "AWS::EC2::Subnet")) == 4


def test_workers_accept_no_inbound_traffic(template_json: dict[str, Any]) -> None:
    """The workers' security group has no ingress rule."""
    groups = resources(template_json, "AWS::EC2::SecurityGroup")
    assert all(not g["Properties"].get("SecurityGroupIngress") for g in groups.values())
    assert not resources(template_json, "AWS::EC2::SecurityGroupIngress")


def test_public_subnets_skip_the_nat_gateway(alt_template_json: dict[str, Any]) -> None:
    """workerSubnets=public: no NAT gateway, tasks get a public IP, no flow logs if off."""
    assert not resources(alt_template_json, "AWS::EC2::NatGateway")
    assert not resources(alt_template_json, "AWS::EC2::FlowLog")
    service = one_resource(alt_template_json, "AWS::ECS::Service")["Properties"]
    assert service["NetworkConfiguration"]["AwsvpcConfiguration"]["AssignPublicIp"] == "ENABLED"


def test_existing_vpc_needs_account_and_region() -> None:
    """vpcId without CDK_DEFAULT_ACCOUNT/REGION is a clear error; with them, an env."""
    s = Settings(vpc_id="vpc-0123abcd")
    with pytest.raises(SettingsError, match="CDK_DEFAULT_ACCOUNT"):
        stack_environment(s, {})
    env = stack_environment(s, {"CDK_DEFAULT_ACCOUNT": "111122223333",
                                "CDK_DEFAULT_REGION": "eu-west-1"})
    assert env is not None and env.region == "eu-west-1"
    assert stack_environment(Settings(), {"CDK_DEFAULT_ACCOUNT": "1"}) is None


def vpc_lookup_context(account: str, region: str, vpc_id: str) -> dict[str, Any]:
    """What `cdk synth` would have cached in cdk.context.json after looking the VPC up."""
    key = (f"vpc-provider:account={account}:filter.vpc-id={vpc_id}:region={region}"
           ":returnAsymmetricSubnets=true")
    subnets = [{"subnetId": f"subnet-0{i}aaaaaaaaaaaaaa", "cidr": f"10.0.{i}.0/24",
                "availabilityZone": f"{region}{az}", "routeTableId": f"rtb-0{i}bbbbbbbbbbbbbb"}
               for i, az in ((1, "a"), (2, "b"))]
    return {key: {"vpcId": vpc_id, "vpcCidrBlock": "10.0.0.0/16",
                  "availabilityZones": [], "ownerAccountId": account,
                  "subnetGroups": [{"name": "Private", "type": "Private", "subnets": subnets}]}}


def test_existing_vpc_is_looked_up_not_created() -> None:
    """With vpcId the stack creates no VPC and places workers in that VPC's private subnets."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.network import Network

    account, region, vpc_id = "111122223333", "eu-west-1", "vpc-0123abcd"
    app = cdk.App(context=vpc_lookup_context(account, region, vpc_id))
    stack = cdk.Stack(app, "Net", env=cdk.Environment(account=account, region=region))
    network = Network(stack, "Network", vpc_id=vpc_id, public_subnets=False, nat_gateways=1,
                      flow_logs=True, log_retention_days=30,
                      removal_policy=cdk.RemovalPolicy.RETAIN)
    selected = network.vpc.select_subnets(subnet_type=network.subnets.subnet_type).subnet_ids
    assert selected == ["subnet-01aaaaaaaaaaaaaa", "subnet-02aaaaaaaaaaaaaa"]
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 0)
    template.resource_count_is("AWS::EC2::FlowLog", 0)
    template.has_resource_properties("AWS::EC2::SecurityGroup", {"VpcId": vpc_id})
    assert not network.flow_logs_disabled  # not our VPC: no VPC7 acknowledgement either
