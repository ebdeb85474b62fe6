"""Where workers run: a new VPC by default, public subnets without NAT, or an existing VPC."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.infra.exceptions import SettingsError
from holdfast.infra.settings import Settings
from holdfast.infra.stack import stack_environment
from tests.infra.conftest import one_resource, resources


def test_new_vpc_has_private_subnets_nat_endpoint_and_flow_logs(
        template_json: dict[str, Any]) -> None:
    """Two AZs of private worker subnets, a NAT in each (an outage of one AZ leaves the other's
    workers their upstreams), a DynamoDB gateway endpoint, flow logs."""
    assert len(resources(template_json, "AWS::EC2::NatGateway")) == 2
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


def egress_ports(template: dict[str, Any]) -> set[tuple[str, int, int, str]]:
    """(protocol, from port, to port, peer) of every egress rule of the workers' group."""
    group = one_resource(template, "AWS::EC2::SecurityGroup")["Properties"]
    rules = group.get("SecurityGroupEgress", [])
    rules += [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupEgress")
              .values()]
    return {(r["IpProtocol"], r.get("FromPort", -1), r.get("ToPort", -1),
             r.get("CidrIp") or r.get("CidrIpv6") or "?") for r in rules}


def test_worker_egress_is_https_only_by_default(template_json: dict[str, Any]) -> None:
    """With the default upstreamPorts the workers can dial TCP 443 and nothing else."""
    assert egress_ports(template_json) == {("tcp", 443, 443, "0.0.0.0/0"),
                                           ("tcp", 443, 443, "::/0")}


def test_worker_egress_follows_upstream_ports(alt_template_json: dict[str, Any]) -> None:
    """upstreamPorts=8443,9000: those ports plus 443 for the AWS APIs, TCP only."""
    ports = egress_ports(alt_template_json)
    assert {(p, lo) for p, lo, hi, _ in ports if lo == hi} == {
        ("tcp", 443), ("tcp", 8443), ("tcp", 9000)}
    assert len(ports) == 6 and all(lo == hi for _, lo, hi, _ in ports)


@pytest.mark.parametrize(("raw", "ports"), [
    (None, (443,)), ("8443", (8443,)), (" 443, 8443 ,443", (443, 8443)), ([443, 9000],
                                                                        (443, 9000)),
    (8443, (8443,)),
])
def test_upstream_ports_parse(raw: Any, ports: tuple[int, ...]) -> None:
    """upstreamPorts takes a port, a comma list or a JSON list; duplicates collapse."""
    assert Settings.from_context({"upstreamPorts": raw}.get).upstream_ports == ports


@pytest.mark.parametrize("raw", ["", "0", "65536", "http", "443,-1", "1-100", [True],
                                 ",".join(str(p) for p in range(1000, 1021))])
def test_bad_upstream_ports_are_refused(raw: Any) -> None:
    """A port outside 1-65535, a range, junk or more than 20 ports fail the synth by name."""
    with pytest.raises(SettingsError, match="upstreamPorts"):
        Settings.from_context({"upstreamPorts": raw}.get)


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


@pytest.mark.slow
def test_existing_vpc_is_looked_up_not_created() -> None:
    """With vpcId the stack creates no VPC and places workers in that VPC's private subnets."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from holdfast.infra.network import Network

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


def test_every_function_logs_to_a_group_that_expires(template_json: dict[str, Any]) -> None:
    """Each Lambda function of the stack, the CDK's own that empties the new VPC's default
    security group too, writes to a log group of the stack with the fleet's retention (the
    CDK's went to a group kept for ever and left behind by `cdk destroy`)."""
    functions = resources(template_json, "AWS::Lambda::Function")
    assert len(functions) >= 4
    for name, fn in functions.items():
        group = fn["Properties"].get("LoggingConfig", {}).get("LogGroup", {}).get("Ref")
        assert group, name
        props = template_json["Resources"][group]["Properties"]
        assert props["RetentionInDays"] == 30, name
