"""Third-party MCP servers from PyPI, unchanged, through the gateway on every backend.

``mcp-server-time``, ``mcp-server-git``, ``mcp-server-sqlite`` and ``mcp-server-fetch`` each run
from their own venv (``tests/servers/thirdparty/server_envs.json``, built by ``make servers``)
and are started exactly as an episode starts them: from the MCP-Universe-shaped registry
``tests/servers/thirdparty/servers.json``, inside an environment of the backend under test. Per
(backend, server): the tools are listed with the MCP annotations the server sets (``TOOLS``), each
row of ``CALLS`` is called in order through one session and checked, and once the gateway closes
the environment no process of it is left on the host.

There is no network here (and none inside bwrap or docker environments at all), so fetch is only
checked to answer a fetch of an unresolvable host with an error observation, in time.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.mcp_gateway import McpGateway
from actors.provisioners.base import Provisioner
from policies.types import ToolResult
from specs.env import EnvConfig, EnvHandle, EnvInfo
from specs.servers import load_server_registry
from tests.backends import BACKENDS, REPO, cmdlines, gone, make_backend, marked, run_id, unavailable

pytestmark = pytest.mark.anyio
THIRDPARTY = REPO / "tests" / "servers" / "thirdparty"
SERVERS = ("time", "git", "sqlite", "fetch")
WORKDIR = "{workdir}"
"""Placeholder in ``CALLS`` arguments for the environment's working directory."""
CALL_TIMEOUT_S = 20.0
TEST_TIMEOUT_S = 120.0


# -- what each server lists: tool name -> its MCP annotations ({}: the server sets none) ---------


def hints(read_only: bool, destructive: bool, idempotent: bool, open_world: bool) -> dict[str, bool]:
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": open_world,
    }


READS = hints(read_only=True, destructive=False, idempotent=True, open_world=False)
TOOLS: dict[str, dict[str, dict[str, bool]]] = {
    "time": {"get_current_time": READS, "convert_time": READS},
    "git": {
        "git_status": READS,
        "git_diff_unstaged": READS,
        "git_diff_staged": READS,
        "git_diff": READS,
        "git_commit": hints(read_only=False, destructive=False, idempotent=False, open_world=False),
        "git_add": hints(read_only=False, destructive=False, idempotent=True, open_world=False),
        "git_reset": hints(read_only=False, destructive=True, idempotent=True, open_world=False),
        "git_log": READS,
        "git_create_branch": hints(read_only=False, destructive=False, idempotent=False, open_world=False),
        "git_checkout": hints(read_only=False, destructive=False, idempotent=False, open_world=False),
        "git_show": READS,
        "git_branch": READS,
    },
    "sqlite": {
        name: {}
        for name in (
            "read_query",
            "write_query",
            "create_table",
            "list_tables",
            "describe_table",
            "append_insight",
        )
    },
    "fetch": {"fetch": hints(read_only=True, destructive=False, idempotent=True, open_world=True)},
}


# -- what each call must answer -----------------------------------------------------------------

Check = Callable[[ToolResult], None]


def contains(*parts: str) -> Check:
    def check(result: ToolResult) -> None:
        assert not result.is_error, result.text
        missing = [p for p in parts if p not in result.text]
        assert not missing, f"{missing} not in {result.text!r}"

    return check


def fails(kind: str, *parts: str) -> Check:
    def check(result: ToolResult) -> None:
        assert (result.is_error, result.error_kind) == (True, kind), result
        assert all(p in result.text for p in parts), result.text

    return check


def current_utc_time(result: ToolResult) -> None:
    assert not result.is_error, result.text
    answer = json.loads(result.text)
    when = datetime.fromisoformat(answer["datetime"])
    assert answer["timezone"] == "Etc/UTC" and when.utcoffset() == timedelta(0)
    assert abs(when - datetime.now(UTC)) < timedelta(minutes=5), when


def kolkata_noon_in_tokyo(result: ToolResult) -> None:
    assert not result.is_error, result.text
    answer = json.loads(result.text)
    source, target = (datetime.fromisoformat(answer[k]["datetime"]) for k in ("source", "target"))
    assert source.utcoffset() == timedelta(hours=5, minutes=30) and source.strftime("%H:%M") == "12:00"
    assert target.utcoffset() == timedelta(hours=9) and target.strftime("%H:%M") == "15:30"
    assert source == target and answer["time_difference"] == "+3.5h"


@dataclass(frozen=True)
class Call:
    server: str
    tool: str
    arguments: dict[str, Any]
    check: Check


KOLKATA_NOON_TO_TOKYO = {"source_timezone": "Asia/Kolkata", "time": "12:00", "target_timezone": "Asia/Tokyo"}
FROM_MARS = {"source_timezone": "Mars/Olympus_Mons", "time": "12:00", "target_timezone": "Etc/UTC"}
ITEMS = "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"
INSERT = "INSERT INTO items (name) VALUES ('apple'), ('pear')"
SELECT = "SELECT name FROM items ORDER BY id"
CALLS = (
    Call("time", "get_current_time", {"timezone": "Etc/UTC"}, current_utc_time),
    Call("time", "convert_time", KOLKATA_NOON_TO_TOKYO, kolkata_noon_in_tokyo),
    Call("time", "convert_time", FROM_MARS, fails("tool_error", "Mars/Olympus_Mons")),
    # the repo is made by `prepare_git` below: one commit, one untracked file
    Call("git", "git_status", {"repo_path": WORKDIR}, contains("On branch main", "notes.txt")),
    Call("git", "git_log", {"repo_path": WORKDIR}, contains("first commit", "Test Author")),
    Call("git", "git_add", {"repo_path": WORKDIR, "files": ["notes.txt"]}, contains("staged")),
    Call("git", "git_diff_staged", {"repo_path": WORKDIR}, contains("+remember the milk")),
    Call("git", "git_status", {"repo_path": "/nonexistent/repo"}, fails("tool_error")),
    # the database file is test.db in the env's workdir (servers.json); `check_sqlite` reads it
    Call("sqlite", "create_table", {"query": ITEMS}, contains("created")),
    Call("sqlite", "write_query", {"query": INSERT}, contains("'affected_rows': 2")),
    Call("sqlite", "read_query", {"query": SELECT}, contains("[{'name': 'apple'}, {'name': 'pear'}]")),
    Call("sqlite", "list_tables", {}, contains("items")),
    # a quirk of this server: an SQL error comes back as a normal result (isError unset), so the
    # gateway, like any MCP client, sees a success; only the text says otherwise
    Call("sqlite", "read_query", {"query": "SELECT * FROM nowhere"}, contains("Database error: no such")),
    # `.invalid` never resolves (RFC 2606), network or not: a fast error, not a hang or a crash
    Call("fetch", "fetch", {"url": "http://example.invalid/"}, fails("tool_error", "example.invalid")),
)


def filled(value: Any, env: EnvInfo) -> Any:
    if isinstance(value, str):
        return value.replace(WORKDIR, env.workdir)
    if isinstance(value, list):
        return [filled(v, env) for v in value]
    if isinstance(value, dict):
        return {k: filled(v, env) for k, v in value.items()}
    return value


# -- per-server setup before the session, and checks of the environment after it --------------


async def prepare_git(handle: EnvHandle) -> None:
    """A repo in the env's workdir, made with the host's git inside the environment."""
    if shutil.which("git") is None:
        unavailable("mcp-server-git needs the `git` binary (Debian: apt-get install git)")
    author = ["-c", "user.name=Test Author", "-c", "user.email=author@example.com"]
    await handle.write_file("README.md", "hello\n")
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "README.md"]):
        done = await handle.run(argv, timeout_s=30)
        assert done.returncode == 0, done.stderr
    done = await handle.run(["git", *author, "commit", "-q", "-m", "first commit"], timeout_s=30)
    assert done.returncode == 0, done.stderr
    await handle.write_file("notes.txt", "remember the milk\n")


async def check_sqlite(handle: EnvHandle) -> None:
    """The rows the server wrote are in ``test.db`` in the env's workdir, read without the server."""
    code = "import sqlite3; print(sqlite3.connect('test.db').execute('select name from items').fetchall())"
    done = await handle.run([sys.executable, "-c", code], timeout_s=30)
    assert (done.returncode, done.stdout.strip()) == (0, "[('apple',), ('pear',)]"), done.stderr


async def nothing(handle: EnvHandle) -> None:
    return None


PREPARE = {"git": prepare_git}
AFTER = {"sqlite": check_sqlite}


# -- the test -----------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def provisioner(request: pytest.FixtureRequest, tmp_path: Path) -> Provisioner:
    return make_backend(str(request.param), tmp_path / "envs")


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(REPO)  # the registry names each server's venv relative to the project root
    name = str(request.param)
    if not Path(REPO, ".cache", "servers", name, ".requirements.json").exists():
        unavailable(f"the {name} server's venv is missing: run `make servers`")
    return name


async def test_a_thirdparty_server_lists_its_tools_answers_calls_and_leaves_nothing(
    provisioner: Provisioner, server: str
) -> None:
    launch = load_server_registry(THIRDPARTY / "servers.json").launch(server)
    with anyio.fail_after(TEST_TIMEOUT_S):
        env = await provisioner.create(EnvConfig(servers=(launch,)), run_id())
        try:
            handle = EnvHandle(env, provisioner)
            await PREPARE.get(server, nothing)(handle)
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                specs = await gateway.open(env, [launch])
                assert marked(env.env_id), "the server's processes are seen from the host"
                (listed,) = (await gateway.server_tools(env.env_id)).values()
                assert {t["name"]: t.get("annotations", {}) for t in listed} == TOOLS[server]
                assert {s.name: s.read_only for s in specs} == {
                    f"{server}__{name}": annotations.get("readOnlyHint")
                    for name, annotations in TOOLS[server].items()
                }
                for call in (c for c in CALLS if c.server == server):
                    name, arguments = f"{server}__{call.tool}", filled(call.arguments, env)
                    result = await gateway.call(env.env_id, name, arguments, CALL_TIMEOUT_S)
                    try:
                        call.check(result)
                    except AssertionError as e:
                        raise AssertionError(f"{name}({arguments}) on {env.backend}: {e}") from None
                assert not await gateway.is_broken(env.env_id)  # tool errors break nothing
                await gateway.close(env.env_id)
                assert await gone(env.env_id), cmdlines(marked(env.env_id))
            await AFTER.get(server, nothing)(handle)
        finally:
            with anyio.CancelScope(shield=True):
                await provisioner.destroy(env)
    assert marked(env.env_id) == [] and await provisioner.list_owned(env.run_id) == []
