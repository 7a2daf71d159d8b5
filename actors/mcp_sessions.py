"""The gateway's per-environment state: each MCP server's process and session.

``ServerState`` is one server of one environment; its session lives in the task ``serve_session``
(the SDK's ``ClientSession`` must be entered and exited in one task), which enters the transport
and the session, lists the tools, signals ``ready`` and waits for ``stop``. ``EnvState`` is one
open environment: its servers, its pinned tools and their argument validators, its episode budget
and router, and why it is broken (``None``: reusable). What a failure means: ``actors/mcp_calls.py``.

Session lifetime: the SDK's ``stdio_client``/``ClientSession`` must be entered and exited in one
task, so each server runs in its own long-lived task in the gateway's task group (``running()``);
it enters both contexts, signals readiness and waits for its stop event. Calls come from other
tasks through the session object. A hung server blocks only the calls to it.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from typing import IO, Any, Literal

import anyio
from jsonschema.protocols import Validator
from mcp import ClientSession, types

from actors.errors import GatewayError
from actors.mcp_transports import connect
from actors.mcp_wire import argument_validator, describe, redact, tool_spec
from actors.provisioners.base import Provisioner
from actors.tool_router import ToolRouter
from policies.types import ToolSpec
from specs.env import EnvInfo, ServerLaunch

logger = logging.getLogger(__name__)

_STDERR_TAIL = 1500

ServerStatus = Literal["starting", "up", "killed", "dead", "closed"]
"""``killed``: stopped by a deadline (restarted on the next call); ``dead``: it died by itself."""
WireTool = dict[str, Any]
"""A ``tools/list`` entry in its wire (JSON) form, annotations included."""


class ServerState:
    """One MCP server of one environment; its session lives in ``serve_session``."""

    def __init__(self, env_id: str, launch: ServerLaunch) -> None:
        self.env_id, self.name, self.launch = env_id, launch.name, launch
        self.session: ClientSession | None = None
        self.tools: list[WireTool] = []
        self.ready, self.stop, self.done = anyio.Event(), anyio.Event(), anyio.Event()
        self.failure: BaseException | None = None
        self.status: ServerStatus = "starting"
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        self.parked = False
        """Kept between the episodes of a reused environment (``keep_alive``), in no episode now."""

    def stderr_tail(self) -> str:
        try:
            self.stderr.seek(0, 2)
            self.stderr.seek(max(0, self.stderr.tell() - _STDERR_TAIL))
            return redact(self.stderr.read().decode(errors="replace").strip(), self.launch.secrets)
        except (OSError, ValueError):
            return ""

    def describe_failure(self) -> str:
        cause = describe(self.failure) if self.failure else "exited before it was ready"
        tail = self.stderr_tail()
        how = ", ".join(
            f"{what} {value!r}"
            for what, value in (("command", self.launch.command), ("url", self.launch.url))
            if value
        )
        where = f"MCP server {self.name!r} ({how}) of env {self.env_id}"
        text = f"{where} failed to start: {cause}" + (f"\n--- its stderr (tail) ---\n{tail}" if tail else "")
        return redact(text, self.launch.secrets)


class EnvState:
    """One environment open in the gateway."""

    def __init__(self, info: EnvInfo, provisioner: Provisioner) -> None:
        self.info, self.provisioner = info, provisioner
        self.servers: dict[str, ServerState] = {}
        self.tools: dict[str, ToolSpec] = {}
        self.validators: dict[str, Validator | None] = {}
        self.broken: str | None = None
        self.restart_lock = anyio.Lock()
        self.secrets: tuple[str, ...] = ()
        self.budget_left_s: float | None = None
        self.images_kept = 0
        self.router: ToolRouter | None = None
        self.endpoint: anyio.CancelScope | None = None


def check_servers(env: EnvInfo, servers: Sequence[ServerLaunch]) -> None:
    """Refuse (``GatewayError``) duplicate server names."""
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise GatewayError(f"env {env.env_id}: duplicate server names in {names}")


async def serve_session(srv: ServerState, start_timeout_s: float) -> None:
    """The task that owns one server's transport and session, from start to stop."""
    try:
        async with (
            connect(srv.launch, srv.stderr, start_timeout_s) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(start_timeout_s):
                await session.initialize()
                srv.tools = await list_tools(session)
            srv.session, srv.status = session, "up"
            srv.ready.set()
            await srv.stop.wait()
    except Exception as e:
        srv.failure = e
        if srv.status == "up" and not srv.parked:  # a parked one ends with its destroyed env
            logger.warning(
                "MCP server %r of env %s ended: %s",
                srv.name,
                srv.env_id,
                redact(describe(e), srv.launch.secrets),
            )
    finally:
        srv.session = None
        if srv.status in ("starting", "up"):
            srv.status = "closed" if srv.stop.is_set() else "dead"
        srv.ready.set()
        srv.done.set()


async def list_tools(session: ClientSession) -> list[WireTool]:
    """Every page of the server's ``tools/list``, in wire form."""
    tools: list[WireTool] = []
    cursor: str | None = None
    for _ in range(1000):  # a server that pages forever is a bug; stop rather than hang
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = (await session.list_tools(params=params)).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        tools.extend(page.get("tools", []))
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return tools


def pin_tools(state: EnvState, allowed: dict[str, tuple[str, ...] | None]) -> None:
    """Fill ``state.tools`` (namespaced) and their validators with the tools the task allows."""
    for srv in state.servers.values():
        by_name = {t["name"]: t for t in srv.tools}
        wanted = allowed.get(srv.name)
        if wanted is not None:
            missing = sorted(set(wanted) - set(by_name))
            if missing:
                raise GatewayError(
                    f"env {state.info.env_id}: server {srv.name!r} has no tool(s) {missing} that the task "
                    f"allows; its tools: {sorted(by_name)}"
                )
            by_name = {n: t for n, t in by_name.items() if n in wanted}
        for tool in by_name.values():
            spec = tool_spec(srv.name, tool)
            state.tools[spec.name] = spec
            state.validators[spec.name] = argument_validator(spec)


async def answers_ping(srv: ServerState, within_s: float) -> bool:
    session = srv.session
    if session is None:
        return False
    with anyio.move_on_after(within_s):
        try:
            await session.send_ping()
            return True
        except Exception:
            return False
    return False
