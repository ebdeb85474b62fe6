"""The CDK feature flags ``HoldfastFleet`` relies on, set on its own subtree.

A user's app has its own cdk.json (or none): without these, the same construct would give a
different template — without ``restrictDefaultSecurityGroup`` the VPC's default security group
is left open, silently. The construct sets each on itself before creating any child, so its
resources come out the same in any app. Our cdk.json carries the same values (a test checks).
"""

from __future__ import annotations

from typing import Final

__all__ = ["FEATURE_FLAGS"]

FEATURE_FLAGS: Final[dict[str, object]] = {
    # The VPC's default security group loses every rule (a custom resource does it), so
    # nothing placed in it by mistake can talk to anything.
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup": True,
    # One statement per action set and resource: the least-privilege tests read them so.
    "@aws-cdk/aws-iam:minimizePolicies": True,
    # The worker service: no explicit ECS deployment controller and no empty deployment-alarm
    # block (the circuit breaker rolls back), as the service has been deployed with.
    "@aws-cdk/aws-ecs:disableExplicitDeploymentControllerForCircuitBreaker": True,
    "@aws-cdk/aws-ecs:removeDefaultDeploymentAlarm": True,
    "@aws-cdk/aws-ecs:removeEmptyLoadBalancers": True,
}
