"""The bubblewrap provisioner: isolation between environments, no network, reset, the real
calculator MCP server inside a sandbox through the gateway, and the hook interface (EnvHandle).

Processes are counted on the host through the environment marker (``MCPRL_ENV_ID``), which every
sandboxed process carries; a sandbox that is gone has no marked process left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import psutil
import pytest
from anyio.abc import SocketAttribute
from mcp.client.stdio import get_default_environment

from actors.errors import EnvError
from actors.mcp_gateway import McpGateway
from actors.provisioners.base import EnvConfig, EnvHandle, EnvInfo, ServerLaunch
from actors.provisioners.bwrap import BwrapProvisioner
from actors.provisioners.local import ENV_MARKER
from specs.servers import load_server_registry

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (`bwrap` not on PATH; Debian: apt-get install bubblewrap)",
)

REPO = Path(__file__).resolve().parent.parent
CALCULATOR_REGISTRY = REPO / "specs" / "domains" / "calculator" / "servers.json"


@pytest.fixture
def provisioner(tmp_path: Path) -> BwrapProvisioner:
    return BwrapProvisioner(tmp_path / "envs")


@asynccontextmanager
async def environment(
    provisioner: BwrapProvisioner, config: EnvConfig | None = None
) -> AsyncIterator[EnvInfo]:
    env = await provisioner.create(config or EnvConfig(), "test-run")
    try:
        yield env
    finally:
        with anyio.CancelScope(shield=True):
            await provisioner.destroy(env)


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
    return any(c[0] == sys.executable and f"time.sleep({seconds})" in c[-1] for c in cmdlines(procs))


@asynccontextmanager
async def background(
    provisioner: BwrapProvisioner, env: EnvInfo, code: str, environ: dict[str, str] | None = None
) -> AsyncIterator[tuple[anyio.abc.Process, str]]:
    """``python -c code`` started in ``env`` exactly as the gateway starts a server (``stdio_launch``);
    yields the process and its first line of output, so the sandbox is known to be up."""
    server = ServerLaunch(name="bg", command=sys.executable, args=("-c", code), env=environ or {})
    launch = provisioner.stdio_launch(env, server)
    process = await anyio.open_process(
        [launch.command, *launch.args],
        env=get_default_environment() | launch.env,  # what the MCP SDK passes to a server
        cwd=launch.cwd,
        stdin=subprocess.DEVNULL,
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


@pytest.mark.anyio
async def test_two_environments_see_neither_each_others_files_nor_processes(
    provisioner: BwrapProvisioner,
) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as a, environment(provisioner) as b:
            handle_a, handle_b = EnvHandle(a, provisioner), EnvHandle(b, provisioner)
            await handle_a.write_file("secret.txt", "only in a")
            assert await handle_a.read_file("secret.txt") == "only in a"
            assert (await handle_b.run(["test", "-e", "secret.txt"])).returncode == 1
            assert (await handle_b.run(["cat", f"{a.workdir}/secret.txt"])).returncode != 0
            list_procs = ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]
            async with background(provisioner, a, sleeper(3141)):
                assert sleeping(marked(a.env_id), 3141)  # it runs, seen from the host
                seen_from_b = await handle_b.run(list_procs)
                assert seen_from_b.returncode == 0 and "cat /proc" in seen_from_b.stdout
                assert "3141" not in seen_from_b.stdout


@pytest.mark.anyio
async def test_a_sandboxed_process_reaches_neither_the_hosts_loopback_nor_any_other_network(
    provisioner: BwrapProvisioner,
) -> None:
    probe = (
        "import errno, json, socket, sys\n"
        "def attempt(host, port):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=5).close()\n"
        "        return 'connected'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e))\n"
        "print(json.dumps([attempt('127.0.0.1', int(sys.argv[1])), attempt('10.255.255.1', 80)]))\n"
    )
    with anyio.fail_after(30):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(SocketAttribute.local_port)
            async with await anyio.connect_tcp("127.0.0.1", port):
                pass  # the listener is reachable from the host
            async with environment(provisioner) as env:
                result = await provisioner.exec(env, [sys.executable, "-c", probe, str(port)])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["ECONNREFUSED", "ENETUNREACH"]


@pytest.mark.anyio
async def test_reset_kills_the_environments_processes_and_wipes_its_files(
    provisioner: BwrapProvisioner,
) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            handle = EnvHandle(env, provisioner)
            await handle.write_file("data/state.txt", "dirty")
            await handle.run(["sh", "-c", 'echo x > "$HOME/.history"'])
            async with background(provisioner, env, sleeper(2718)) as (process, _):
                before = marked(env.env_id)
                assert sleeping(before, 2718) and any(c[0].endswith("bwrap") for c in cmdlines(before))
                await provisioner.reset(env)
                assert marked(env.env_id) == []
                assert await process.wait() != 0
            for sub in ("work", "home"):
                assert [p async for p in (anyio.Path(env.workdir).parent / sub).iterdir()] == []
            assert await provisioner.health_check(env)


@pytest.mark.anyio
async def test_an_exec_past_its_deadline_leaves_no_process_of_its_sandbox(
    provisioner: BwrapProvisioner,
) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            result = await provisioner.exec(env, ["sh", "-c", "sleep 300 & sleep 300"], timeout_s=0.5)
            assert result.returncode == 124 and "deadline" in result.stderr
            assert marked(env.env_id) == []


@pytest.mark.anyio
async def test_the_calculator_mcp_server_answers_from_inside_the_sandbox_and_leaves_nothing_behind(
    provisioner: BwrapProvisioner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # the registry names the server's venv relative to the project root
    calculator = load_server_registry(CALCULATOR_REGISTRY).launch("calculator")
    with anyio.fail_after(60):
        async with environment(provisioner, EnvConfig(servers=(calculator,))) as env:
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                await gateway.open(env, [calculator])
                (server,) = [p for p in marked(env.env_id) if "mcp_server_calculator" in p.cmdline()[1:3]]
                for ns in ("pid", "net", "mnt"):  # it runs in namespaces of its own
                    assert os.readlink(f"/proc/{server.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
                result = await gateway.call(
                    env.env_id, "calculator__calculate", {"expression": "17*25-38"}, 10
                )
                assert not result.is_error, result.text
                assert result.text == "387"
            assert marked(env.env_id) == []
        assert marked(env.env_id) == [] and not await anyio.Path(env.workdir).exists()


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
async def test_list_owned_finds_the_runs_environments_and_destroy_is_idempotent(
    provisioner: BwrapProvisioner,
) -> None:
    with anyio.fail_after(30):
        env = await provisioner.create(EnvConfig(), "run-a")
        assert [e.env_id for e in await provisioner.list_owned("run-a")] == [env.env_id]
        assert await provisioner.list_owned("run-b") == []
        await provisioner.destroy(env)
        await provisioner.destroy(env)
        assert await provisioner.list_owned(None) == []


@pytest.mark.anyio
async def test_create_refuses_container_images_and_network(provisioner: BwrapProvisioner) -> None:
    with pytest.raises(EnvError, match="dockerfile_path"):
        await provisioner.create(EnvConfig(dockerfile_path="Dockerfile"), "test-run")
    with pytest.raises(EnvError, match="network"):
        await provisioner.create(EnvConfig(network=True), "test-run")
    assert await provisioner.list_owned(None) == []
