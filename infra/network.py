"""Where the workers run: an existing VPC, or a new two-AZ VPC sized for outbound traffic only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import CfnResource, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from holdfast.infra.limits import VPC_AZS
from holdfast.infra.logs import retention

__all__ = ["AWS_API_PORT", "Network"]


# AWS APIs (DynamoDB, SQS, CloudWatch, ECR and S3 for the image) are all HTTPS. DNS to the
# VPC resolver and the task metadata endpoint are not filtered by security groups.
AWS_API_PORT: Final = 443

# The construct the CDK adds to a stack for ``ec2.Vpc``'s restrictDefaultSecurityGroup, and
# the log group we give its function.
_DEFAULT_GROUP_PROVIDER: Final = "Custom::VpcRestrictDefaultSGCustomResourceProvider"
_DEFAULT_GROUP_LOGS: Final = "HoldfastLogs"


class Network(Construct):
    """``vpc``, the ``subnets`` the tasks use, whether they need a public IP, and their
    security group: no ingress at all, and egress only to TCP 443 (AWS APIs) and the
    ``upstream_ports`` (so a hostile ``ws_url`` cannot reach any other port, anywhere)."""

    def __init__(self, scope: Construct, construct_id: str, *, vpc_id: str | None,
                 public_subnets: bool, nat_gateways: int, flow_logs: bool,
                 log_retention_days: int, removal_policy: RemovalPolicy,
                 upstream_ports: Sequence[int] = (AWS_API_PORT,),
                 vpc: ec2.IVpc | None = None) -> None:
        super().__init__(scope, construct_id)
        self.assign_public_ip = public_subnets
        # True when this construct made a VPC without flow logs (the operator's choice).
        self.flow_logs_disabled = vpc_id is None and vpc is None and not flow_logs
        self.vpc: ec2.IVpc
        if vpc is not None:  # the app's own (its routes, endpoints and logs are the app's)
            self.vpc = vpc
        elif vpc_id is not None:
            self.vpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=vpc_id)
        else:
            vpc = self._new_vpc(public_subnets, nat_gateways, log_retention_days,
                                removal_policy)
            if flow_logs:
                self._add_flow_logs(vpc, log_retention_days, removal_policy)
            self.vpc = vpc
        subnet_type = (ec2.SubnetType.PUBLIC if public_subnets
                       else ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.subnets = ec2.SubnetSelection(subnet_type=subnet_type)
        # What the workers' tasks wait for on a new stack: their subnets' routes out (the NAT
        # gateways' or the internet gateway's). The ECS service does not wait on its own, so a
        # first deploy's tasks could start before them, fail to pull their image, and trip the
        # circuit breaker into a rollback. Nothing for a VPC of the app's (its routes exist).
        self.egress_established = self.vpc.select_subnets(
            subnet_type=subnet_type).internet_connectivity_established
        self.security_group = ec2.SecurityGroup(
            self, "WorkerSecurityGroup", vpc=self.vpc, allow_all_outbound=False,
            allow_all_ipv6_outbound=False,
            description="Holdfast workers: outbound to upstream WebSockets and AWS APIs only")
        for port in sorted({AWS_API_PORT, *upstream_ports}):
            what = " and ".join(name for name, used in (
                ("AWS APIs", port == AWS_API_PORT), ("upstreams", port in upstream_ports)) if used)
            for peer in (ec2.Peer.any_ipv4(), ec2.Peer.any_ipv6()):
                self.security_group.add_egress_rule(peer, ec2.Port.tcp(port),
                                                    f"{what} on TCP {port}")

    def _new_vpc(self, public_only: bool, nat_gateways: int, retention_days: int,
                 removal_policy: RemovalPolicy) -> ec2.Vpc:
        subnets = [ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC,
                                           cidr_mask=24)]
        if not public_only:
            subnets.append(ec2.SubnetConfiguration(
                name="Workers", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20))
        vpc = ec2.Vpc(self, "Vpc", max_azs=VPC_AZS, subnet_configuration=subnets,
                      nat_gateways=0 if public_only else nat_gateways)
        self._keep_default_group_logs(retention_days, removal_policy)
        # Every heartbeat is a DynamoDB call: the gateway endpoint is free and keeps them off the
        # NAT gateway (and its per-GB charge).
        vpc.add_gateway_endpoint("DynamoDb",
                                 service=ec2.GatewayVpcEndpointAwsService.DYNAMODB)
        return vpc

    def _keep_default_group_logs(self, retention_days: int,
                                 removal_policy: RemovalPolicy) -> None:
        """The CDK's function that empties the new VPC's default security group logs to a
        group Lambda creates on first run, kept for ever and left behind by ``cdk destroy``:
        give it one with the fleet's retention. The function is one per stack (shared with
        any other VPC of the app's stack), so is its group."""
        provider = Stack.of(self).node.try_find_child(_DEFAULT_GROUP_PROVIDER)
        handler = provider.node.try_find_child("Handler") if provider else None
        if not isinstance(handler, CfnResource) or not isinstance(provider, Construct) \
                or provider.node.try_find_child(_DEFAULT_GROUP_LOGS) is not None:
            return  # no such function (a newer CDK's flags) or already given its group
        group = logs.LogGroup(provider, _DEFAULT_GROUP_LOGS, retention=retention(retention_days),
                              removal_policy=removal_policy)
        handler.add_property_override("LoggingConfig.LogGroup", group.log_group_name)

    def _add_flow_logs(self, vpc: ec2.Vpc, log_retention_days: int,
                       removal_policy: RemovalPolicy) -> None:
        group = logs.LogGroup(self, "FlowLogs", retention=retention(log_retention_days),
                              removal_policy=removal_policy)
        # Rejected packets only: workers accept no inbound traffic, so a reject is the anomaly
        # worth keeping, and logging every accepted WebSocket flow would cost more than it tells.
        vpc.add_flow_log("FlowLog",
                         destination=ec2.FlowLogDestination.to_cloud_watch_logs(group),
                         traffic_type=ec2.FlowLogTrafficType.REJECT)
