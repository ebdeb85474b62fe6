"""The settings schema: typed reads with clear errors, the generated reference, and the schema
matching what the code reads."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from holdfast.cli.settingsref import REGENERATE, render_markdown
from holdfast.core import names, urls
from holdfast.core import settings as S
from holdfast.core.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "settings.md"
# A whole name: not a wrapped fragment ("HOLDFAST_CONNECT_" at a line end) or a wildcard.
_NAME = re.compile(r"\bHOLDFAST_[A-Z0-9]+(?:_[A-Z0-9]+)*(?![A-Z0-9_*])")


def _product_sources() -> Iterator[Path]:
    """Every .py file of worker/, lambdas/ and holdfast/ once (holdfast/worker etc. are links,
    which os.walk does not follow)."""
    for top in ("worker", "lambdas", "holdfast"):
        for folder, _, files in os.walk(ROOT / top):
            yield from (Path(folder) / f for f in files if f.endswith(".py"))


def test_the_reference_page_is_the_generated_one() -> None:
    """docs/reference/settings.md is exactly what the schema generates."""
    assert REFERENCE.read_text(encoding="utf-8") == render_markdown(), (
        f"docs/reference/settings.md is out of date: run `{REGENERATE}`")


def test_every_variable_named_in_the_code_is_in_the_schema() -> None:
    """Each HOLDFAST_* name in worker/, lambdas/ and holdfast/ has a schema entry."""
    schema = {s.name for s in S.SCHEMA}
    unknown = {f"{name} ({path.relative_to(ROOT)})" for path in _product_sources()
               for name in _NAME.findall(path.read_text(encoding="utf-8"))
               if name not in schema}
    assert not unknown, f"not in holdfast/core/settings.py: {sorted(unknown)}"


def test_every_schema_entry_is_read_somewhere() -> None:
    """Each entry is used outside the schema: through it, its names constant, or its name."""
    constants = {value: key for module in (names, urls) for key, value in vars(module).items()
                 if key.startswith("ENV_") and isinstance(value, str)}
    definition = re.compile(r"^\s*ENV_\w+\s*(?::\s*Final)?\s*=", re.M)
    text = "\n".join(definition.sub("", p.read_text(encoding="utf-8"))
                     for p in _product_sources()
                     if p.name not in ("settings.py", "names.py") or p.parent.name != "core")
    attrs = {id(v): k for k, v in vars(S).items() if isinstance(v, S.Setting)}
    unread = set()
    for s in S.SCHEMA:
        ways = [rf"\b(?:S|settings)\.{attrs[id(s)]}\b", rf'"{s.name}"']
        ways += [rf"\b{constants[s.name]}\b"] if s.name in constants else []
        if not any(re.search(way, text) for way in ways):
            unread.add(s.name)
    assert unread == set()


def test_every_entry_is_complete() -> None:
    """Names are unique, each has a description, readers from the list, and sane limits."""
    assert len({s.name for s in S.SCHEMA}) == len(S.SCHEMA) > 70
    for s in S.SCHEMA:
        assert s.doc and s.readers and set(s.readers) | set(s.required_by) <= set(S.COMPONENTS)
        if isinstance(s, S.Number):
            assert s.lo <= s.hi and (s.default is None or s.lo <= s.default <= s.hi), s.name
        if isinstance(s, S.Choice):
            assert s.default in s.choices, s.name


@pytest.mark.parametrize(("setting", "value", "message"), [
    (S.MAX_CONNECTIONS, "2.5", "HOLDFAST_MAX_CONNECTIONS='2.5' is not an integer"),
    (S.LEASE_SECONDS, "soon", "HOLDFAST_LEASE_SECONDS='soon' is not a number"),
    (S.LEASE_SECONDS, "nan", "HOLDFAST_LEASE_SECONDS=nan is out of range: allowed 0.5 to 3600"),
    (S.MAX_SEQ_JUMP, "-1", "allowed 0 to 9223372036854775808"),
    (S.WATCHDOG, "maybe", "HOLDFAST_WATCHDOG='maybe' must be on or off"),
    (S.RENEW_MODE, "turbo", "HOLDFAST_RENEW_MODE='turbo' must be one of batch, single"),
    (S.HANDLER, "nocolon", "HOLDFAST_HANDLER='nocolon' must be 'package.module:function'"),
    (S.QUEUE_URL, "nudges", "HOLDFAST_QUEUE_URL='nudges' must be a queue URL"),
    (S.ORDERS_QUEUE_PREFIX, "bad.prefix", "HOLDFAST_ORDERS_QUEUE_PREFIX: "),
    (S.FAILURE_QUEUE_URL, "", "HOLDFAST_FAILURE_QUEUE_URL is not set: it must name the SQS"),
])
def test_a_bad_value_names_the_variable_and_what_is_allowed(
        setting: S.Integer | S.Number | S.Flag | S.Choice | S.Text, value: str,
        message: str) -> None:
    """A bad value is a ConfigError naming the variable and the allowed values."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        setting.read({setting.name: value})


def test_unset_or_blank_is_the_default_and_words_are_one_set() -> None:
    """Blank reads as the default; every flag takes the same words; choices can fold case."""
    assert S.CHECKPOINT_SECONDS.read({S.CHECKPOINT_SECONDS.name: "  "}) == 20
    assert S.TASK_MEMORY_MIB.get({}) is None and S.HANDLER.get({}) is None
    for flag in (S.RUNNER_SWEEPER, S.BALANCE, S.COMPRESSION):
        assert [flag.read({flag.name: w}) for w in ("on", "YES", "1", "off", "false", "0")] == [
            True, True, True, False, False, False]
    assert S.LOG_LEVEL.read({S.LOG_LEVEL.name: "debug"}) == "DEBUG"
    assert S.RUNNER_START.read({S.RUNNER_START.name: "latest"}) == "LATEST"


def test_required_where_the_component_needs_it() -> None:
    """The reference marks a variable required only for the components that refuse without it."""
    page = render_markdown()
    worker, router = page.split("## router")[0], page.split("## router")[1].split("## sweeper")[0]
    assert "| `HOLDFAST_SESSION_TABLE` | text | **required** |" in worker
    assert "| `HOLDFAST_SESSION_TABLE` | text | unset |" in router
    assert "`HOLDFAST_HANDLER_ATTEMPTS` | integer | `5` | 1 to 100 |" in worker
