"""What a user's install gets: a typed package, its license, and clear words for a missing
extra."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from holdfast.localaws import LocalAws, LocalAwsError

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_wheel_is_typed_and_licensed() -> None:
    """py.typed ships in the package (users' mypy checks their handlers against ours), every
    package-data file exists, and the license the metadata names ships as a file."""
    project = _project()
    assert (ROOT / "holdfast" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["holdfast"]
    for name in project["tool"]["setuptools"]["package-data"]["holdfast"]:
        assert (ROOT / "holdfast" / name).is_file(), name  # DynamoDB Local's launcher source too
    assert project["project"]["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]


def test_holdfast_cdk_without_the_cdk_says_which_extra() -> None:
    """import holdfast.cdk on the base install: an ImportError naming the [cdk] extra."""
    code = ("import sys; sys.modules['aws_cdk'] = None\n"
            "try:\n    import holdfast.cdk\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert '".[cdk]"' in out


def test_the_local_fleet_without_moto_says_which_extra(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """The local AWS on the base install: a LocalAwsError naming the [local] extra, before any
    process is started (it was a child's traceback)."""
    import holdfast.localaws.stack as stack

    real = stack.importlib.util.find_spec
    monkeypatch.setattr(stack.importlib.util, "find_spec",
                        lambda name, *a: None if name == "moto" else real(name, *a))
    with pytest.raises(LocalAwsError, match=r'"\.\[local\]"'):
        LocalAws(workdir=tmp_path).start()


@pytest.mark.parametrize("package", ["holdfast/__init__.py", "worker/__init__.py"])
def test_lazy_exports_are_hidden_from_type_checkers(package: str) -> None:
    """The packages' lazy ``__getattr__`` is defined only when not type checking: a module
    ``__getattr__`` makes mypy accept any name (``from holdfast import Mesage`` passed
    ``--strict`` as ``Any``); the names themselves are imported under TYPE_CHECKING."""
    import ast

    tree = ast.parse((ROOT / package).read_text())
    top = [n for n in tree.body if isinstance(n, ast.Assign)
           and any(getattr(t, "id", None) == "__getattr__" for t in n.targets)]
    assert not top, "a module-level __getattr__ a type checker sees"
    (guard,) = [n for n in tree.body if isinstance(n, ast.If)
                and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    assert any(isinstance(n, ast.Assign) and n.targets[0].id == "__getattr__"  # type: ignore[attr-defined]
               for n in guard.orelse)
    assert all(isinstance(n, ast.ImportFrom) for n in guard.body)
