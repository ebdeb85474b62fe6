"""Holdfast in your own CDK app: ``from holdfast.cdk import HoldfastFleet`` (``pip install
holdfast[cdk]``).

``HoldfastFleet(self, "Fleet", handler="myapp.handler:handle", worker_image=uri)`` in any
Stack; every other setting through ``settings=Settings(...)``. See ``holdfast.infra.fleet``.
"""

from __future__ import annotations

import os

# jsii (the bridge to the CDK's JavaScript) prints a banner on every synth under Node 20, which
# reached end of life in April 2026 while our README still says "Node 20+". The value lists the
# Node majors to keep quiet about, so it silences Node 20 only (any other end-of-life Node
# still warns); a value the user set wins. It must be set before aws_cdk is first imported,
# which starts the jsii runtime.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

try:
    import aws_cdk  # noqa: F401 - only to say what is missing, before the constructs need it
except ImportError as exc:  # the base install: say which extra, not a bare module name
    raise ImportError('holdfast.cdk needs the CDK: pip install ".[cdk]" in a Holdfast checkout '
                      "(aws-cdk-lib, constructs, cdk-nag)") from exc

from holdfast.infra.exceptions import SettingsError
from holdfast.infra.fleet import HoldfastFleet
from holdfast.infra.settings import Settings

__all__ = ["HoldfastFleet", "Settings", "SettingsError"]
