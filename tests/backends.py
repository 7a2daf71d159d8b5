"""The provisioner backends as test fixtures, and ways to see an environment's processes from the host.

``BACKENDS`` parametrises one suite over ``local``, ``bwrap`` and ``docker``. A backend whose runtime
is missing (no ``bwrap``, no Docker API engine at ``$DOCKER_HOST``) is skipped with the fix in the
reason, except under CI (``CI=true``), where ``.ci/run`` installs them: there it fails.

Every process an environment starts carries ``MCPRL_ENV_ID`` (docker: every exec'd process, seen
on the host with a local engine), so ``marked(env_id)`` lists them from outside on all backends.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import psutil
import pytest
from mcp.client.stdio import get_default_environment

from actors.provisioners.base import Provisioner
from actors.provisioners.bwrap import BwrapProvisioner, install_roots
from actors.provisioners.local import ENV_MARKER, LocalProvisioner
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from tests.waiting import until

REPO = Path(__file__).resolve().parent.parent
EDGE_SERVER = REPO / "tests" / "servers" / "edge_server.py"
BACKENDS = ("local", "bwrap", "docker")
ISOLATED = ("bwrap", "docker")


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must provide it: see .ci/run)")
    pytest.skip(reason)


@functools.cache
def docker_engine() -> str | None:
    """Why the docker backend cannot run here, or ``None`` if an engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
        return None
    except Exception as e:
        return (
            f"no Docker API engine at DOCKER_HOST={os.environ.get('DOCKER_HOST')!r} ({type(e).__name__}); "
            "start one with launch/podman_service.sh and export the DOCKER_HOST it prints"
        )


def host_python_binds() -> list[str]:
    """What a container needs to run this test process's Python and the test servers."""
    return [*map(str, install_roots(sys.executable, "/")), str(EDGE_SERVER.parent)]


def make_backend(backend: str, root: Path) -> Provisioner:
    if backend == "local":
        return LocalProvisioner(root)
    if backend == "bwrap":
        if shutil.which("bwrap") is None:
            unavailable(
                "bubblewrap is not installed (`bwrap` not on PATH; Debian: apt-get install bubblewrap)"
            )
        return BwrapProvisioner(root, ro_binds=[str(EDGE_SERVER.parent)])
    if backend == "docker":
        if (why := docker_engine()) is not None:
            unavailable(why)
        from actors.provisioners.docker import DockerProvisioner

        return DockerProvisioner(ro_binds=host_python_binds(), memory_mb=512, pids=256)
    raise ValueError(backend)


def run_id() -> str:
    """A run id of its own per test: a container engine is shared by every test (and every run)."""
    return f"test-{uuid.uuid4().hex[:8]}"


def edge_server(name: str = "edge") -> ServerLaunch:
    return ServerLaunch(name=name, command=sys.executable, args=(str(EDGE_SERVER),))


def marked(env_id: str) -> list[psutil.Process]:
    """Live (not zombie) host processes that carry the environment's marker."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(ENV_MARKER) == env_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def cmdlines(procs: list[psutil.Process]) -> list[list[str]]:
    lines = []
    for proc in procs:
        try:
            lines.append(proc.cmdline())
        except psutil.Error:
            continue
    return lines


def sleeper(seconds: int) -> str:
    """Python code that says "up" once it runs, then sleeps ``seconds`` (a recognisable cmdline)."""
    return f"import time; print('up', flush=True); time.sleep({seconds})"


def sleeping(procs: list[psutil.Process], seconds: int) -> bool:
    return any(len(c) > 1 and f"time.sleep({seconds})" in c[-1] for c in cmdlines(procs))


@asynccontextmanager
async def environment(provisioner: Provisioner, config: EnvConfig | None = None) -> AsyncIterator[EnvInfo]:
    env = await provisioner.create(config or EnvConfig(), run_id())
    try:
        yield env
    finally:
        with anyio.CancelScope(shield=True):
            await provisioner.destroy(env)


@asynccontextmanager
async def background(
    provisioner: Provisioner, env: EnvInfo, code: str, environ: dict[str, str] | None = None
) -> AsyncIterator[tuple[anyio.abc.Process, str]]:
    """``python -c code`` started in ``env`` exactly as the gateway starts a server (``stdio_launch``);
    yields the process and its first line of output, so the process is known to be up."""
    server = ServerLaunch(name="bg", command=sys.executable, args=("-c", code), env=environ or {})
    launch = provisioner.stdio_launch(env, server)
    process = await anyio.open_process(
        [launch.command, *launch.args],
        env=get_default_environment() | launch.env,  # what the MCP SDK passes to a server
        cwd=launch.cwd,
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive()
        yield process, line.decode()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


async def gone(env_id: str, seconds: float = 10.0) -> bool:
    """Whether every marked process of the environment is gone within ``seconds`` (the host's
    process table signals nothing to this process: checked until then)."""
    return await until(lambda: not marked(env_id), seconds)
