"""pytest fixtures for tests/pg_scripts; the harness lives in pg_harness.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from lease_stand_in import LeaseServer
from pg_harness import Env, MotoS3


@pytest.fixture(scope="session")
def session_dir():
    # Short paths: unix socket paths are limited to 107 bytes.
    d = Path(tempfile.mkdtemp(prefix="lspg-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    if not os.environ.get("LOCKSTEP_KEEP_TEST_DIRS"):
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def s3(session_dir):
    server = MotoS3(session_dir)
    yield server
    server.close()


@pytest.fixture
def env(session_dir, request):
    base = Path(tempfile.mkdtemp(prefix="t", dir=session_dir))
    (base / "TEST").write_text(request.node.name + "\n")
    base.chmod(0o755)
    e = Env(base, None)
    yield e
    e.close()
    if not os.environ.get("LOCKSTEP_KEEP_TEST_DIRS"):
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def s3env(env, s3):
    env.s3 = s3
    return env


@pytest.fixture
def lease():
    """The Lease endpoints of an API server (lease_stand_in.py), on loopback."""
    s = LeaseServer()
    yield s
    s.close()
