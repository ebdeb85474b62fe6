"""The record of AWS calls the IAM test replays against the synthesized roles.

With ``HOLDFAST_RECORD_AWS_CALLS=<dir>`` every client built by ``holdfast.core.aws`` appends one
JSON line per API call to ``<dir>/aws-calls-<pid>.jsonl``: which component built the client
(worker, router, sweeper, ... from the module that called the factory), the operation, and
what IAM authorises it on (table or index, queue, attribute names, partition keys, PartiQL
verbs).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from holdfast.core import names, schema

__all__ = ["call_record", "component_of_caller", "maybe_record"]


# Module of the code that built a client -> the component whose IAM role makes its calls.
_COMPONENTS = (("holdfast.worker", "worker"), ("holdfast.lambdas.router", "router"),
               ("holdfast.lambdas.sweeper", "sweeper"),
               ("holdfast.lambdas.taskstopped", "taskstopped"), ("holdfast.runner", "runner"),
               ("holdfast.cli", "cli"), ("bench", "bench"))
# Words of update/condition expressions that are not attribute names.
_EXPRESSION_WORDS = frozenset({
    "set", "remove", "add", "delete", "and", "or", "not", "between", "in", "attribute_exists",
    "attribute_not_exists", "attribute_type", "begins_with", "contains", "size",
    "if_not_exists", "list_append"})
_EXPRESSIONS = ("UpdateExpression", "ConditionExpression", "KeyConditionExpression",
                "FilterExpression", "ProjectionExpression")


def component_of_caller() -> str:
    """The component (see ``_COMPONENTS``) of the nearest calling module, else ``other``."""
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module == "__main__":
            spec = frame.f_globals.get("__spec__")
            module = str(getattr(spec, "name", "") or "")
        for prefix, component in _COMPONENTS:
            if module == prefix or module.startswith(prefix + "."):
                return component
        frame = frame.f_back  # type: ignore[assignment]
    return "other"


def call_record(component: str, service: str, operation: str,
                params: dict[str, Any]) -> dict[str, Any]:
    """What IAM sees of one call: action inputs, resource, attribute names, leading keys."""
    rec: dict[str, Any] = {"component": component, "service": service, "operation": operation}
    if "TableName" in params:
        index = params.get("IndexName")
        rec["resource"] = str(params["TableName"]) + (f"/index/{index}" if index else "")
    elif "QueueUrl" in params:
        rec["resource"] = str(params["QueueUrl"]).rstrip("/").rpartition("/")[2]
    elif "QueueName" in params:  # CreateQueue: IAM authorises it on the queue it would make
        rec["resource"] = str(params["QueueName"])
    elif isinstance(params.get("RequestItems"), dict) and len(params["RequestItems"]) == 1:
        # BatchGetItem / BatchWriteItem: IAM authorises each table named (ours name one).
        rec["resource"] = str(next(iter(params["RequestItems"])))
    if service == "dynamodb":
        attributes = set(params.get("Key", {})) | set(params.get("Item", {}))
        attributes |= {str(v) for v in params.get("ExpressionAttributeNames", {}).values()}
        for field in _EXPRESSIONS:
            text = re.sub(r"[#:]\w+", " ", str(params.get(field, "")))
            attributes |= {w for w in re.findall(r"[A-Za-z_]\w*", text)
                           if w.lower() not in _EXPRESSION_WORDS}
        if attributes:
            rec["attributes"] = sorted(attributes)
        key = (params.get("Key") or params.get("Item") or {}).get(schema.PARTITION_KEY)
        if isinstance(key, dict) and "S" in key:
            rec["leading_keys"] = [key["S"]]
        if "ReturnValues" in params:
            rec["return_values"] = params["ReturnValues"]
        statements = params.get("Statements") or (
            [params] if "Statement" in params else [])
        if statements:
            rec["statements"] = [_statement(str(s.get("Statement", ""))) for s in statements]
    return rec


def _statement(text: str) -> dict[str, str]:
    """A PartiQL statement's verb and table (``UPDATE "t" SET ...`` -> UPDATE, t; a SELECT's
    table is the one after FROM, whatever it selects: ``SELECT * FROM "t"``)."""
    first = re.match(r"\s*(\w+)", text)
    verb = first.group(1).upper() if first else ""
    if verb in ("SELECT", "EXISTS"):
        found = re.search(r'\bFROM\s+"?([\w.-]+)"?', text, re.IGNORECASE)
    else:
        found = re.match(r'\s*\w+\s+(?:INTO\s+|FROM\s+)?"?([\w.-]+)"?', text, re.IGNORECASE)
    return {"verb": verb, "table": found.group(1) if found else ""}


def maybe_record(client: Any) -> None:
    """With ``HOLDFAST_RECORD_AWS_CALLS`` set: record each call ``client`` makes."""
    folder = os.environ.get(names.ENV_RECORD_AWS_CALLS)
    if not folder:
        return
    component = component_of_caller()
    service = str(client.meta.service_model.service_name)
    path = Path(folder) / f"aws-calls-{os.getpid()}.jsonl"

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        # Once per API call (retries are not calls); one O_APPEND write per line, so lines
        # from the threads of one process never interleave.
        line = json.dumps(call_record(component, service, str(model.name), params)) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    client.meta.events.register("before-parameter-build", record)
