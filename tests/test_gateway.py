"""McpGateway against real MCP servers over stdio: the third-party calculator, and our edge server.

The calculator is started exactly as an episode starts it: through the domain's server registry
(its own virtual environment under ``.cache/servers``) inside a local-provisioner environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil
import pytest

from actors.errors import GatewayError, InfraError
from actors.mcp_gateway import McpGateway
from actors.provisioners.local import LocalProvisioner
from policies.types import ToolSpec
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from specs.servers import load_server_registry

REPO = Path(__file__).resolve().parent.parent
CALCULATOR_REGISTRY = REPO / "specs" / "domains" / "calculator" / "servers.json"
EDGE = ServerLaunch(
    name="edge", command=sys.executable, args=(str(REPO / "tests" / "servers" / "edge_server.py"),)
)


@pytest.fixture
def calculator(monkeypatch: pytest.MonkeyPatch) -> ServerLaunch:
    monkeypatch.chdir(REPO)  # the registry names the server's venv relative to the project root
    return load_server_registry(CALCULATOR_REGISTRY).launch("calculator")


@asynccontextmanager
async def opened(
    tmp_path: Path,
    *servers: ServerLaunch,
    allowed: dict[str, tuple[str, ...] | None] | None = None,
    **kwargs: Any,
) -> AsyncIterator[tuple[McpGateway, EnvInfo, list[ToolSpec]]]:
    """A gateway with one local environment opened on ``servers``; everything torn down after."""
    provisioner = LocalProvisioner(tmp_path / "envs")
    env = await provisioner.create(EnvConfig(servers=servers), "test-run")
    try:
        async with McpGateway.running(**kwargs) as gateway:
            tools = await gateway.open(env, list(servers), allowed)
            yield gateway, env, tools
    finally:
        await provisioner.destroy(env)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.anyio
async def test_calculator_tools_are_listed_under_the_server_namespace(
    tmp_path: Path, calculator: ServerLaunch
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, calculator) as (_, _, tools):
            assert [t.name for t in tools] == ["calculator__calculate"]
            (tool,) = tools
            assert (tool.server, tool.tool) == ("calculator", "calculate")
            assert tool.description and tool.parameters["required"] == ["expression"]


@pytest.mark.anyio
async def test_calculator_computes_an_expression(tmp_path: Path, calculator: ServerLaunch) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, calculator) as (gateway, env, _):
            result = await gateway.call(env.env_id, "calculator__calculate", {"expression": "17*25-38"}, 10)
    assert (result.text, result.is_error, result.error_kind) == ("387", False, None)
    assert 0 < result.latency_s < 10


@pytest.mark.anyio
async def test_a_bad_expression_is_an_error_observation_and_the_session_goes_on(
    tmp_path: Path, calculator: ServerLaunch
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, calculator) as (gateway, env, _):
            bad = await gateway.call(env.env_id, "calculator__calculate", {"expression": "2+*"}, 10)
            good = await gateway.call(env.env_id, "calculator__calculate", {"expression": "2+2"}, 10)
            assert not await gateway.is_broken(env.env_id)
    assert bad.is_error and bad.error_kind == "tool_error" and "syntax" in bad.text
    assert good.text == "4"


@pytest.mark.anyio
async def test_an_unknown_tool_is_an_error_observation_naming_the_real_tools(
    tmp_path: Path, calculator: ServerLaunch
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, calculator) as (gateway, env, _):
            result = await gateway.call(env.env_id, "calculator__sqrt", {"x": 2}, 10)
    assert result.is_error and result.error_kind == "unknown_tool"
    assert "calculator__sqrt" in result.text and "calculator__calculate" in result.text


@pytest.mark.anyio
async def test_arguments_that_break_the_tool_schema_are_bad_arguments(
    tmp_path: Path, calculator: ServerLaunch
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, calculator) as (gateway, env, _):
            missing = await gateway.call(env.env_id, "calculator__calculate", {}, 10)
            wrong_type = await gateway.call(env.env_id, "calculator__calculate", {"expression": 5}, 10)
    assert missing.error_kind == "bad_arguments" and "'expression' is a required property" in missing.text
    assert wrong_type.error_kind == "bad_arguments" and "expression" in wrong_type.text


@pytest.mark.anyio
async def test_a_tool_that_raises_is_a_tool_error_and_the_server_stays_usable(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE) as (gateway, env, _):
            raised = await gateway.call(env.env_id, "edge__boom", {"message": "kaput"}, 10)
            echoed = await gateway.call(env.env_id, "edge__echo", {"text": "still here"}, 10)
            assert not await gateway.is_broken(env.env_id)
    assert raised.is_error and raised.error_kind == "tool_error" and "boom" in raised.text
    assert echoed.text == "still here" and not echoed.is_error


@pytest.mark.anyio
async def test_every_result_names_its_server_tool_and_read_only_hint_whatever_the_outcome(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE) as (gateway, env, _):
            results = {
                "ok": await gateway.call(env.env_id, "edge__echo", {"text": "hi"}, 10),
                "bad_arguments": await gateway.call(env.env_id, "edge__echo", {}, 10),
                "tool_error": await gateway.call(env.env_id, "edge__boom", {"message": "kaput"}, 10),
                "timeout": await gateway.call(env.env_id, "edge__stall", {}, 0.5),
                "server_died": await gateway.call(env.env_id, "edge__crash", {}, 10),
                "server_died later": await gateway.call(env.env_id, "edge__echo", {"text": "hi"}, 10),
            }
            unknown = await gateway.call(env.env_id, "edge__nope", {}, 10)
            route_off = await gateway.call(env.env_id, "route", {"query": "echo"}, 10)
    facts = {outcome: (r.error_kind, r.server, r.tool, r.read_only) for outcome, r in results.items()}
    assert facts == {
        "ok": (None, "edge", "echo", True),
        "bad_arguments": ("bad_arguments", "edge", "echo", True),
        "tool_error": ("tool_error", "edge", "boom", None),
        "timeout": ("timeout", "edge", "stall", None),
        "server_died": ("server_died", "edge", "crash", None),
        "server_died later": ("server_died", "edge", "echo", True),
    }
    assert all(r.route_hits is None and r.cuts == () for r in results.values())
    for nowhere in (unknown, route_off):  # no pinned tool of that name: it reached no server
        assert nowhere.error_kind == "unknown_tool"
        assert (nowhere.server, nowhere.tool, nowhere.read_only, nowhere.route_hits) == (
            None,
            None,
            None,
            None,
        )


@pytest.mark.anyio
async def test_allowed_tools_restrict_what_the_model_sees_and_can_call(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE, allowed={"edge": ("echo", "pid")}) as (gateway, env, tools):
            hidden = await gateway.call(env.env_id, "edge__crash", {}, 10)
            assert sorted(t.name for t in tools) == ["edge__echo", "edge__pid"]
            assert next(t for t in tools if t.tool == "echo").read_only is True
    assert hidden.error_kind == "unknown_tool"


@pytest.mark.anyio
async def test_allowing_a_tool_the_server_lacks_is_a_gateway_error(tmp_path: Path) -> None:
    with anyio.fail_after(60), pytest.raises(GatewayError, match="no tool.*'teleport'"):
        async with opened(tmp_path, EDGE, allowed={"edge": ("echo", "teleport")}):
            pass


@pytest.mark.anyio
async def test_a_deadline_cancels_then_kills_a_server_that_no_longer_answers(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE) as (gateway, env, _):
            old_pid = int((await gateway.call(env.env_id, "edge__pid", {}, 10)).text)
            started = time.perf_counter()
            result = await gateway.call(env.env_id, "edge__hang", {}, 1.0)
            assert time.perf_counter() - started >= 1.0  # not before its deadline
            assert result.is_error and result.error_kind == "timeout" and "was stopped" in result.text
            assert await gateway.is_broken(env.env_id)
            # The next call starts a fresh server, and only once the hung one is gone.
            new_pid = int((await gateway.call(env.env_id, "edge__pid", {}, 20)).text)
            assert new_pid != old_pid and not alive(old_pid) and alive(new_pid)
        assert not alive(new_pid)


@pytest.mark.anyio
async def test_a_deadline_only_cancels_a_server_that_still_answers(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE) as (gateway, env, _):
            pid = (await gateway.call(env.env_id, "edge__pid", {}, 10)).text
            result = await gateway.call(env.env_id, "edge__stall", {}, 0.5)
            assert (result.error_kind, "still running" in result.text) == ("timeout", True)
            assert await gateway.is_broken(env.env_id)  # a half-done call: never reuse the env
            assert (await gateway.call(env.env_id, "edge__pid", {}, 10)).text == pid  # same process
            assert (await gateway.call(env.env_id, "edge__cancelled", {}, 10)).text == "1"  # it was told


@pytest.mark.anyio
async def test_an_episode_budget_cuts_deadlines_and_then_refuses_calls(tmp_path: Path) -> None:
    provisioner = LocalProvisioner(tmp_path / "envs")
    env = await provisioner.create(EnvConfig(servers=(EDGE,)), "test-run")
    try:
        with anyio.fail_after(60):
            async with McpGateway.running() as gateway:
                await gateway.open(env, [EDGE], budget_s=0.8)
                result = await gateway.call(env.env_id, "edge__stall", {}, 30)
                assert result.error_kind == "timeout" and "0.8s deadline" in result.text
                spent = await gateway.call(env.env_id, "edge__echo", {"text": "x"}, 30)
                assert spent.error_kind == "budget_exhausted" and "budget" in spent.text
                assert (spent.server, spent.tool, spent.read_only) == ("edge", "echo", True)
    finally:
        await provisioner.destroy(env)


@pytest.mark.anyio
async def test_a_crashing_server_is_server_died_and_marks_the_env_broken(
    tmp_path: Path, calculator: ServerLaunch
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE, calculator) as (gateway, env, _):
            crashed = await gateway.call(env.env_id, "edge__crash", {}, 10)
            after = await gateway.call(env.env_id, "edge__echo", {"text": "anyone?"}, 10)
            other_server = await gateway.call(env.env_id, "calculator__calculate", {"expression": "6*7"}, 10)
            assert await gateway.is_broken(env.env_id)
            await gateway.close(env.env_id)
            assert await gateway.is_broken(env.env_id)  # still known after close, for the pool's release
    assert crashed.is_error and crashed.error_kind == "server_died"
    assert after.error_kind == "server_died"
    assert other_server.text == "42"


@pytest.mark.anyio
async def test_two_envs_have_independent_sessions_and_a_hung_one_blocks_nothing(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path / "a", EDGE) as (gateway, env_a, _):
            provisioner = LocalProvisioner(tmp_path / "b")
            env_b = await provisioner.create(EnvConfig(servers=(EDGE,)), "test-run")
            await gateway.open(env_b, [EDGE])
            where_a = json.loads((await gateway.call(env_a.env_id, "edge__whereami", {}, 10)).text)
            where_b = json.loads((await gateway.call(env_b.env_id, "edge__whereami", {}, 10)).text)
            assert (where_a["cwd"], where_b["cwd"]) == (env_a.workdir, env_b.workdir)
            hung: list[Any] = []

            async def hang_a() -> None:
                hung.append(await gateway.call(env_a.env_id, "edge__hang", {}, 3.0))

            async with anyio.create_task_group() as tg:
                tg.start_soon(hang_a)
                await anyio.wait_all_tasks_blocked()
                quick = await gateway.call(env_b.env_id, "edge__echo", {"text": "b"}, 10)
                assert quick.text == "b" and quick.latency_s < 1.0 and hung == []
            assert hung[0].error_kind == "timeout"
            assert await gateway.is_broken(env_a.env_id) and not await gateway.is_broken(env_b.env_id)
            assert (await gateway.call(env_b.env_id, "edge__echo", {"text": "b2"}, 10)).text == "b2"
            await gateway.close(env_b.env_id)
            await provisioner.destroy(env_b)


@pytest.mark.anyio
async def test_servers_run_in_the_env_workdir_with_home_and_tmpdir_inside_it(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE) as (gateway, env, _):
            where = json.loads((await gateway.call(env.env_id, "edge__whereami", {}, 10)).text)
            await gateway.call(env.env_id, "edge__write_file", {"name": "out.txt", "text": "hi"}, 10)
            assert await anyio.Path(env.workdir, "out.txt").read_text() == "hi"
    env_dir = Path(env.data["env_dir"])
    assert where == {"cwd": env.workdir, "home": str(env_dir / "home"), "tmpdir": str(env_dir / "tmp")}


@pytest.mark.anyio
async def test_non_text_content_is_a_placeholder_and_long_output_is_capped(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE, max_output_chars=1000) as (gateway, env, _):
            picture = await gateway.call(env.env_id, "edge__picture", {}, 10)
            big = await gateway.call(env.env_id, "edge__big", {"n": 5000}, 10)
    assert picture.text.startswith("[image content, image/png") and picture.text.endswith(
        "a transparent pixel"
    )
    assert big.text.startswith("x" * 1000) and "4000 more characters cut" in big.text and len(big.text) < 1100
    assert [(c.part, c.original_bytes, c.kept_bytes) for c in big.cuts] == [("text", 5000, 1000)]


@pytest.mark.anyio
async def test_a_server_that_cannot_start_is_an_infra_error_with_its_stderr(tmp_path: Path) -> None:
    failing = ServerLaunch(name="edge", command=EDGE.command, args=(*EDGE.args, "--fail-start"))
    with (
        anyio.fail_after(60),
        pytest.raises(InfraError, match="(?s)'edge'.*failed to start.*refusing to start"),
    ):
        async with opened(tmp_path, failing):
            pass


@pytest.mark.anyio
async def test_closing_an_env_terminates_its_server_processes(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, EDGE) as (gateway, env, _):
            pid = int((await gateway.call(env.env_id, "edge__pid", {}, 10)).text)
            await gateway.close(env.env_id)
            assert not alive(pid)
            with pytest.raises(GatewayError, match="not open"):
                await gateway.call(env.env_id, "edge__pid", {}, 10)


KEPT_EDGE = msgspec.structs.replace(EDGE, keep_alive=True)


async def edge_pid(gateway: McpGateway, env: EnvInfo) -> int:
    return int((await gateway.call(env.env_id, "edge__pid", {}, 10)).text)


@pytest.mark.anyio
async def test_a_parked_keep_alive_session_serves_the_envs_next_episode_and_only_that(
    tmp_path: Path,
) -> None:
    """``close(keep_servers=True)`` parks only ``keep_alive`` servers of an env that is not broken;
    the next open takes a parked session over only for the same launch."""
    other = msgspec.structs.replace(EDGE, name="other")
    with anyio.fail_after(60):
        async with opened(tmp_path, KEPT_EDGE, other) as (gateway, env, _):
            kept = await edge_pid(gateway, env)
            plain = int((await gateway.call(env.env_id, "other__pid", {}, 10)).text)
            await gateway.close(env.env_id, keep_servers=True)
            assert alive(kept) and not alive(plain)  # only the keep_alive server is parked
            await gateway.open(env, [KEPT_EDGE])
            assert await edge_pid(gateway, env) == kept
            assert gateway.stats() == {"servers_started": 2, "servers_kept": 1, "parked": 0}
            await gateway.close(env.env_id, keep_servers=True)
            changed = msgspec.structs.replace(KEPT_EDGE, env={"EDGE_FLAVOUR": "new"})
            await gateway.open(env, [changed])  # another launch: a fresh server, the old one ended
            fresh = await edge_pid(gateway, env)
            assert fresh != kept and not alive(kept)
            await gateway.close(env.env_id)  # no keep_servers: the process ends
            assert not alive(fresh) and gateway.stats()["parked"] == 0


@pytest.mark.anyio
async def test_a_broken_env_parks_nothing_and_a_dead_parked_server_is_started_again(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with opened(tmp_path, KEPT_EDGE) as (gateway, env, _):
            first = await edge_pid(gateway, env)
            await gateway.close(env.env_id, keep_servers=True)
            psutil.Process(first).kill()  # the parked server dies (the env was reset by a backend
            await gateway.open(env, [KEPT_EDGE])  # that does not spare it, or it crashed)
            second = await edge_pid(gateway, env)
            assert second != first and gateway.stats()["servers_kept"] == 0
            crashed = await gateway.call(env.env_id, "edge__crash", {}, 10)
            assert crashed.error_kind == "server_died" and await gateway.is_broken(env.env_id)
            await gateway.close(env.env_id, keep_servers=True)
            assert gateway.stats()["parked"] == 0
            await gateway.open(env, [KEPT_EDGE])
            third = await edge_pid(gateway, env)
            await gateway.close(env.env_id, keep_servers=True)
        assert not alive(third)  # leaving the gateway ends the parked sessions too


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "launch/probe.py", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_probe_prints_the_calculator_tools_and_a_call_result() -> None:
    done = run_probe(
        "--servers", str(CALCULATOR_REGISTRY), "--server", "calculator",
        "--call", "calculate", "--args", '{"expression": "17*25-38"}',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [t["name"] for t in report["tools"]] == ["calculator__calculate"]
    assert "expression" in report["tools"][0]["input_schema"]["properties"]
    assert report["call"]["result"] == {**report["call"]["result"], "text": "387", "is_error": False}


def test_probe_exits_nonzero_with_the_reason_when_the_server_cannot_start(tmp_path: Path) -> None:
    registry = tmp_path / "servers.json"
    registry.write_text(
        json.dumps({"edge": {"stdio": {"command": sys.executable, "args": [*EDGE.args, "--fail-start"]}}})
    )
    done = run_probe("--servers", str(registry), "--server", "edge")
    assert done.returncode == 1 and done.stdout == ""
    assert "failed to start" in done.stderr and "refusing to start" in done.stderr


def test_probe_prints_an_8_mb_result_in_under_1_mb_with_the_cut_marked(tmp_path: Path) -> None:
    registry = tmp_path / "servers.json"
    registry.write_text(json.dumps({"edge": {"stdio": {"command": sys.executable, "args": list(EDGE.args)}}}))
    done = run_probe(
        "--servers", str(registry), "--server", "edge", "--call", "big", "--args", '{"n": 8000000}'
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.encode()) < 1_000_000
    result = json.loads(done.stdout)["call"]["result"]
    assert "7980000 more characters cut: output limit 20000" in result["text"]
    assert result["structured"] is None and result["output_bytes"] > 8_000_000
    assert [(c["part"], c["original_bytes"]) for c in result["cuts"]] == [
        ("text", 8_000_000),
        ("structured", 8_000_013),
    ]


@pytest.mark.slow
def test_pool_and_gateway_serve_an_episode_as_ray_actors(tmp_path: Path) -> None:
    import ray

    from actors.env_pool import remote_env_pool
    from actors.mcp_gateway_actor import remote_mcp_gateway
    from specs.task import TaskSpec

    task = TaskSpec(instance_id="ray-1", instruction="echo")
    ray.init(num_cpus=1, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        pool = remote_env_pool(LocalProvisioner(tmp_path / "envs"), "ray-run", 2)
        gateway = remote_mcp_gateway()
        other = ServerLaunch(name="other", command=EDGE.command, args=EDGE.args)
        env = ray.get(pool.acquire.remote(EnvConfig(servers=(EDGE, other)), task), timeout=60)
        allowed = {"edge": ("echo", "hang"), "other": ("echo",)}
        tools = ray.get(gateway.open.remote(env, [EDGE, other], allowed), timeout=60)
        assert sorted(t.name for t in tools) == ["edge__echo", "edge__hang", "other__echo"]
        # A hung server blocks only itself: both calls are in flight on the actor's one event loop.
        hung = gateway.call.remote(env.env_id, "edge__hang", {}, 2.0)
        quick = ray.get(gateway.call.remote(env.env_id, "other__echo", {"text": "hi"}, 10), timeout=30)
        assert quick.text == "hi" and quick.latency_s < 1.0
        assert ray.get(hung, timeout=30).error_kind == "timeout"
        assert ray.get(gateway.is_broken.remote(env.env_id), timeout=30)
        ray.get(gateway.close.remote(env.env_id), timeout=60)
        ray.get(pool.release.remote(env, task, broken=True), timeout=60)
        assert ray.get(pool.stats.remote(), timeout=30)["live"] == 0
        ray.get([gateway.shutdown.remote(), pool.shutdown.remote()], timeout=60)
    finally:
        ray.shutdown()
    assert not Path(env.workdir).exists()
