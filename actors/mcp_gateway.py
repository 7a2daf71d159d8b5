"""McpGateway: one set of MCP sessions per environment, every tool failure turned into an observation.

``open(env, servers, allowed_tools)`` reaches each server of the environment: a stdio server is
started *inside* the environment (the command comes from ``provisioner.stdio_launch``), an
MCP-Universe ``sse`` entry is started and reached on its port (local backend only: a sandbox's
ports are its own), an ``http_url`` server is reached over streamable HTTP with its headers. It
lists their tools (annotations kept), namespaces them ``<server>__<tool>``, keeps the ones the
task allows and pins that list for the episode. With ``route=True`` the agent also gets the
built-in ``route`` tool (BM25 search over the inventory, ``actors/tool_router.py``); with
``top_k`` it is shown only the ``top_k`` tools retrieved for ``query`` (plus ``route``), and may
still call any pinned tool it finds. ``budget_s`` caps the tool time of the whole episode.
``call(env_id, name, arguments, timeout_s)`` never raises for tool-level problems: an unknown tool,
arguments that fail the tool's input schema, an ``isError`` result, a JSON-RPC error, a crashed
server and a deadline all come back as a ``ToolResult`` with ``is_error`` and ``error_kind`` set and
a message the model can read. ``close(env_id)`` ends the sessions and their processes.

Failure semantics (see the failure model in ARCHITECTURE.md):

- deadline: the request is abandoned, which sends MCP's ``notifications/cancelled``; if the server
  then answers a ping within ``cancel_grace_s`` it keeps running (its state intact). If it does not
  (work stuck in native code or a blocked event loop), its session is closed, which terminates its
  process tree (the SDK closes stdin, then SIGTERM/SIGKILL to the process group), and the next call
  to that server starts a fresh process, with that server's in-memory state lost. Either way the
  environment is marked broken (never reused: a half-done side effect may remain).
- server died (connection closed, or it stops answering pings after an unexpected error): the
  environment is marked broken and every further call to that server returns ``server_died``; the
  rollout ends the trajectory as failed-by-infrastructure.

Session lifetime: the SDK's ``stdio_client``/``ClientSession`` must be entered and exited in one
task, so each server runs in its own long-lived task in the gateway's task group (``running()``);
it enters both contexts, signals readiness and waits for its stop event. Calls come from other
tasks through the session object. A hung server blocks only the calls to it.

Observations: text parts as text; images as a placeholder, or kept in ``ToolResult.images`` for a
multimodal model (``keep_images``); ``structuredContent`` kept in ``ToolResult.structured``; every
value filled from a ``{{VAR}}`` template redacted (also from logged stderr); the chat template's
control tokens and the tool protocol's tags escaped, so tool output can neither close a turn nor
open a role; capped at ``max_output_chars`` with a marker.

Works with the ``mcp`` SDK 1.x and 2.x: results and tools are read in their wire (JSON) form
(``actors/mcp_wire.py``).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any

import anyio
import anyio.abc
import msgspec
from mcp import ClientSession, types

from actors.errors import GatewayError, InfraError
from actors.mcp_endpoint import serve_endpoint
from actors.mcp_transports import connect
from actors.mcp_wire import (
    CONNECTION_CLOSED,
    DEFAULT_CONTROL_TOKENS,
    INVALID_PARAMS,
    argument_problem,
    argument_validator,
    cap_text,
    content_text,
    describe,
    error_code,
    escape_controls,
    redact,
    tool_spec,
)
from actors.provisioners.base import Provisioner, make_provisioner
from specs.env import EnvInfo, ServerLaunch
from actors.tool_router import ROUTE_TOOL, ToolRouter, route_observation, visible_tools
from policies.types import ToolResult, ToolSpec
from specs.servers import free_port

logger = logging.getLogger(__name__)

_PING_S = 2.0  # an alive server answers a ping in milliseconds
_STDERR_TAIL = 1500


class _Server:
    """One MCP server of one environment; its session lives in ``McpGateway._serve``."""

    def __init__(self, env_id: str, launch: ServerLaunch) -> None:
        self.env_id, self.name, self.launch = env_id, launch.name, launch
        self.session: ClientSession | None = None
        self.tools: list[dict[str, Any]] = []
        self.ready, self.stop, self.done = anyio.Event(), anyio.Event(), anyio.Event()
        self.failure: BaseException | None = None
        self.status = "starting"  # starting | up | killed (by a deadline) | dead | closed
        self.stderr: IO[bytes] = tempfile.TemporaryFile()

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
        how = (
            f"url {self.launch.url!r}"
            if self.launch.transport == "http"
            else f"command {self.launch.command!r}"
        )
        where = f"MCP server {self.name!r} ({how}) of env {self.env_id}"
        text = f"{where} failed to start: {cause}" + (f"\n--- its stderr (tail) ---\n{tail}" if tail else "")
        return redact(text, self.launch.secrets)


class _Env:
    def __init__(self, info: EnvInfo, provisioner: Provisioner) -> None:
        self.info, self.provisioner = info, provisioner
        self.servers: dict[str, _Server] = {}
        self.tools: dict[str, ToolSpec] = {}
        self.validators: dict[str, Any] = {}
        self.broken: str | None = None
        self.restart_lock = anyio.Lock()
        self.secrets: tuple[str, ...] = ()
        self.budget_left_s: float | None = None
        self.router: ToolRouter | None = None
        self.endpoint: anyio.CancelScope | None = None


class McpGateway:
    """Per-environment MCP sessions. Create inside ``async with McpGateway.running() as gw``."""

    def __init__(
        self,
        *,
        provisioner_for: Callable[[str], Provisioner] = make_provisioner,
        start_timeout_s: float = 60.0,
        stop_timeout_s: float = 15.0,
        max_output_chars: int = 20_000,
        cancel_grace_s: float = 1.0,
        control_tokens: Sequence[str] = (),
        keep_images: bool = False,
    ) -> None:
        """``control_tokens``: the model's special tokens, escaped in every observation on top of
        ``DEFAULT_CONTROL_TOKENS``; ``keep_images``: pass images through for a multimodal model."""
        self._provisioner_for = provisioner_for
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.max_output_chars, self.cancel_grace_s = max_output_chars, cancel_grace_s
        self.controls = tuple(dict.fromkeys([*DEFAULT_CONTROL_TOKENS, *control_tokens]))
        self.keep_images = keep_images
        self._envs: dict[str, _Env] = {}
        self._closed_broken: set[str] = set()
        self._tg: anyio.abc.TaskGroup | None = None

    @classmethod
    @asynccontextmanager
    async def running(cls, **kwargs: Any) -> AsyncIterator[McpGateway]:
        """A gateway whose session tasks live in this context; leaving it closes every session."""
        gateway = cls(**kwargs)
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            gateway._tg = tg
            try:
                yield gateway
            except Exception as e:  # re-raised below as itself, not wrapped in an ExceptionGroup
                error = e
            finally:
                with anyio.CancelScope(shield=True):
                    await gateway.close_all()
                gateway._tg = None
                tg.cancel_scope.cancel()
        if error is not None:
            raise error

    async def open(
        self,
        env: EnvInfo,
        servers: Sequence[ServerLaunch],
        allowed_tools: dict[str, tuple[str, ...] | None] | None = None,
        *,
        budget_s: float | None = None,
        route: bool = False,
        top_k: int | None = None,
        query: str = "",
    ) -> list[ToolSpec]:
        """Reach the servers of ``env``; the tools the model is shown, pinned for the episode.

        ``budget_s``: total tool time of the episode (each call's deadline is cut to what is left);
        ``route``: add the built-in ``route`` tool; ``top_k``: show only the ``top_k`` tools
        retrieved for ``query`` (plus ``route``). Raises ``InfraError`` if a server does not come
        up, ``GatewayError`` on misuse or when an allowed tool does not exist on its server."""
        if self._tg is None:
            raise GatewayError("McpGateway.open called outside `async with McpGateway.running()`")
        if env.env_id in self._envs:
            raise GatewayError(f"env {env.env_id} is already open in the gateway; close it first")
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise GatewayError(f"env {env.env_id}: duplicate server names in {names}")
        sse = [s.name for s in servers if s.transport == "sse"]
        if sse and env.backend != "local":
            raise GatewayError(
                f"env {env.env_id}: server(s) {sse} have only an 'sse' entry, whose port is reachable "
                f"only on the local backend, not {env.backend!r}; give them a 'stdio' entry"
            )
        state = _Env(env, self._provisioner_for(env.backend))
        state.secrets = tuple(sorted({v for s in servers for v in s.secrets}, key=lambda v: (-len(v), v)))
        state.budget_left_s = budget_s
        self._envs[env.env_id] = state
        try:
            for server in servers:
                launch = server if server.transport == "http" else state.provisioner.stdio_launch(env, server)
                self._start(
                    state,
                    msgspec.structs.replace(
                        launch, transport=server.transport, url=server.url, secrets=server.secrets
                    ),
                )
            # A backstop only: each _serve task bounds its own start with start_timeout_s.
            with anyio.fail_after(self.start_timeout_s + self.stop_timeout_s):
                for srv in state.servers.values():
                    await srv.ready.wait()
            failed = [srv.describe_failure() for srv in state.servers.values() if srv.status != "up"]
            if failed:
                raise InfraError("\n".join(failed))
            _pin_tools(state, allowed_tools or {})
        except BaseException:
            state.broken = state.broken or "failed to open"
            with anyio.CancelScope(shield=True):
                await self.close(env.env_id)
            raise
        inventory = list(state.tools.values())
        if not (route or top_k):
            return inventory
        state.router = ToolRouter(inventory)
        if top_k:
            return visible_tools(state.router, query, top_k, always=("route",))
        return [ROUTE_TOOL, *inventory]

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        """Call a namespaced tool; every tool-level failure is returned, never raised."""
        state = self._env(env_id)
        started = time.perf_counter()
        spec = state.tools.get(name)

        def result(text: str, kind: str | None = None, **extra: Any) -> ToolResult:
            text = cap_text(
                escape_controls(redact(text, state.secrets), self.controls), self.max_output_chars
            )
            latency = time.perf_counter() - started
            if state.budget_left_s is not None and kind != "budget_exhausted":
                state.budget_left_s -= latency
            logger.debug(
                "env %s call %s ok=%s kind=%s read_only=%s %.1f ms %d bytes",
                env_id,
                name,
                kind is None,
                kind,
                spec.read_only if spec else None,
                latency * 1e3,
                extra.get("output_bytes", 0),
            )
            return ToolResult(
                text=text,
                is_error=kind is not None,
                error_kind=kind,
                latency_s=latency,
                server=spec.server if spec else None,
                read_only=spec.read_only if spec else None,
                **extra,
            )

        if name == ROUTE_TOOL.name and state.router is not None:  # the gateway's own, read-only tool
            spec = ROUTE_TOOL
            return result(route_observation(state.router, arguments))

        if spec is None:
            return result(
                f"Unknown tool {name!r}. Available tools: {', '.join(state.tools) or '(none)'}.",
                "unknown_tool",
            )
        if not isinstance(arguments, dict):
            return result(
                f"Arguments of {name} must be a JSON object, got {type(arguments).__name__}.", "bad_arguments"
            )
        problem = argument_problem(state.validators.get(name), arguments)
        if problem:
            return result(f"Invalid arguments for {name}: {problem}", "bad_arguments")
        if state.budget_left_s is not None:
            if state.budget_left_s <= 0:
                return result(
                    f"Tool {name} was not run: the episode's tool time budget is spent.", "budget_exhausted"
                )
            timeout_s = min(timeout_s, state.budget_left_s)
        srv = state.servers[spec.server]
        with anyio.move_on_after(timeout_s) as deadline:
            srv = await self._usable(state, srv)
            if srv.status == "dead" or srv.session is None:
                return result(
                    f"MCP server {srv.name!r} is not running (it died earlier); {name} cannot run.",
                    "server_died",
                )
            try:
                raw = await srv.session.call_tool(spec.tool, arguments)
            except Exception as e:  # the boundary: every failure becomes an observation
                return result(*await self._classify_failure(state, srv, name, e))
        if deadline.cancelled_caught:
            return result(await self._after_deadline(state, srv, name, timeout_s), "timeout")
        wire = raw.model_dump(by_alias=True, mode="json", exclude_none=True)
        text, images = content_text(wire, keep_images=self.keep_images)
        extra: dict[str, Any] = {"output_bytes": len(json.dumps(wire.get("content") or []).encode())}
        if (structured := wire.get("structuredContent")) is not None:
            if state.secrets:  # redact through the JSON text: secrets may sit in any nested string
                structured = json.loads(redact(json.dumps(structured, ensure_ascii=False), state.secrets))
            extra["structured"] = structured
        if images:
            extra["images"] = images
        if wire.get("isError"):
            return result(text or f"Tool {name} reported an error without a message.", "tool_error", **extra)
        return result(text, **extra)

    def tools(self, env_id: str) -> list[ToolSpec]:
        """Every tool the environment's episode may call (``route`` first when it is on)."""
        state = self._env(env_id)
        return ([ROUTE_TOOL] if state.router is not None else []) + list(state.tools.values())

    async def serve(self, env_id: str, port: int | None = None, call_timeout_s: float = 60.0) -> str:
        """Serve the environment's tools as one MCP server (streamable HTTP on 127.0.0.1, DNS-rebinding
        protection on) until the environment is closed; its URL. See ``actors/mcp_endpoint.py``."""
        state = self._env(env_id)
        if state.endpoint is not None:
            raise GatewayError(f"env {env_id} is already served")
        assert self._tg is not None
        scope = state.endpoint = anyio.CancelScope()

        async def run(*, task_status: Any) -> None:
            with scope:
                await serve_endpoint(
                    self, env_id, port or free_port(), call_timeout_s, task_status=task_status
                )

        url: str = await self._tg.start(run, name=f"mcp-endpoint:{env_id}")
        return url

    async def server_tools(self, env_id: str) -> dict[str, list[dict[str, Any]]]:
        """Each server's full tool listing in MCP wire form (annotations included), before filtering."""
        return {name: list(srv.tools) for name, srv in self._env(env_id).servers.items()}

    async def is_broken(self, env_id: str) -> bool:
        """Whether the environment must not be reused (a server died, timed out or never started)."""
        state = self._envs.get(env_id)
        return state.broken is not None if state else env_id in self._closed_broken

    async def close(self, env_id: str) -> None:
        """Close the environment's sessions and wait (bounded) until their processes are gone."""
        state = self._envs.pop(env_id, None)
        if state is None:
            return
        if state.broken:
            self._closed_broken.add(env_id)
        if state.endpoint is not None:
            state.endpoint.cancel()
        for srv in state.servers.values():
            srv.stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.stop_timeout_s) as scope:
            for srv in state.servers.values():
                await srv.done.wait()
        if scope.cancelled_caught:
            logger.warning("env %s: MCP servers still stopping after %ss", env_id, self.stop_timeout_s)
        for srv in state.servers.values():
            srv.stderr.close()

    async def close_all(self) -> None:
        for env_id in list(self._envs):
            await self.close(env_id)

    def _env(self, env_id: str) -> _Env:
        state = self._envs.get(env_id)
        if state is None:
            raise GatewayError(
                f"env {env_id} is not open in the gateway (open it first; open: {list(self._envs)})"
            )
        return state

    def _start(self, state: _Env, launch: ServerLaunch) -> _Server:
        srv = _Server(state.info.env_id, launch)
        state.servers[srv.name] = srv
        assert self._tg is not None
        self._tg.start_soon(self._serve, srv, name=f"mcp:{state.info.env_id}:{srv.name}")
        return srv

    async def _serve(self, srv: _Server) -> None:
        """The task that owns one server's transport and session, from start to stop."""
        try:
            async with (
                connect(srv.launch, srv.stderr, self.start_timeout_s) as (read, write),
                ClientSession(read, write) as session,
            ):
                with anyio.fail_after(self.start_timeout_s):
                    await session.initialize()
                    srv.tools = await _list_tools(session)
                srv.session, srv.status = session, "up"
                srv.ready.set()
                await srv.stop.wait()
        except Exception as e:
            srv.failure = e
            if srv.status == "up":
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

    async def _usable(self, state: _Env, srv: _Server) -> _Server:
        """The server to send to: a server stopped by a deadline is replaced by a fresh process."""
        if srv.status != "killed":
            return srv
        async with state.restart_lock:
            current = state.servers[srv.name]
            if current.status == "killed":
                await current.done.wait()  # the old process is gone before the new one starts
                current.stderr.close()
                current = self._start(state, current.launch)
                await current.ready.wait()
                if current.status != "up":
                    logger.warning("%s", current.describe_failure())
                    current.status = "dead"
            return current

    def _kill(self, state: _Env, srv: _Server, why: str) -> None:
        state.broken = state.broken or why
        if srv.status in ("starting", "up"):
            srv.status = "killed"
        srv.stop.set()

    async def _after_deadline(self, state: _Env, srv: _Server, name: str, timeout_s: float) -> str:
        """The call was abandoned (the SDK sent ``notifications/cancelled``): keep a server that
        still answers, stop one that does not. The environment is broken either way."""
        state.broken = state.broken or f"{name} exceeded its {timeout_s:g}s deadline"
        limit = f"Tool {name} did not finish within its {timeout_s:g}s deadline"
        if srv.status == "up" and await _answers_ping(srv, self.cancel_grace_s):
            return f"{limit}: the call was cancelled (server {srv.name!r} is still running)."
        self._kill(state, srv, state.broken)
        return (
            f"{limit}: the call was cancelled and server {srv.name!r} was stopped (it restarts on the "
            "next call, with its state lost)."
        )

    async def _classify_failure(self, state: _Env, srv: _Server, name: str, e: Exception) -> tuple[str, str]:
        code = error_code(e)
        if srv.status == "killed":
            return (
                f"Tool {name} was cancelled: server {srv.name!r} was stopped after another call's deadline.",
                "timeout",
            )
        if code not in (None, CONNECTION_CLOSED):  # a JSON-RPC error reply: the server is alive
            kind = "bad_arguments" if code == INVALID_PARAMS else "tool_error"
            return f"Tool {name} failed: MCP error {code}: {describe(e)}", kind
        if code is None and await _answers_ping(srv, _PING_S):
            return f"Tool {name} failed: {describe(e)}", "tool_error"
        state.broken = state.broken or f"server {srv.name} died during {name}"
        srv.status = "dead"
        srv.stop.set()
        logger.warning(
            "MCP server %r of env %s died during %s; stderr tail:\n%s",
            srv.name,
            srv.env_id,
            name,
            srv.stderr_tail(),
        )
        return f"MCP server {srv.name!r} died while running {name} ({describe(e)}).", "server_died"


def _pin_tools(state: _Env, allowed: dict[str, tuple[str, ...] | None]) -> None:
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


async def _list_tools(session: ClientSession) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
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


async def _answers_ping(srv: _Server, within_s: float) -> bool:
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
