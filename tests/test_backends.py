"""One suite, every provisioner backend (local, bwrap, docker): hooks, reset, deadlines, MCP servers
inside the environment, secrets, ownership, reuse through the pool, fault injection, and (for the
isolated backends) isolation of files, processes and network.

Processes are counted on the host through the environment marker (see ``tests/backends.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import msgspec
import psutil
import pytest
from anyio.abc import SocketAttribute

from actors import mcp_gateway
from actors.env_pool import EnvPool
from actors.mcp_gateway import McpGateway
from actors.provisioners.base import Provisioner
from actors.provisioners.local import ENV_MARKER
from specs.env import EnvConfig, EnvHandle, EnvInfo, ServerLaunch
from specs.registry import cleanup, prepare
from specs.servers import load_server_registry
from specs.task import CleanupSpec, PrepareSpec, TaskSpec
from tests.backends import (
    BACKENDS,
    ISOLATED,
    REPO,
    background,
    cmdlines,
    docker_engine,
    edge_server,
    environment,
    gone,
    make_backend,
    marked,
    run_id,
    sleeper,
    sleeping,
)
from tests.waiting import until

pytestmark = pytest.mark.anyio
CALCULATOR_REGISTRY = REPO / "specs" / "domains" / "calculator" / "servers.json"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def provisioner(backend: str, tmp_path: Path) -> Provisioner:
    return make_backend(backend, tmp_path / "envs")


@pytest.fixture
def isolated(backend: str) -> None:
    if backend not in ISOLATED:
        pytest.skip(f"the {backend} backend is not isolated (development only, by design)")


def edge_processes(env_id: str) -> list[psutil.Process]:
    found = []
    for proc in marked(env_id):
        try:
            argv = proc.cmdline()  # the server itself, not a bwrap wrapping it
            if os.path.basename(argv[0]).startswith("python") and any("edge_server" in a for a in argv):
                found.append(proc)
        except psutil.Error:
            continue
    return found


# -- every backend -------------------------------------------------------------------------------


async def test_hooks_write_read_and_run_through_the_env_handle(provisioner: Provisioner) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            handle = EnvHandle(env, provisioner)
            await handle.write_file("notes/a.txt", "x\n")
            assert await handle.read_file("notes/a.txt") == "x\n"
            assert await handle.read_file(f"{env.workdir}/notes/a.txt") == "x\n"
            counted = await handle.run(["wc", "-c"], stdin=b"12345")
            assert (counted.returncode, counted.stdout.strip()) == (0, "5")
            failed = await handle.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
            assert (failed.returncode, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
            with pytest.raises(FileNotFoundError):
                await handle.read_file("missing.txt")


async def test_reset_kills_the_environments_processes_and_wipes_its_files(provisioner: Provisioner) -> None:
    with anyio.fail_after(60):
        async with environment(provisioner) as env:
            handle = EnvHandle(env, provisioner)
            await handle.write_file("data/state.txt", "dirty")
            await handle.run(["sh", "-c", 'echo x > "$HOME/.history"'])
            async with background(provisioner, env, sleeper(2718)) as (process, _):
                assert sleeping(marked(env.env_id), 2718)
                await provisioner.reset(env)
                assert marked(env.env_id) == []
                with anyio.fail_after(10):
                    assert await process.wait() != 0
            assert (await handle.run(["ls", "-A", env.workdir])).stdout == ""
            assert (await handle.run(["sh", "-c", 'test -e "$HOME/.history"'])).returncode == 1
            assert await provisioner.health_check(env)


async def test_an_exec_past_its_deadline_leaves_no_process_behind(provisioner: Provisioner) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            result = await provisioner.exec(env, ["sh", "-c", "sleep 300 & sleep 300"], timeout_s=0.5)
            assert result.returncode == 124 and "deadline" in result.stderr
            assert await gone(env.env_id, 5.0), cmdlines(marked(env.env_id))


async def test_the_calculator_mcp_server_answers_from_inside_the_env_and_leaves_nothing_behind(
    backend: str, provisioner: Provisioner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # the registry names the server's venv relative to the project root
    calculator = load_server_registry(CALCULATOR_REGISTRY).launch("calculator")
    with anyio.fail_after(60):
        async with environment(provisioner, EnvConfig(servers=(calculator,))) as env:
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                await gateway.open(env, [calculator])
                (server,) = [p for p in marked(env.env_id) if "mcp_server_calculator" in p.cmdline()[1:3]]
                namespaces = ("pid", "net", "mnt")
                own = [
                    os.readlink(f"/proc/{server.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
                    for ns in namespaces
                ]
                assert all(own) if backend in ISOLATED else not any(own)
                result = await gateway.call(
                    env.env_id, "calculator__calculate", {"expression": "17*25-38"}, 10
                )
                assert (result.is_error, result.text) == (False, "387")
            assert await gone(env.env_id)
        assert marked(env.env_id) == [] and await provisioner.list_owned(env.run_id) == []


async def test_a_tool_past_its_deadline_is_killed_inside_the_env_and_the_server_restarts(
    provisioner: Provisioner,
) -> None:
    edge = edge_server()
    with anyio.fail_after(60):
        async with environment(provisioner, EnvConfig(servers=(edge,))) as env:
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                await gateway.open(env, [edge])
                first = edge_processes(env.env_id)
                assert len(first) == 1
                hung = await gateway.call(env.env_id, "edge__hang", {}, 1.0)
                assert (hung.is_error, hung.error_kind) == (True, "timeout")
                echoed = await gateway.call(env.env_id, "edge__echo", {"text": "still here"}, 10)
                assert echoed.text == "still here"  # a fresh server process answers
                now = edge_processes(env.env_id)  # the hung one is gone, not only abandoned
                assert len(now) == 1 and now[0].pid != first[0].pid


async def test_server_secrets_reach_the_env_but_not_the_command_line_nor_host_variables(
    provisioner: Provisioner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPRL_TEST_HOST_ONLY", "host secret")
    dump = "import json, os; print(json.dumps(dict(os.environ)), flush=True)"
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            launch = provisioner.stdio_launch(
                env, ServerLaunch(name="s", command="true", env={"API_KEY": "s3cr3t"})
            )
            assert "s3cr3t" not in " ".join([launch.command, *launch.args]) and "s3cr3t" not in repr(launch)
            async with background(provisioner, env, dump, {"API_KEY": "s3cr3t"}) as (_, line):
                seen = json.loads(line)
    assert seen["API_KEY"] == "s3cr3t" and seen[ENV_MARKER] == env.env_id
    assert "MCPRL_TEST_HOST_ONLY" not in seen


async def test_list_owned_finds_the_runs_environments_and_destroy_is_idempotent(
    provisioner: Provisioner,
) -> None:
    run_a, run_b = run_id(), run_id()
    with anyio.fail_after(30):
        env = await provisioner.create(EnvConfig(), run_a)
        try:
            assert [e.env_id for e in await provisioner.list_owned(run_a)] == [env.env_id]
            assert await provisioner.list_owned(run_b) == []
        finally:
            await provisioner.destroy(env)
        await provisioner.destroy(env)
        assert await provisioner.list_owned(run_a) == []
        assert not await provisioner.health_check(env)


async def test_a_reused_env_holds_nothing_of_the_previous_trajectory(provisioner: Provisioner) -> None:
    pool = EnvPool(provisioner, run_id(), max_live=1)
    task = TaskSpec(instance_id="t", instruction="x")
    try:
        with anyio.fail_after(60):
            first = await pool.acquire(EnvConfig(), task)
            handle = EnvHandle(first, provisioner)
            await handle.write_file("answer.txt", "trajectory 1 was here")
            await handle.run(["sh", "-c", 'mkdir -p "$HOME/.cache" && echo 1 > "$HOME/.cache/state"'])
            await pool.release(first, task)
            second = await pool.acquire(EnvConfig(), task)
            assert second.env_id == first.env_id  # the same environment, reset
            handle = EnvHandle(second, provisioner)
            assert (await handle.run(["ls", "-A", second.workdir])).stdout == ""
            assert (await handle.run(["sh", "-c", 'test -e "$HOME/.cache/state"'])).returncode == 1
            await pool.release(second, task)
            assert pool.stats()["reused"] == 1 and pool.stats()["created"] == 1
    finally:
        await pool.shutdown()


@prepare("backends.seed")
async def seed_database(env: EnvHandle, task: TaskSpec, *, rows: list[str]) -> None:
    await env.write_file("db/rows.txt", "\n".join(rows) + "\n")
    await env.run(["sh", "-c", "wc -l < db/rows.txt > db/count.txt"])


@cleanup("backends.audit")
async def audit(env: EnvHandle, task: TaskSpec, *, log: list[str]) -> None:
    log.append((await env.read_file("db/count.txt")).strip())


async def test_prepare_and_cleanup_hooks_act_inside_the_env(provisioner: Provisioner) -> None:
    seen: list[str] = []
    task = TaskSpec(
        instance_id="hooked",
        instruction="x",
        prepares=(PrepareSpec(prepare_func="backends.seed", prepare_args={"rows": ["a", "b", "c"]}),),
        cleanups=(CleanupSpec(cleanup_func="backends.audit", cleanup_args={"log": seen}),),
    )
    pool = EnvPool(provisioner, run_id(), max_live=1, hook_modules=("tests.test_backends",))
    try:
        with anyio.fail_after(60):
            env = await pool.acquire(EnvConfig(), task)
            assert await EnvHandle(env, provisioner).read_file("db/rows.txt") == "a\nb\nc\n"
            await pool.release(env, task)
        assert seen == ["3"] and pool.stats()["hook_failures"] == 0
    finally:
        await pool.shutdown()


async def test_a_killed_server_or_env_fails_that_trajectory_only_and_its_env_is_not_reused(
    provisioner: Provisioner,
) -> None:
    edge = edge_server()
    task = TaskSpec(instance_id="t", instruction="x")
    pool = EnvPool(provisioner, run_id(), max_live=3)
    try:
        with anyio.fail_after(90):
            envs = [await pool.acquire(EnvConfig(servers=(edge,)), task) for _ in range(3)]
            victim_server, victim_env, survivor = envs
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                for env in envs:
                    await gateway.open(env, [edge])
                for proc in marked(victim_server.env_id):  # the server dies from outside
                    proc.kill()
                await provisioner.destroy(victim_env)  # the whole environment disappears
                for env in (victim_server, victim_env):
                    result = await gateway.call(env.env_id, "edge__echo", {"text": "hi"}, 10)
                    assert (result.is_error, result.error_kind) == (True, "server_died"), result.text
                    assert await gateway.is_broken(env.env_id)
                ok = await gateway.call(survivor.env_id, "edge__echo", {"text": "hi"}, 10)
                assert (ok.is_error, ok.text) == (False, "hi") and not await gateway.is_broken(
                    survivor.env_id
                )
            for env in envs:
                await pool.release(env, task, broken=env is not survivor)
            stats = pool.stats()
            assert (stats["broken"], stats["destroyed"], stats["idle"]) == (2, 2, 1)
            assert [e.env_id for e in await provisioner.list_owned(pool.run_id)] == [survivor.env_id]
    finally:
        await pool.shutdown()


async def test_a_keep_alive_server_outlives_the_reset_of_its_reused_env_and_dies_with_the_env(
    backend: str, provisioner: Provisioner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server reuse: the reset spares a ``keep_alive`` server (not on docker, which restarts its
    container) and the gateway takes its parked session over; the files and every other process
    go; the pool's destroy ends the server, and the gateway drops its parked session."""
    monkeypatch.setattr(mcp_gateway, "PARKED_CHECK_S", 0.2)
    edge = msgspec.structs.replace(edge_server(), keep_alive=True)
    config, task = EnvConfig(servers=(edge,)), TaskSpec(instance_id="t", instruction="x")
    pool = EnvPool(provisioner, run_id(), max_live=1)
    try:
        with anyio.fail_after(90):
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                env = await pool.acquire(config, task)
                await gateway.open(env, [edge])
                first = [p.pid for p in edge_processes(env.env_id)]
                await EnvHandle(env, provisioner).write_file("answer.txt", "episode 1")
                async with background(provisioner, env, sleeper(3141)):
                    await gateway.close(env.env_id, keep_servers=True)
                    await pool.release(env, task)
                    assert not sleeping(marked(env.env_id), 3141)  # the episode's other processes went
                again = await pool.acquire(config, task)
                assert again.env_id == env.env_id
                await gateway.open(again, [edge])
                echoed = await gateway.call(env.env_id, "edge__echo", {"text": "episode 2"}, 10)
                assert (echoed.is_error, echoed.text) == (False, "episode 2")
                assert (await EnvHandle(again, provisioner).run(["ls", "-A", again.workdir])).stdout == ""
                kept = gateway.stats()["servers_kept"]
                if backend == "docker":
                    assert kept == 0  # a reset restarts the container: nothing was parked
                else:
                    assert kept == 1 and [p.pid for p in edge_processes(env.env_id)] == first
                await gateway.close(env.env_id, keep_servers=True)
                assert gateway.stats()["parked"] == (backend != "docker")
                await pool.shutdown()  # destroys the environment under the parked session
                assert await gone(env.env_id)
                assert await until(lambda: gateway.stats()["parked"] == 0, 10)
    finally:
        await pool.shutdown()


# -- isolated backends ---------------------------------------------------------------------------


@asynccontextmanager
async def two_edge_envs(
    provisioner: Provisioner, **limits: int
) -> AsyncIterator[tuple[McpGateway, EnvInfo, EnvInfo]]:
    """A gateway with the edge server open in two environments under the same ``limits``."""
    edge = edge_server()
    limited = EnvConfig(servers=(edge,), **limits)
    async with environment(provisioner, limited) as env, environment(provisioner, limited) as other:
        async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
            await gateway.open(env, [edge])
            await gateway.open(other, [edge])
            yield gateway, env, other


@pytest.mark.usefixtures("isolated")
async def test_a_memory_hog_in_a_tool_ends_its_environment_only_and_the_observation_says_why(
    provisioner: Provisioner,
) -> None:
    with anyio.fail_after(120):
        async with two_edge_envs(provisioner, memory_mb=256) as (gateway, env, other):
            assert (await gateway.call(env.env_id, "edge__hog", {"mb": 32}, 30)).text == "held 32 MB"
            hog = await gateway.call(env.env_id, "edge__hog", {"mb": 1024}, 60)
            assert hog.error_kind == "server_died", hog.text
            assert "The environment hit its memory limit" in hog.text, hog.text
            assert await gateway.is_broken(env.env_id)
            assert (await provisioner.limits_hit(env))["memory"] >= 1
            # the other environment, under the same limit, is untouched
            assert (await gateway.call(other.env_id, "edge__hog", {"mb": 32}, 30)).text == "held 32 MB"
            assert (await provisioner.limits_hit(other))["memory"] == 0
            assert not await gateway.is_broken(other.env_id)


@pytest.mark.usefixtures("isolated")
async def test_a_fork_bomb_in_a_tool_stops_at_its_environments_process_limit(
    provisioner: Provisioner,
) -> None:
    with anyio.fail_after(120):
        async with two_edge_envs(provisioner, pids=64) as (gateway, env, other):
            bomb = await gateway.call(env.env_id, "edge__spawn", {"n": 500}, 60)
            started = int(bomb.text.split()[1])
            assert 0 < started < 64 and "Resource temporarily unavailable" in bomb.text, bomb.text
            # the other environment still starts processes of its own
            assert (
                await gateway.call(other.env_id, "edge__spawn", {"n": 8}, 30)
            ).text == "started 8 processes"
            if provisioner.name == "bwrap":  # docker reads its counters by an exec: refused at the limit
                assert (await provisioner.limits_hit(env))["pids"] >= 1
        assert not marked(env.env_id)  # the bomb's processes died with their environment


@pytest.mark.usefixtures("isolated")
async def test_two_environments_see_neither_each_others_files_nor_processes(provisioner: Provisioner) -> None:
    # A hang guard, not a timing claim: ~20 s alone with docker, over 60 s beside a learning bench.
    with anyio.fail_after(180):
        async with environment(provisioner) as a, environment(provisioner) as b:
            handle_a, handle_b = EnvHandle(a, provisioner), EnvHandle(b, provisioner)
            secret = f"only in {a.env_id}"  # unique: no library file bound into b holds it
            await handle_a.write_file("secret-of-a.txt", secret)
            assert await handle_a.read_file("secret-of-a.txt") == secret
            assert (await handle_b.run(["test", "-e", "secret-of-a.txt"])).returncode == 1
            # Nowhere in b's file system by name (metadata only: reading every file of the host's
            # read-only /usr took over a minute on a busy CI machine), nor by content where
            # anything is writable.
            prune = "-path /proc -prune -o -path /sys -prune -o"
            found = await handle_b.run(["sh", "-c", f"find / {prune} -name secret-of-a.txt -print"])
            assert found.stdout.strip() == "", found.stdout
            writable = f'grep -rs \'{secret}\' /tmp /workspace "$HOME" "$PWD"'
            assert (await handle_b.run(["sh", "-c", writable])).returncode != 0
            list_procs = ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]
            async with background(provisioner, a, sleeper(3141)):
                assert sleeping(marked(a.env_id), 3141)  # it runs, seen from the host
                seen_from_b = await handle_b.run(list_procs)
                assert seen_from_b.returncode == 0 and "cat /proc" in seen_from_b.stdout
                assert "3141" not in seen_from_b.stdout


@pytest.mark.usefixtures("isolated")
async def test_an_env_has_no_route_out_and_cannot_reach_the_hosts_loopback(provisioner: Provisioner) -> None:
    """Checked without sending a packet anywhere but the host's own loopback: the env has only a
    loopback interface and an empty routing table, and a listener on the host's 127.0.0.1 is
    not reachable (the env's 127.0.0.1 is its own)."""
    probe = (
        "import errno, json, os, socket, sys\n"
        "def attempt(port):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=5).close()\n"
        "        return 'connected'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e))\n"
        "routes = open('/proc/net/route').read().splitlines()[1:]\n"
        "links = sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:])\n"
        "print(json.dumps([links, routes, attempt(int(sys.argv[1]))]))\n"
    )
    with anyio.fail_after(30):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(SocketAttribute.local_port)
            async with await anyio.connect_tcp("127.0.0.1", port):
                pass  # the listener is reachable from the host
            async with environment(provisioner) as env:
                result = await provisioner.exec(env, [sys.executable, "-c", probe, str(port)])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [["lo"], [], "ECONNREFUSED"]


@pytest.mark.usefixtures("isolated")
async def test_system_files_are_read_only_inside_the_env(provisioner: Provisioner) -> None:
    with anyio.fail_after(30):
        async with environment(provisioner) as env:
            handle = EnvHandle(env, provisioner)
            with pytest.raises(OSError, match="notes"):
                await handle.write_file("/usr/notes.txt", "read-only system files")
            assert (await handle.run(["sh", "-c", "echo x > /etc/passwd"])).returncode != 0


# -- a driver that dies ----------------------------------------------------------------------------


def leftover_containers(run: str) -> int:
    """Containers labelled with the run, counted straight from the engine (0 if there is none)."""
    if docker_engine() is not None:
        return 0
    import docker

    client = docker.from_env(timeout=10)
    try:
        return len(client.containers.list(all=True, filters={"label": f"io.mcprl.run={run}"}))
    finally:
        client.close()


def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if any(text in arg for arg in proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@asynccontextmanager
async def leaky_driver(
    provisioner: Provisioner, run: str, tmp_path: Path, *args: str
) -> AsyncIterator[anyio.abc.Process]:
    """``tests/leaky_driver.py BACKEND ROOT RUN WATCHDOG [ray]`` (``args``: WATCHDOG on) in a session
    of its own, once ready. On the way out it is killed if it still runs, and what it left of the
    run is destroyed. A driver that exits before ready fails the test with its stderr."""
    log = tmp_path / "driver.log"
    command = [sys.executable, "tests/leaky_driver.py", provisioner.name, str(tmp_path / "envs"), run, *args]
    with log.open("wb") as err:
        process = await anyio.open_process(
            command, cwd=REPO, stdin=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    try:
        assert process.stdout is not None
        out = b""
        with anyio.fail_after(120):
            try:
                while b"ready" not in out:
                    out += await process.stdout.receive()
            except anyio.EndOfStream:
                await process.wait()
                said = await anyio.Path(log).read_text()
                pytest.fail(f"the driver exited {process.returncode} before ready:\n{said[-4000:]}")
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()
            for env in await provisioner.list_owned(run):
                await provisioner.destroy(env)


async def none_owned(provisioner: Provisioner, run: str, within_s: float) -> bool:
    async def none() -> bool:
        return not await provisioner.list_owned(run)

    return await until(none, within_s)


@pytest.mark.parametrize("watchdog", [False, True], ids=["next-runs-reaper", "watchdog"])
async def test_a_killed_driver_leaves_no_sandbox_process_and_no_container(
    provisioner: Provisioner, tmp_path: Path, watchdog: bool
) -> None:
    run = run_id()
    async with leaky_driver(provisioner, run, tmp_path, str(int(watchdog))) as driver:
        envs = await provisioner.list_owned(run)
        assert len(envs) == 2 and all(edge_processes(env.env_id) for env in envs)
        driver.kill()  # SIGKILL: no finally, no atexit, no shutdown runs in the driver
        await driver.wait()
        if watchdog:  # the watchdog notices on its own and cleans up (another process's work)
            await none_owned(provisioner, run, 30)
        else:  # the next run's pool reaps at start-up
            next_run = EnvPool(provisioner, run_id(), max_live=1)
            assert await next_run.reap_leftovers() >= 2
        assert await provisioner.list_owned(run) == []
        assert leftover_containers(run) == 0
        for env in envs:
            assert await gone(env.env_id), cmdlines(marked(env.env_id))
        # the watchdog exits after its work
        assert await until(lambda: not processes_mentioning(run), 10), processes_mentioning(run)


@pytest.mark.slow
async def test_a_ray_driver_stopped_by_ctrl_c_leaves_no_sandbox(tmp_path: Path) -> None:
    """The pool as the trainer runs it, a Ray actor with a watchdog, on the isolated backend whose
    leftovers cost most (mounts, cgroups, directories). Ctrl-C in the driver ends Ray, and Ray
    kills its workers' child processes: the watchdog is not one of them, and cleans up."""
    run = run_id()
    provisioner = make_backend("bwrap", tmp_path / "envs")
    async with leaky_driver(provisioner, run, tmp_path, "1", "ray") as driver:
        envs = await provisioner.list_owned(run)
        assert len(envs) == 2
        driver.send_signal(signal.SIGINT)
        await driver.wait()
        assert await none_owned(provisioner, run, 60), await provisioner.list_owned(run)
        for env in envs:
            assert await gone(env.env_id), cmdlines(marked(env.env_id))
        assert not any((tmp_path / "envs").iterdir())
        assert await until(lambda: not processes_mentioning(run), 10), processes_mentioning(run)
