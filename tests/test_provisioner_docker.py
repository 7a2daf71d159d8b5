"""What only the docker provisioner does: images built once per content from a task's Dockerfile,
the confinement every container gets (limits, read-only root, no capabilities, no network), and
clear errors for images it cannot have. Everything every backend does is in ``test_backends.py``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from actors.errors import EnvError
from actors.provisioners.docker import DockerProvisioner, engine_client
from specs.env import EnvConfig, EnvHandle, EnvInfo
from tests.backends import docker_engine, host_python_binds, run_id, unavailable

pytestmark = pytest.mark.anyio

DOCKERFILE = """\
FROM mcprl/hostroot
ARG GREETING=unset
ENV GREETING=${GREETING}
COPY seed.txt /opt/seed/seed.txt
"""


@pytest.fixture
def provisioner() -> DockerProvisioner:
    if (why := docker_engine()) is not None:
        unavailable(why)
    return DockerProvisioner(ro_binds=host_python_binds(), memory_mb=256, pids=64)


@asynccontextmanager
async def container(provisioner: DockerProvisioner, config: EnvConfig) -> AsyncIterator[EnvInfo]:
    env = await provisioner.create(config, run_id())
    try:
        yield env
    finally:
        with anyio.CancelScope(shield=True):
            await provisioner.destroy(env)


@pytest.fixture
def task_image(tmp_path: Path) -> Path:
    """A domain's image context: a Dockerfile on top of the host-root image and a seed file.
    (No registry is reachable, so no ``RUN`` or remote base.) Unique content per test run."""
    (tmp_path / "seed.txt").write_text(f"seed {uuid.uuid4().hex}\n")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE)
    return dockerfile


async def test_a_task_image_is_built_once_per_content_and_build_args(
    provisioner: DockerProvisioner, task_image: Path
) -> None:
    config = EnvConfig(dockerfile_path=str(task_image), build_args={"GREETING": "hello"})
    with anyio.fail_after(120):
        await provisioner.ensure_image(EnvConfig())  # the host-root base, possibly built now
        before = provisioner.builds
        async with container(provisioner, config) as env:
            handle = EnvHandle(env, provisioner)
            assert (
                await handle.read_file("/opt/seed/seed.txt") == (task_image.parent / "seed.txt").read_text()
            )
            assert (await handle.run(["sh", "-c", 'echo "$GREETING"'])).stdout == "hello\n"
        async with container(provisioner, config):
            pass
        assert provisioner.builds == before + 1  # the second create found the tag
        fresh = DockerProvisioner(ro_binds=host_python_binds())
        async with container(fresh, config):
            assert fresh.builds == 0  # another process (the gateway's, a later run) builds nothing
        other = EnvConfig(dockerfile_path=str(task_image), build_args={"GREETING": "bye"})
        async with container(provisioner, other) as env:
            assert (await EnvHandle(env, provisioner).run(["sh", "-c", 'echo "$GREETING"'])).stdout == "bye\n"
        assert provisioner.builds == before + 2
        for built in (config, other):  # unique per test run: do not let them pile up in the engine
            tag, _ = await provisioner.ensure_image(built)
            await anyio.to_thread.run_sync(lambda t=tag: engine_client(provisioner.base_url).images.remove(t))


async def test_every_container_is_confined(provisioner: DockerProvisioner) -> None:
    with anyio.fail_after(60):
        async with container(provisioner, EnvConfig(cpus=0.5)) as env:
            attrs = await anyio.to_thread.run_sync(
                lambda: engine_client(provisioner.base_url).containers.get(env.data["container"]).attrs
            )
            host = attrs["HostConfig"]
            assert host["Memory"] == 256 * 1024 * 1024 and host["PidsLimit"] == 64
            assert host["NanoCpus"] == 500_000_000
            assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none"
            assert any("no-new-privileges" in opt for opt in host["SecurityOpt"] or [])
            assert attrs["Config"]["Labels"]["io.mcprl.run"] == env.run_id
            handle = EnvHandle(env, provisioner)
            caps = await handle.run(["sh", "-c", "grep CapEff /proc/self/status"])
            assert caps.stdout.split() == ["CapEff:", "0000000000000000"]
            forks = await handle.run(
                ["sh", "-c", "for i in $(seq 80); do sleep 5 & done; wait"], timeout_s=30
            )
            assert forks.returncode != 0 or "fork" in forks.stderr.lower()  # the pid limit holds
            hog = "b = bytearray(400 * 1024 * 1024); print('allocated')"
            result = await handle.run(["python3", "-c", hog], timeout_s=30)
            assert result.returncode != 0 and "allocated" not in result.stdout  # the memory limit holds


async def test_images_it_cannot_have_are_clear_errors(provisioner: DockerProvisioner, tmp_path: Path) -> None:
    broken = tmp_path / "Dockerfile"
    broken.write_text("FROM mcprl/hostroot\nCOPY missing.txt /missing.txt\n")
    with anyio.fail_after(60):
        with pytest.raises(EnvError, match="not in the engine and could not be pulled"):
            await provisioner.create(EnvConfig(image="mcprl/no-such-image:1"), run_id())
        with pytest.raises(EnvError, match="building mcprl/task"):
            await provisioner.create(EnvConfig(dockerfile_path=str(broken)), run_id())
        with pytest.raises(EnvError, match="is not a file"):
            await provisioner.create(EnvConfig(dockerfile_path=str(tmp_path / "nope")), run_id())


async def test_an_exec_it_cannot_kill_from_this_host_still_returns_at_its_deadline(
    provisioner: DockerProvisioner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine on another host: no host pid to kill; the exec's stream is shut at the deadline."""
    from actors.provisioners import docker_exec

    monkeypatch.setattr(docker_exec, "kill_exec", lambda url, exec_id, env_id: False)
    with anyio.fail_after(60):
        async with container(provisioner, EnvConfig()) as env:
            with anyio.fail_after(15):  # far below the command's 300 s
                result = await provisioner.exec(env, ["sh", "-c", "echo started; sleep 300"], timeout_s=1.0)
            assert result.returncode == 124 and result.stdout == "started\n"
            assert "deadline" in result.stderr
