"""The worker image: slim, runtime dependencies only, non-root, signals, health, small context."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.infra.conftest import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
# What the image is built from: the metadata and the holdfast package (with the folders its
# links point to), not infra/ or README.md: the context is the image asset's hash.
PACKAGE_FILES = {"pyproject.toml", "LICENSE", "holdfast", "worker", "lambdas"}


def dockerignore_allows(folder: Path = REPO) -> set[str]:
    """The top-level names the allow-list lets into the build context."""
    lines = [ln.strip() for ln in (folder / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    return {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_final_stage_is_slim_non_root_with_health_and_exec_entrypoint() -> None:
    """Slim Python base, a numeric non-root USER, HEALTHCHECK, exec-form worker entrypoint."""
    steps = instructions(DOCKERFILE)
    froms = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    final = steps[froms[-1]:]
    assert re.match(r"python:3\.1[1-3]-slim", final[0][1])
    (user,) = [arg for word, arg in final if word == "USER"]
    assert user.split(":")[0].isdigit() and user.split(":")[0] != "0"
    (health,) = [arg for word, arg in final if word == "HEALTHCHECK"]
    assert '"holdfast.worker.health"' in health
    (entry,) = [arg for word, arg in final if word == "ENTRYPOINT"]
    # exec form: signals reach python
    assert json.loads(entry) == ["python", "-m", "holdfast.worker"]


def test_only_runtime_dependencies_are_installed() -> None:
    """`pip install .` without extras: no CDK, no test or dev tools in the image."""
    runs = " ".join(arg for word, arg in instructions(DOCKERFILE) if word == "RUN")
    assert re.search(r"pip install (--\S+ )*\.( |$)", runs), runs
    assert "[" not in runs.split("pip install", 1)[1].split("&&")[0]
    commands = " ".join(arg for _, arg in instructions(DOCKERFILE))
    for banned in ("aws-cdk", "pytest", "requirements-dev", "[dev]", "[infra]"):
        assert banned not in commands


def test_dockerignore_keeps_the_build_context_small() -> None:
    """Allow-list: tests, node_modules, the venv, cdk.out, .git, bench and docs stay out."""
    assert dockerignore_allows() == PACKAGE_FILES


def test_every_copied_path_is_in_the_context() -> None:
    """Each COPY of the build context names something .dockerignore lets in."""
    copied = {source.rstrip("/") for word, arg in instructions(DOCKERFILE)
              if word == "COPY" and "--from" not in arg
              for source in arg.split()[:-1] if not source.startswith("--")}
    assert copied and copied <= dockerignore_allows(), copied - dockerignore_allows()


def test_image_asset_context_excludes_everything_else(cli_assembly: Path) -> None:
    """The staged Docker context of `cdk synth` holds only what the image needs."""
    assets = json.loads((cli_assembly / "Holdfast.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    context = cli_assembly / image["source"]["directory"]
    top = {p.name for p in context.iterdir()}
    assert top == {"Dockerfile", ".dockerignore"} | PACKAGE_FILES
    assert not list(context.rglob("tests")) and not list(context.rglob("__pycache__"))


def test_the_staged_context_builds_the_worker_package(cli_assembly: Path,
                                                      tmp_path: Path) -> None:
    """The image's context, without infra/ or README.md (so neither changes the image asset's
    hash: an alarm's threshold is not a deploy), still builds the package the way the
    Dockerfile does: worker and Lambdas in, the CDK constructs out, the license shipped."""
    assert "touch README.md" in " ".join(a for w, a in instructions(DOCKERFILE) if w == "RUN")
    assets = json.loads((cli_assembly / "Holdfast.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    context = tmp_path / "context"
    shutil.copytree(cli_assembly / image["source"]["directory"], context, symlinks=True)
    (context / "README.md").touch()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", ".", "-w", str(tmp_path / "out")],
                   cwd=context, check=True, timeout=120)
    (wheel,) = (tmp_path / "out").glob("holdfast-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "holdfast/worker/__main__.py" in names
    assert "holdfast/lambdas/router/handler.py" in names
    assert not [n for n in names if n.startswith("holdfast/infra/")]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names[-8:]


def test_example_dockerfile_is_a_users_own() -> None:
    """The example's Dockerfile: python:3.12-slim, pip installs the Holdfast wheel beside it or
    the one HOLDFAST names (no extras; never "holdfast" from PyPI, an unrelated project) and the
    app's package, numeric non-root USER, exec-form `python -m holdfast.worker`; no base
    image built from the checkout."""
    steps = instructions((REPO / "examples" / "transcripts" / "Dockerfile").read_text())
    (base,) = [arg for word, arg in steps if word == "FROM"]
    assert base == "python:3.12-slim"
    runs = " ".join(arg for word, arg in steps if word == "RUN")
    assert dict(a.split("=", 1) for w, a in steps if w == "ARG")["HOLDFAST"] == '""'
    assert "${HOLDFAST:-$(ls ./holdfast-*-py3-none-any.whl" in runs
    assert re.search(r'pip install "\$wheel"', runs) and "exit 1" in runs
    assert re.search(r"pip install \.( |$)", runs), runs
    (user,) = [arg for word, arg in steps if word == "USER"]
    assert user.split(":")[0].isdigit() and user.split(":")[0] != "0"
    (entry,) = [arg for word, arg in steps if word == "ENTRYPOINT"]
    assert json.loads(entry) == ["python", "-m", "holdfast.worker"]


def test_example_context_is_only_what_its_image_installs() -> None:
    """The example's allow-list: its package, its metadata and the Holdfast wheel; app.py,
    tests and README stay out of the image asset's hash (an app edit is not a deploy)."""
    folder = REPO / "examples" / "transcripts"
    assert dockerignore_allows(folder) == {"pyproject.toml", "transcripts", "holdfast-*.whl"}
