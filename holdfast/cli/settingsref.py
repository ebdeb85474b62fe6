"""``holdfast settings``: the settings reference, generated from ``holdfast.core.settings``.

``holdfast settings --markdown -o docs/reference/settings.md`` rewrites the reference page; a
test fails when the page and the schema differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Final

from holdfast.core import settings as S

__all__ = ["REGENERATE", "SETTINGS_COMMANDS", "render_markdown"]

REGENERATE: Final = "holdfast settings --markdown -o docs/reference/settings.md"
_COMPONENTS: Final = {
    "worker": "The worker process (`python -m holdfast.worker`, the ECS task).",
    "router": "The router Lambda (reads the lease table's stream, nudges workers).",
    "sweeper": "The sweeper Lambda (dead sessions, orphans, rebalancing).",
    "taskstopped": "The taskstopped Lambda (ECS reported a worker task STOPPED).",
    "runner": "The local runner (`python -m holdfast.runner`): the router and sweeper on a "
              "laptop; they read their own settings from the same environment.",
    "cli": "The operator commands (`holdfast ls`, `status`, `drain`...).",
    "local": "The local fleet, the `holdfast_fleet` fixture, the demo and tests.",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _kind(s: S.Setting) -> str:
    return f"{s.kind} ({s.unit})" if s.unit else s.kind


def _default(s: S.Setting, component: str) -> str:
    if component in s.required_by:
        return "**required**"
    shown = s.shown_default()
    # Defaults worked out from other values are said in words, not as a value to type.
    return shown if s.default_doc or shown in ("-", "unset") else f"`{shown}`"


def _listed(s: S.Setting) -> str:
    return f"(required by {', '.join(s.required_by)})" if s.required_by else s.shown_default()


def render_markdown() -> str:
    """The reference page: one table per component, in the schema's order."""
    out = ["# Settings reference", "",
           f"<!-- Generated from holdfast/core/settings.py by `{REGENERATE}`: do not edit. -->",
           "",
           "Every setting is an environment variable; unset and blank both mean the default. "
           "A bad value stops the component before it does anything, with an error naming "
           "the variable and what is allowed. On/off settings accept on/off, true/false, "
           "yes/no and 1/0. A variable read by several components appears under each.", ""]
    for component in S.COMPONENTS:
        out += [f"## {component}", "", _COMPONENTS[component], "",
                "| Variable | Type | Default | Allowed | Description |",
                "|---|---|---|---|---|"]
        out += [f"| `{s.name}` | {_kind(s)} | {_cell(_default(s, component))} | "
                f"{_cell(s.limits())} | {_cell(s.doc)} |"
                for s in S.SCHEMA if component in s.readers]
        out.append("")
    return "\n".join(out)


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", action="store_true",
                   help="the reference page in Markdown (default: one line per variable)")
    p.add_argument("-o", "--output", type=Path, default=None, help="write to this file")


def _run(args: argparse.Namespace) -> int:
    text = render_markdown() if args.markdown else "\n".join(
        f"{s.name}={_listed(s)}  # {s.doc}" for s in S.SCHEMA) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        # No parent made: a mistyped directory is refused, not created.
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as exc:  # a directory, a missing parent, no permission
            print(f"holdfast settings: cannot write {args.output}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
    return 0


SETTINGS_COMMANDS = {
    "settings": ("every HOLDFAST_* variable with its default (--markdown: the reference page)",
                 _add, _run),
}
