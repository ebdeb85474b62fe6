"""cfn-lint on the synthesized template: no errors, and no warning beyond the named ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.infra.conftest import ALT_STACK, REPO, STACK

CONFIG = REPO / "infra" / "cfn-lint.yaml"
CFN_LINT = Path(sys.executable).parent / "cfn-lint"


def test_templates_pass_cfn_lint(cli_assembly: Path, alt_assembly: Path) -> None:
    """Both templates (defaults, every option) pass cfn-lint with the project's config."""
    proc = subprocess.run(
        [str(CFN_LINT), "--config-file", str(CONFIG),
         str(cli_assembly / f"{STACK}.template.json"),
         str(alt_assembly / f"{ALT_STACK}.template.json")],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ignored_checks_are_justified() -> None:
    """Each ignored cfn-lint check in the config has a comment saying why."""
    lines = CONFIG.read_text().splitlines()
    ignored = [i for i, line in enumerate(lines) if line.strip().startswith("- W")]
    assert ignored, "the config should list its ignored checks"
    for i in ignored:
        assert "#" in lines[i] or lines[i - 1].strip().startswith("#"), lines[i]
