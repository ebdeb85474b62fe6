"""Start DynamoDB Local (or moto) and moto's SQS on free loopback ports, with table and queues.

The table and queues are created from ``holdfast.core.schema``, the same definitions the CDK
stack uses. ``env()`` is what any process (worker, runner, CLI) needs to use this local AWS:
the standard ``AWS_ENDPOINT_URL_*`` variables, so no code of ours has endpoint plumbing.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal

from holdfast.core.boto import new_session
from holdfast.core.names import ENV_ORDERS_QUEUE_PREFIX
from holdfast.core.orders import prefix_for
from holdfast.core.schema import (
    DEFAULT_DLQ_NAME,
    DEFAULT_QUEUE_NAME,
    DEFAULT_TABLE_NAME,
    DLQ_MAX_RECEIVE_COUNT,
    QUEUE_VISIBILITY_TIMEOUT_S,
    session_table_definition,
    table_definition,
)
from holdfast.core.urls import ENV_ALLOWED_HOSTS, LOOPBACK_ALLOW_LIST
from holdfast.localaws.dynamodb_local import find_dynamodb_local, java_unusable, missing_hint
from holdfast.localaws.loopback import dynamodb_local_command
from holdfast.localaws.processes import Child, listen_on_free_port

__all__ = ["Backend", "LocalAws", "LocalAwsError", "find_dynamodb_local", "no_proxy_with_loopback",
           "write_env_file"]

log = logging.getLogger(__name__)
Backend = Literal["auto", "dynamodb-local", "moto"]
REGION = "us-east-1"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class LocalAwsError(RuntimeError):
    """The local AWS could not start; the message says what is missing and how to get it."""


class LocalAws:
    """The embedded local AWS. Use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self, *, backend: Backend = "auto", workdir: Path | None = None,
                 table: str = DEFAULT_TABLE_NAME, queue: str = DEFAULT_QUEUE_NAME,
                 dlq: str = DEFAULT_DLQ_NAME) -> None:
        self.requested = backend
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="holdfast-localaws-"))
        # The session table is named after the lease table, so several local fleets never share.
        self.session_table = f"{table}-sessions"
        self.table, self.queue, self.dlq = table, queue, dlq
        self.children: list[Child] = []
        self.dynamodb_url = self.sqs_url = self.queue_url = self.dlq_url = ""
        self.backend: Literal["dynamodb-local", "moto"] = "moto"

    def __enter__(self) -> LocalAws:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> LocalAws:
        # A user behind a proxy (HTTP_PROXY set, loopback not in NO_PROXY): every call to the
        # local endpoints, ours here and the fleet's children's, went to the proxy, and the
        # fleet failed after 30 s with a traceback. Loopback is never proxied for us.
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = no_proxy_with_loopback(os.environ)
        try:
            moto_url = self._start_moto()
            self.sqs_url = moto_url
            self.dynamodb_url = self._start_dynamodb(moto_url)
            self._create_resources()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()

    def _start_moto(self) -> str:
        if importlib.util.find_spec("moto") is None:  # the base install: say which extra
            raise LocalAwsError('the local fleet needs moto: pip install ".[local]" in a Holdfast '
                                "checkout (moto[server], matplotlib)")
        # moto's server with its per-request dispatch and per-message scans taken out
        # (``holdfast.localaws.moto_server``: moto served 5-10 SQS requests a second in a
        # 300-stream burst without it).
        child, port, up = listen_on_free_port(lambda port: self._child("moto", [
            sys.executable, "-m", "holdfast.localaws.moto_server", "-H", "127.0.0.1",
            "-p", str(port)], self.workdir / "moto.log"), _proc_of, 30)
        if not up:
            raise LocalAwsError(f"moto server did not start:\n{child.tail()}")
        return f"http://127.0.0.1:{port}"

    def _start_dynamodb(self, moto_url: str) -> str:
        jar_dir = find_dynamodb_local()
        java = shutil.which("java")
        java_problem = None if self.requested == "moto" else java_unusable(java)
        if self.requested == "moto" or (self.requested == "auto"
                                        and not (jar_dir and java_problem is None)):
            if self.requested == "auto":
                log.warning(
                    "DynamoDB Local unavailable (%s): falling back to moto for DynamoDB, which is "
                    "slower and whose streams differ (an UpdateItem that creates an item emits "
                    "two INSERT records)", java_problem or missing_hint())
            self.backend = "moto"
            return moto_url
        if java_problem is not None:
            raise LocalAwsError(f"DynamoDB Local needs Java 17 or later: {java_problem}")
        if not jar_dir or java is None:
            raise LocalAwsError(missing_hint())
        child, port, up = listen_on_free_port(lambda port: self._child(
            "dynamodb-local", dynamodb_local_command(java, jar_dir, port),
            self.workdir / "dynamodb-local.log"), _proc_of, 60)
        if not up:
            raise LocalAwsError(f"DynamoDB Local did not start:\n{child.tail()}")
        self.backend = "dynamodb-local"
        return f"http://127.0.0.1:{port}"

    def _child(self, name: str, argv: list[str], log_path: Path) -> Child:
        """A server process, stopped with the others (``stop``) whether or not it came up."""
        child = Child(name, argv, log_path)
        self.children.append(child)
        return child

    def _client(self, service: Literal["dynamodb", "sqs"]):  # type: ignore[no-untyped-def]
        url = self.dynamodb_url if service == "dynamodb" else self.sqs_url
        return new_session().client(
            service, endpoint_url=url, region_name=REGION,
            aws_access_key_id="local", aws_secret_access_key="local")

    def _create_resources(self) -> None:
        ddb = self._client("dynamodb")
        deadline = time.monotonic() + 30
        while True:  # DynamoDB Local accepts connections a moment before it serves requests
            try:
                ddb.create_table(**table_definition(self.table))
                ddb.create_table(**session_table_definition(self.session_table))
                break
            except Exception as exc:
                if time.monotonic() > deadline or "ResourceInUse" in type(exc).__name__:
                    raise
                time.sleep(0.2)
        sqs = self._client("sqs")
        self.dlq_url = sqs.create_queue(QueueName=self.dlq)["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(
            QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.queue_url = sqs.create_queue(QueueName=self.queue, Attributes={
            "VisibilityTimeout": str(QUEUE_VISIBILITY_TIMEOUT_S),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn,
                                         "maxReceiveCount": str(DLQ_MAX_RECEIVE_COUNT)}),
        })["QueueUrl"]

    # -- what clients need ---------------------------------------------------------------
    @staticmethod
    def placeholder_env() -> dict[str, str]:
        """The AWS settings ``env`` gives, before anything is started: the region and dummy
        credentials, endpoints on a loopback port nothing serves (a call fails at once, and
        never reaches real AWS). For checking that code loads as a worker will load it."""
        nowhere = "http://127.0.0.1:9"
        return {"AWS_ENDPOINT_URL": nowhere, **_aws_settings(nowhere, nowhere)}

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and Holdfast) at this local AWS."""
        return {
            **_aws_settings(self.dynamodb_url, self.sqs_url),
            "HOLDFAST_TABLE": self.table,
            "HOLDFAST_SESSION_TABLE": self.session_table,
            "HOLDFAST_QUEUE_URL": self.queue_url,
            "HOLDFAST_DLQ_URL": self.dlq_url,
            # Per lease table, as the sweeper collects every queue of its prefix that no
            # session of its own table reads.
            ENV_ORDERS_QUEUE_PREFIX: prefix_for(self.table),
            # moto's PartiQL ignores conditions, so batched renewals would be unsafe there.
            "HOLDFAST_RENEW_MODE": "batch" if self.backend == "dynamodb-local" else "single",
            "HOLDFAST_LOCAL_BACKEND": self.backend,
            # Local upstreams (the demo upstream, your own) listen on loopback, which the URL
            # policy refuses unless it is allowed explicitly.
            ENV_ALLOWED_HOSTS: LOOPBACK_ALLOW_LIST,
        }

    def write_env(self, path: Path) -> None:
        """Write ``env()`` as a shell-sourceable file (``write_env_file``)."""
        write_env_file(path, self.env())


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """``env`` as a shell-sourceable file (``KEY=value`` lines), written whole (renamed into
    place: a script waiting for the file never reads half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
    os.replace(partial, path)


def no_proxy_with_loopback(env: Mapping[str, str]) -> str:
    """``env``'s NO_PROXY (the lower-case one first, as urllib reads it) with the loopback
    names added."""
    hosts = [h.strip() for h in (env.get("no_proxy") or env.get("NO_PROXY") or "").split(",")
             if h.strip()]
    return ",".join(hosts + [h for h in _LOOPBACK if h not in hosts])


def _aws_settings(dynamodb_url: str, sqs_url: str) -> dict[str, str]:
    """boto3's standard variables for a local AWS: its endpoints, region, dummy credentials,
    and loopback kept off any proxy."""
    no_proxy = no_proxy_with_loopback(os.environ)
    # A shell with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true (set for tools that must reach AWS
    # whatever a profile says) made boto3 skip these endpoints: the fleet's calls went to
    # AWS with the dummy credentials and failed far from the cause.
    return {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "false",
            "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_url,
            "AWS_ENDPOINT_URL_DYNAMODB_STREAMS": dynamodb_url, "AWS_ENDPOINT_URL_SQS": sqs_url,
            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
            "NO_PROXY": no_proxy, "no_proxy": no_proxy}


def _proc_of(child: Child) -> subprocess.Popen[bytes]:
    return child.proc
