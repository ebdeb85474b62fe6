"""The Lambda code asset: exactly holdfast.lambdas and holdfast.core, importable on its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from holdfast.infra.router import ROUTER_HANDLER
from holdfast.infra.sweeper import SWEEPER_HANDLER
from tests.infra.conftest import REPO, resources


def code_asset_dir(cli_assembly: Path, template_json: dict[str, Any]) -> Path:
    """The staged directory of the asset the router and sweeper run from."""
    keys = {f["Properties"]["Code"]["S3Key"]
            for f in resources(template_json, "AWS::Lambda::Function").values()
            if f["Properties"].get("Handler") in (ROUTER_HANDLER, SWEEPER_HANDLER)}
    assert len(keys) == 1, f"router and sweeper should share one asset: {keys}"
    (key,) = keys
    path = cli_assembly / f"asset.{key.removesuffix('.zip')}"
    assert path.is_dir()
    return path


def test_asset_holds_only_lambdas_and_core(cli_assembly: Path,
                                           template_json: dict[str, Any]) -> None:
    """Every file is under holdfast/lambdas/ or holdfast/core/ (plus holdfast/__init__.py)."""
    root = code_asset_dir(cli_assembly, template_json)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files
    strays = [f for f in files if not (f.startswith(("holdfast/lambdas/", "holdfast/core/"))
                                       or f == "holdfast/__init__.py")]
    assert strays == []
    assert not [f for f in files if "__pycache__" in f or "/tests/" in f or f.endswith(".pyc")]
    assert not [p for p in root.rglob("*") if p.is_symlink()]
    # Nothing of the worker, infra, tests, node_modules or the venv, even as empty folders.
    assert {p.name for p in root.iterdir()} == {"holdfast"}
    assert {p.name for p in (root / "holdfast").iterdir()} == {"__init__.py", "core", "lambdas"}


def test_asset_carries_all_of_core(cli_assembly: Path, template_json: dict[str, Any]) -> None:
    """Every module of holdfast.core in the repository is in the asset."""
    root = code_asset_dir(cli_assembly, template_json)
    repo_core = {p.name for p in (REPO / "holdfast" / "core").glob("*.py")}
    assert repo_core <= {p.name for p in (root / "holdfast" / "core").glob("*.py")}


_IMPORT_PROBE = textwrap.dedent("""
    import json, os, sys
    # Only the asset and the site-packages the Lambda runtime and layer provide.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    root, repo = sys.argv[1], sys.argv[2]
    sys.path[:] = [root] + [p for p in sys.path
                            if p and ("site-packages" in p or not p.startswith(repo))]
    import importlib
    for name in sys.argv[3:]:
        importlib.import_module(name)
    ours = {n: getattr(m, "__file__", None) or "" for n, m in sys.modules.items()
            if n.split(".")[0] in ("holdfast", "lambdas", "worker", "infra")}
    print(json.dumps(ours))
""")


def test_handlers_import_from_the_asset_alone(cli_assembly: Path,
                                              template_json: dict[str, Any]) -> None:
    """Both handler modules import with only the asset on the path (boto3/Powertools aside)."""
    modules = [h.rsplit(".", 1)[0] for h in (ROUTER_HANDLER, SWEEPER_HANDLER)]
    present = [m for m in modules if (REPO / (m.replace(".", "/") + ".py")).exists()]
    assert present == modules
    root = code_asset_dir(cli_assembly, template_json)
    env = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "HOLDFAST_TABLE": "t", "HOLDFAST_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
           "POWERTOOLS_SERVICE_NAME": "probe", "POWERTOOLS_METRICS_NAMESPACE": "Holdfast",
           "POWERTOOLS_TRACE_DISABLED": "true", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-I", "-c", _IMPORT_PROBE, str(root), str(REPO),
                           *present],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    outside = {n: f for n, f in loaded.items() if f and not f.startswith(str(root))}
    assert outside == {}, f"imported from outside the asset: {outside}"
    assert not [n for n in loaded if n.split(".")[:2] in (["holdfast", "worker"],
                                                           ["holdfast", "infra"])]
