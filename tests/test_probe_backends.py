"""``launch/probe.py --backend``: the calculator checked inside each backend's environment, as a
user checks a server before training on it (run as a user runs it, from the project root).

A backend whose runtime is missing is skipped with the fix, except under CI (``CI=true``): there it
fails (``tests/backends.py``). The probe without ``--backend`` (local) is covered in test_gateway.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import anyio
import pytest

from actors.provisioners.base import make_provisioner
from tests.backends import BACKENDS, REPO, docker_engine, marked, unavailable

CALCULATOR = ("--servers", "specs/domains/calculator/servers.json", "--server", "calculator")


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "launch/probe.py", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def require(backend: str) -> None:
    if backend == "bwrap" and shutil.which("bwrap") is None:
        unavailable("bubblewrap is not installed (`bwrap` not on PATH; Debian: apt-get install bubblewrap)")
    if backend == "docker" and (why := docker_engine()) is not None:
        unavailable(why)


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_calls_the_calculator_inside_the_backend_and_leaves_no_env(backend: str) -> None:
    require(backend)
    done = run_probe(
        "--backend", backend, *CALCULATOR, "--call", "calculate", "--args", '{"expression": "6*7"}'
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["backend"] == backend
    assert [t["name"] for t in report["tools"]] == ["calculator__calculate"]
    assert "annotations" in report["tools"][0]
    assert report["call"]["result"] == {**report["call"]["result"], "text": "42", "is_error": False}
    env_id = report["env_id"]
    assert marked(env_id) == []
    left = anyio.run(make_provisioner(backend).list_owned, None)  # every run's, on the default root
    assert env_id not in [env.env_id for env in left]


def test_probe_exits_1_with_the_reason_when_the_backend_cannot_create_an_env() -> None:
    done = run_probe("--backend", "docker", "--docker-url", "unix:///nonexistent/mcprl.sock", *CALCULATOR)
    assert done.returncode == 1 and done.stdout == ""
    assert "cannot create a docker environment" in done.stderr and "no Docker API engine" in done.stderr


def test_probe_refuses_a_docker_url_without_the_docker_backend() -> None:
    done = run_probe("--docker-url", "unix:///x.sock", *CALCULATOR)
    assert done.returncode == 2 and "--docker-url needs --backend docker" in done.stderr
