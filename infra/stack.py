"""Our app's stack: one ``HoldfastFleet`` (infra/fleet.py) and the outputs operators read."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from aws_cdk import Environment, Stack
from constructs import Construct

import holdfast.infra
from holdfast.infra.exceptions import SettingsError
from holdfast.infra.fleet import HoldfastFleet, worker_environment
from holdfast.infra.settings import Settings, context_key

__all__ = ["HoldfastStack", "stack_environment", "worker_environment"]

# The repository root, whose Dockerfile builds the worker image when no workerImage is given.
_REPOSITORY: Final = Path(holdfast.infra.__file__).resolve().parent.parent


def stack_environment(s: Settings, environ: Mapping[str, str]) -> Environment | None:
    """Account and region for the stack, or None for an environment-agnostic template.

    Agnostic by default, so ``cdk synth`` gives the same template on any machine, with or
    without credentials. Looking up an existing VPC needs a concrete account and region: the
    CLI provides them (``CDK_DEFAULT_*``) when it has credentials.
    """
    if s.vpc_id is None:
        return None
    account, region = environ.get("CDK_DEFAULT_ACCOUNT"), environ.get("CDK_DEFAULT_REGION")
    if not account or not region:
        raise SettingsError(
            f"{context_key('vpc_id')}={s.vpc_id}: looking up a VPC needs an account and region; "
            "run the CDK CLI with AWS credentials or set CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION")
    return Environment(account=account, region=region)


class HoldfastStack(Stack):
    """Our app's stack: one :class:`HoldfastFleet` configured by :class:`Settings`, and the
    outputs an operator (and our bench and CLI) reads.

    The fleet's id is ``Default``, which CDK leaves out of logical ids (and of the hashes in
    them): a stack deployed before the fleet became a construct updates in place instead of
    replacing its tables, queues and service.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings,
                 **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Without a prebuilt image, the repository's own Dockerfile (the checkout this module
        # is imported from: infra/ resolves to the repository's folder through the link).
        directory = None if settings.worker_image else _REPOSITORY
        self.fleet = HoldfastFleet(self, "Default", settings=settings,
                                   worker_image_directory=directory)
        f = self.fleet
        self.table, self.sessions, self.queues = f.leases, f.sessions, f.queues
        self.router, self.sweeper, self.network = f.router, f.sweeper, f.network
        self.workers, self.task_stopped, self.monitoring = f.workers, f.task_stopped, f.monitoring
        self.orders_queue_prefix = f.orders_queue_prefix
        self.fleet.add_outputs()
