"""Consumed capacity at the client: ask DynamoDB for it on every call, add up what it reports.

The counting proxy rewrites each DynamoDB JSON request that accepts ``ReturnConsumedCapacity``
to ask for ``INDEXES`` (DynamoDB Local does not verify SigV4 signatures, so the changed body is
accepted; real AWS would reject it), and parses ``ConsumedCapacity`` from the answer: per
operation, table and index, read and write units apart. Pure functions; the proxy does the I/O.

DynamoDB Local reports nothing for PartiQL (``ExecuteStatement``, ``BatchExecuteStatement``),
nor for a write whose condition failed (AWS bills it all the same). Those are *estimated*:

- a PartiQL ``UPDATE`` / ``INSERT`` / ``DELETE``: 1 write unit for the item (lease items are far
  below 1 KB) plus, per global secondary index whose key attribute an ``UPDATE`` SETs or
  REMOVEs, 2 (old entry deleted, new one put: what DynamoDB Local reports for the equivalent
  ``UpdateItem``, see ``bench/capacity.py``; an upper bound when the entry is only added or
  removed), and 1 per index for an ``INSERT`` or ``DELETE``;
- a statement or write refused by its condition: 1 write unit for the item, no index;
- a ``GetItem`` / ``Query`` / ``Scan`` reported as 0 (DynamoDB Local, for an empty answer):
  the least AWS bills a read request, 0.5 (eventually consistent) or 1 (strongly consistent).

Estimated units are kept apart from reported ones (``source``), so a report can say how much of
a total it guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

__all__ = [
    "CAPACITY_OPS",
    "CapacityKey",
    "ask_for_capacity",
    "consumed_of",
    "estimate_statement",
    "index_keys_of",
    "reported_units",
    "statement_shape",
]

CAPACITY_OPS = frozenset({
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
    "BatchWriteItem", "TransactGetItems", "TransactWriteItems", "ExecuteStatement",
    "BatchExecuteStatement", "ExecuteTransaction"})
_READ_OPS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
_WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem",
                        "TransactWriteItems"})
_SINGLE_READS = frozenset({"GetItem", "Query", "Scan"})
_PARTIQL = frozenset({"ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction"})
_TARGET_PREFIX = "DynamoDB_20120810."  # not DynamoDBStreams_20120810: streams reads are free
IndexKeys = Mapping[str, Mapping[str, frozenset[str]]]  # table -> index -> key attributes
Kind = Literal["read", "write"]


class CapacityKey(NamedTuple):
    """One line of the ledger: units of ``kind`` that ``op`` consumed on ``part`` of ``table``
    (``part`` is ``"table"`` or an index name), ``source`` "reported" or "estimated"."""

    op: str
    kind: str
    table: str
    part: str
    source: str


def index_keys_of(definition: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Index name -> its key attribute names, from ``CreateTable`` arguments."""
    out: dict[str, frozenset[str]] = {}
    for group in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        for index in definition.get(group) or []:
            out[index["IndexName"]] = frozenset(k["AttributeName"] for k in index["KeySchema"])
    return out


def ask_for_capacity(headers: Mapping[str, str], body: bytes) -> bytes:
    """``body`` asking for ``ReturnConsumedCapacity=INDEXES`` if its operation accepts it."""
    target = headers.get("x-amz-target", "")
    if not target.startswith(_TARGET_PREFIX) or target[len(_TARGET_PREFIX):] not in CAPACITY_OPS:
        return body
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return body
    if not isinstance(doc, dict) or doc.get("ReturnConsumedCapacity") == "INDEXES":
        return body
    doc["ReturnConsumedCapacity"] = "INDEXES"
    return json.dumps(doc).encode()


_UPDATE = re.compile(r'^\s*UPDATE\s+"?([^"\s]+)"?\s+(.*)$', re.I | re.S)
_INSERT = re.compile(r'^\s*INSERT\s+INTO\s+"?([^"\s]+)"?', re.I)
_DELETE = re.compile(r'^\s*DELETE\s+FROM\s+"?([^"\s]+)"?', re.I)
_SET = re.compile(r'\bSET\s+"?(\w+)"?\s*=', re.I)
_REMOVE = re.compile(r'\bREMOVE\s+"?(\w+)"?', re.I)
_WHERE = re.compile(r'\sWHERE\s', re.I)


def statement_shape(statement: str) -> tuple[str, str, frozenset[str]] | None:
    """(verb, table, attributes written) of a PartiQL write; None for a read or unknown text.

    Attributes written are those an UPDATE SETs or REMOVEs before its WHERE clause."""
    if m := _UPDATE.match(statement):
        clauses = _WHERE.split(m.group(2), maxsplit=1)[0]
        written = set(_SET.findall(clauses)) | set(_REMOVE.findall(clauses))
        return "UPDATE", m.group(1), frozenset(written)
    if m := _INSERT.match(statement):
        return "INSERT", m.group(1), frozenset()
    if m := _DELETE.match(statement):
        return "DELETE", m.group(1), frozenset()
    return None


def estimate_statement(statement: str, index_keys: IndexKeys, *, failed: bool = False
                       ) -> list[tuple[str, str, float]]:
    """(table, part, write units) of one PartiQL write (see the module docstring); [] for a
    read or a statement this cannot parse."""
    shape = statement_shape(statement)
    if shape is None:
        return []
    verb, table, written = shape
    out = [(table, "table", 1.0)]
    if failed:
        return out
    for index, keys in index_keys.get(table, {}).items():
        if verb != "UPDATE":
            out.append((table, index, 1.0))
        elif keys & written:
            out.append((table, index, 2.0))
    return out


def _kind(op: str, request: Mapping[str, Any]) -> Kind:
    if op in _READ_OPS:
        return "read"
    if op in _WRITE_OPS:
        return "write"
    statements = request.get("Statements") or request.get("TransactStatements") or [request]
    texts = [str(s.get("Statement", "")) for s in statements if isinstance(s, dict)]
    return "read" if texts and all(t.lstrip().upper().startswith("SELECT")
                                   for t in texts) else "write"


def reported_units(op: str, kind: Kind, entries: Iterable[Any]
                   ) -> list[tuple[CapacityKey, float]]:
    """Ledger lines of the ``ConsumedCapacity`` entries of one answer (``TOTAL`` or ``INDEXES``)."""
    out: list[tuple[CapacityKey, float]] = []

    def add(table: str, part: str, cap: Mapping[str, Any]) -> None:
        split = [(k, float(cap[f])) for k, f in (("read", "ReadCapacityUnits"),
                                                 ("write", "WriteCapacityUnits")) if f in cap]
        for k, units in split or [(kind, float(cap.get("CapacityUnits", 0.0)))]:
            if units:
                out.append((CapacityKey(op, k, table, part, "reported"), units))

    for entry in entries:
        if not isinstance(entry, dict):
            continue
        table = str(entry.get("TableName", "?"))
        if isinstance(entry.get("Table"), dict):
            add(table, "table", entry["Table"])
            for group in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
                for index, cap in (entry.get(group) or {}).items():
                    add(table, index, cap)
        else:
            add(table, "table", entry)
    return out


def consumed_of(op: str, request_body: bytes, status: int, response_body: bytes,
                index_keys: IndexKeys) -> list[tuple[CapacityKey, float]] | None:
    """The units one call consumed, reported or estimated; None if it should have said and
    nothing could be estimated (the caller counts those)."""
    if op not in CAPACITY_OPS:
        return []
    try:
        request = json.loads(request_body or b"{}")
        response = json.loads(response_body or b"{}")
    except ValueError:
        return None
    if not isinstance(request, dict) or not isinstance(response, dict):
        return None
    kind = _kind(op, request)
    consumed = response.get("ConsumedCapacity")
    if consumed:
        found = reported_units(op, kind, consumed if isinstance(consumed, list) else [consumed])
        if found or op not in _SINGLE_READS:
            return found
        part = str(request.get("IndexName") or "table")
        least = 1.0 if request.get("ConsistentRead") else 0.5
        return [(CapacityKey(op, "read", str(request.get("TableName", "?")), part, "estimated"),
                 least)]
    error = str(response.get("__type", "")).rsplit("#", 1)[-1]
    if status != 200:
        if kind == "write" and error == "ConditionalCheckFailedException" and op in _WRITE_OPS:
            table = str(request.get("TableName", "?"))
            return [(CapacityKey(op, "write", table, "table", "estimated"), 1.0)]
        if op in _PARTIQL and error == "ConditionalCheckFailedException":
            return _estimated(op, [(str(request.get("Statement", "")), True)], index_keys)
        return []  # throttled, invalid, ...: not billed
    if op == "BatchExecuteStatement":
        answers = response.get("Responses") or []
        statements = request.get("Statements") or []
        pairs = [(str(s.get("Statement", "")), isinstance(a, dict) and "Error" in a)
                 for s, a in zip(statements, answers, strict=False) if isinstance(s, dict)]
        return _estimated(op, pairs, index_keys) if kind == "write" else None
    if op == "ExecuteStatement" and kind == "write":
        return _estimated(op, [(str(request.get("Statement", "")), False)], index_keys)
    return None


def _estimated(op: str, statements: list[tuple[str, bool]], index_keys: IndexKeys
               ) -> list[tuple[CapacityKey, float]] | None:
    out: list[tuple[CapacityKey, float]] = []
    for text, failed in statements:
        parts = estimate_statement(text, index_keys, failed=failed)
        if not parts:
            return None
        out += [(CapacityKey(op, "write", t, p, "estimated"), u) for t, p, u in parts]
    return out
