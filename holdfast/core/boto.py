"""boto3 sessions that share one process-wide model loader.

A new ``boto3.session.Session`` reads and parses botocore's service models and endpoint rules
again (~0.1 s of CPU for one DynamoDB client, measured); a worker builds several clients, the
local fleet a few per process and the test suite thousands. Sessions stay one per client, as
boto3 asks for clients used from several threads, and each still resolves its own credentials,
region and endpoint from the environment when it is made; only the models, which never change
in a process, are read once (a session with the shared loader: ~0.01 s).
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
import botocore.session

__all__ = ["new_session"]

_lock = threading.Lock()
# Only the loader object: nothing is read until a client needs a model.
_LOADER: Any = botocore.session.get_session().get_component("data_loader")


def new_session(**kwargs: Any) -> boto3.session.Session:
    """A new boto3 session (``boto3.session.Session``'s keyword arguments) reading botocore's
    models through the process's one loader."""
    core = botocore.session.get_session()
    # The loader's caches are per instance, filled once per model; a race only loads twice.
    core.register_component("data_loader", _LOADER)
    session = boto3.session.Session(botocore_session=core, **kwargs)
    # Each boto3 session appends its data folder to the loader's search path: keep it once.
    with _lock:
        _LOADER.search_paths[:] = list(dict.fromkeys(_LOADER.search_paths))
    return session
