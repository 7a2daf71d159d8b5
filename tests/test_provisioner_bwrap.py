"""What only the bubblewrap provisioner does: the environment's files at the same path on the host
and inside, a sandbox environment of exactly the variables it is given, and refusing what needs a
container. Everything every backend does is in ``test_backends.py``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import anyio
import anyio.abc
import msgspec
import pytest

from actors.errors import EnvError
from actors.provisioners.bwrap import BwrapProvisioner
from actors.provisioners.local import ENV_MARKER
from specs.env import EnvConfig, EnvHandle, ServerLaunch
from tests.backends import background, environment

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (`bwrap` not on PATH; Debian: apt-get install bubblewrap)",
)

REPO = Path(__file__).resolve().parent.parent
CALCULATOR_REGISTRY = REPO / "specs" / "domains" / "calculator" / "servers.json"


@pytest.fixture
def provisioner(tmp_path: Path) -> BwrapProvisioner:
    return BwrapProvisioner(tmp_path / "envs")


@pytest.mark.anyio
async def test_hooks_write_read_and_run_through_the_env_handle(provisioner: BwrapProvisioner) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            handle = EnvHandle(env, provisioner)
            await handle.write_file("notes/a.txt", "x\n")
            on_host = anyio.Path(env.workdir) / "notes" / "a.txt"
            assert await on_host.read_text() == "x\n"  # the same files on the host
            assert await handle.read_file(f"{env.workdir}/notes/a.txt") == "x\n"  # same path inside
            counted = await handle.run(["wc", "-c"], stdin=b"12345")
            assert (counted.returncode, counted.stdout.strip()) == (0, "5")
            with pytest.raises(OSError, match="notes"):
                await handle.write_file("/usr/notes.txt", "read-only system files")
            with pytest.raises(FileNotFoundError):
                await handle.read_file("missing.txt")


@pytest.mark.anyio
async def test_server_secrets_reach_the_sandbox_through_the_environment_never_the_command_line(
    provisioner: BwrapProvisioner,
) -> None:
    dump = "import json, os; print(json.dumps(dict(os.environ)), flush=True)"
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            launch = provisioner.stdio_launch(
                env, ServerLaunch(name="s", command="true", env={"API_KEY": "s3cr3t"})
            )
            assert "s3cr3t" not in " ".join(launch.args) and "s3cr3t" not in repr(launch)
            async with background(provisioner, env, dump, {"API_KEY": "s3cr3t"}) as (_, line):
                seen = json.loads(line)
            home = str(Path(env.workdir).parent / "home")
    assert seen["API_KEY"] == "s3cr3t" and seen["HOME"] == home and seen[ENV_MARKER] == env.env_id
    assert set(seen) == {"API_KEY", "HOME", "PATH", "PWD", "TMPDIR", "LANG", ENV_MARKER}  # none of the host's


@pytest.mark.anyio
async def test_create_refuses_container_images_and_network(provisioner: BwrapProvisioner) -> None:
    with pytest.raises(EnvError, match="dockerfile_path"):
        await provisioner.create(EnvConfig(dockerfile_path="Dockerfile"), "test-run")
    with pytest.raises(EnvError, match="network"):
        await provisioner.create(EnvConfig(network=True), "test-run")
    assert await provisioner.list_owned(None) == []


@pytest.mark.anyio
async def test_an_environment_has_cgroups_of_its_own_with_its_limits_removed_with_it(tmp_path: Path) -> None:
    from actors.provisioners.limits import find_cgroups

    if find_cgroups() is None:
        pytest.skip("no writable cgroup here: bwrap environments use rlimits (the next test)")
    provisioner = BwrapProvisioner(tmp_path / "envs", memory_mb=300, pids=40)
    with anyio.fail_after(30):
        async with environment(provisioner, EnvConfig(cpus=0.5)) as env:
            groups = [Path(g) for g in env.data["cgroups"]]
            assert groups and all(g.name == env.env_id and g.is_dir() for g in groups)
            assert env.data["limits"] == {"memory_mb": 300, "pids": 40, "cpus": 0.5}
            shown = await EnvHandle(env, provisioner).run(["cat", "/proc/self/cgroup"])
            assert shown.returncode == 0
            names = ("pids.max", "memory.max", "memory.limit_in_bytes", "cpu.cfs_quota_us", "cpu.max")
            written = {n: (g / n).read_text().strip() for g in groups for n in names if (g / n).exists()}
            assert written.get("pids.max") == "40"
            assert str(300 * 1024 * 1024) in (written.get("memory.max"), written.get("memory.limit_in_bytes"))
            assert "50000" in (written.get("cpu.cfs_quota_us", ""), written.get("cpu.max", "").split(" ")[0])
            assert await provisioner.limits_hit(env) == {"memory": 0, "pids": 0}
        assert not any(g.exists() for g in groups)  # destroy removed them


@pytest.mark.anyio
async def test_a_cgroup_still_busy_at_destroy_is_removed_by_the_roots_next_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load an environment's last processes can outlast ``destroy``'s wait: its cgroup stays
    (EBUSY) while its label goes, so the reaper never sees it. It is kept in the root's pending
    groups and removed by the next ``create`` once empty. A process of ours that ``destroy`` does not
    kill (no env marker) stands in for one slow to die."""
    from actors.provisioners import limits
    from actors.provisioners.bwrap import PENDING_GROUPS

    if limits.find_cgroups() is None:
        pytest.skip("no writable cgroup here: no group to leave behind")
    monkeypatch.setattr(limits, "REMOVE_WAIT_S", 0.2)
    provisioner = BwrapProvisioner(tmp_path / "envs")
    with anyio.fail_after(30):
        slow = await anyio.open_process(["sleep", "60"])
        env = await provisioner.create(EnvConfig(), "run-a")
        groups = [Path(g) for g in env.data["cgroups"]]
        try:
            for group in groups:
                (group / "cgroup.procs").write_text(str(slow.pid))
            await provisioner.destroy(env)
            assert await provisioner.list_owned(None) == []
            assert all(g.is_dir() for g in groups)  # busy: left behind...
            pending = (tmp_path / "envs" / PENDING_GROUPS).read_text().split()
            assert sorted(pending) == sorted(map(str, groups))  # ...but remembered
            slow.kill()
            await slow.wait()
            async with environment(provisioner):
                assert not any(g.exists() for g in groups)
                assert (tmp_path / "envs" / PENDING_GROUPS).read_text() == ""
        finally:
            if slow.returncode is None:
                slow.kill()
            await slow.aclose()
            limits.remove([str(g) for g in groups], wait_s=1)  # whatever a failure above left


@pytest.mark.anyio
async def test_without_cgroups_the_memory_limit_holds_per_process_through_rlimits(tmp_path: Path) -> None:
    if shutil.which("prlimit") is None:
        pytest.skip("util-linux's prlimit is not installed")
    provisioner = BwrapProvisioner(tmp_path / "envs", memory_mb=512, cgroups=False)
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            assert env.data["cgroups"] == []
            handle = EnvHandle(env, provisioner)
            hog = await handle.run(["python3", "-c", "bytearray(1024 ** 3)"])
            assert hog.returncode != 0 and "MemoryError" in hog.stderr
            fits = await handle.run(["python3", "-c", "print(len(bytearray(64 * 1024 ** 2)))"])
            assert (fits.returncode, fits.stdout.strip()) == (0, str(64 * 1024**2))
            assert await provisioner.limits_hit(env) == {}


def test_a_command_of_an_npm_installation_binds_its_whole_prefix(tmp_path: Path) -> None:
    """``<prefix>/node_modules/.bin/tool`` links into its package, which requires sibling packages:
    the prefix is bound, not the two directories the link touches."""
    from actors.provisioners.bwrap import install_roots

    package = tmp_path / "browser" / "node_modules" / "@scope" / "tool"
    package.mkdir(parents=True)
    (package / "cli.js").write_text("#!/bin/sh\n")
    (tmp_path / "browser" / "node_modules" / ".bin").mkdir()
    (tmp_path / "browser" / "node_modules" / ".bin" / "tool").symlink_to("../@scope/tool/cli.js")
    roots = install_roots(str(tmp_path / "browser" / "node_modules" / ".bin" / "tool"), "/")
    assert tmp_path / "browser" in roots and not any(tmp_path / "browser" in r.parents for r in roots)


LISTENER = (
    "import socket\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "c, _ = s.accept(); c.sendall(b'hello from the same environment'); c.close()\n"
)
CLIENT = (
    "import errno, socket, sys\n"
    "try:\n"
    "    print(socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).recv(100).decode())\n"
    "except OSError as e:\n"
    "    print(errno.errorcode.get(e.errno, str(e)))\n"
)


@pytest.mark.anyio
async def test_the_sandboxes_of_one_environment_share_its_loopback_and_no_other_does(
    provisioner: BwrapProvisioner,
) -> None:
    """A server listening on 127.0.0.1 in one sandbox is reached from another sandbox of its
    environment (a browser and the web app it shows), not from another environment; the namespace
    goes with the environment."""
    from actors.provisioners import bwrap_net

    if bwrap_net.why_not_shared() is not None:
        pytest.skip(f"one namespace per environment needs root here: {bwrap_net.why_not_shared()}")
    with anyio.fail_after(60):
        async with environment(provisioner) as env, environment(provisioner) as other:
            held = env.data["netns"]
            assert held and await anyio.Path(held).exists() and other.data["netns"] != held
            async with background(provisioner, env, LISTENER) as (_, port):
                outside = await provisioner.exec(other, [sys.executable, "-c", CLIENT, port])
                inside = await provisioner.exec(env, [sys.executable, "-c", CLIENT, port])
            assert (inside.stdout.strip(), outside.stdout.strip()) == (
                "hello from the same environment",
                "ECONNREFUSED",
            ), (inside.stderr, outside.stderr)
    mounts = await anyio.Path("/proc/mounts").read_text()
    assert not await anyio.Path(held).exists() and held not in mounts


@pytest.mark.anyio
async def test_an_environment_stopped_before_its_label_recorded_its_namespace_is_destroyed_whole(
    provisioner: BwrapProvisioner,
) -> None:
    """A node killed between the namespace's (and cgroups') creation and the label's rewrite leaves
    a label without ``netns`` and ``cgroups``: destroying from that label still unmounts the
    namespace, removes the cgroups and the dir."""
    from actors.provisioners import bwrap_net

    if bwrap_net.why_not_shared() is not None:
        pytest.skip(f"one namespace per environment needs root here: {bwrap_net.why_not_shared()}")
    env = await provisioner.create(EnvConfig(), "early-label")
    held, env_dir, groups = env.data["netns"], anyio.Path(env.data["env_dir"]), env.data["cgroups"]
    early = msgspec.structs.replace(
        env, data={k: v for k, v in env.data.items() if k not in ("netns", "cgroups")}
    )
    await provisioner.destroy(early)
    mounts = await anyio.Path("/proc/mounts").read_text()
    assert held not in mounts and not await env_dir.exists()
    assert not [g for g in groups if await anyio.Path(g).exists()]
