"""The worker's container image: a prebuilt one by its URI (a private ECR image through its
repository, so the task may pull it), or a folder's Dockerfile built by ``cdk deploy``.

Apart from ``HoldfastFleet``: the one place that turns the image settings into an
``ecs.ContainerImage``, and says what is missing when neither is given.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from aws_cdk import Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from holdfast.infra.exceptions import SettingsError

__all__ = ["container_image"]

_NO_IMAGE = ("HoldfastFleet needs a worker image: worker_image='<registry>/<repo>:<tag>' (an "
             "image you built and pushed; context key workerImage) or "
             "worker_image_directory='<folder with your Dockerfile>' (built by `cdk deploy`)")


# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:<tag>|@<digest>]
_ECR_URI = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
                      r"([a-z0-9][a-z0-9._/-]*)(?::([\w][\w.-]{0,127})|@(sha256:[0-9a-f]{64}))?$")


def container_image(scope: Construct, uri: str | None, directory: str | os.PathLike[str] | None,
                  arm64: bool) -> ecs.ContainerImage:
    """A prebuilt image, or ``directory``'s Dockerfile built by ``cdk deploy`` (synth itself
    needs no Docker). Neither is an error here, at synth, naming both.

    A private ECR image goes through its repository, so the task's execution role is granted
    the pull (``from_registry`` grants nothing: the task would fail to start)."""
    if uri:
        ecr_uri = _ECR_URI.match(uri)
        if ecr_uri is None:
            return ecs.ContainerImage.from_registry(uri)
        account, region, name, tag, digest = ecr_uri.groups()
        repo = ecr.Repository.from_repository_attributes(
            scope, "WorkerImageRepository", repository_name=name,
            repository_arn=f"arn:{Stack.of(scope).partition}:ecr:{region}:{account}:"
                           f"repository/{name}")
        return ecs.ContainerImage.from_ecr_repository(repo, tag=digest or tag or "latest")
    if directory is None:
        raise SettingsError(_NO_IMAGE)
    folder = Path(directory).resolve()
    if not (folder / "Dockerfile").is_file():
        raise SettingsError(f"worker_image_directory={str(directory)!r}: no Dockerfile in "
                            f"{folder}. {_NO_IMAGE}")
    platform = ecr_assets.Platform.LINUX_ARM64 if arm64 else ecr_assets.Platform.LINUX_AMD64
    return ecs.ContainerImage.from_asset(str(folder), platform=platform)
