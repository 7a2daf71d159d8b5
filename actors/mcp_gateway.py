"""McpGateway: one set of MCP sessions per environment, every tool failure turned into an observation.

``open(env, servers, allowed_tools)`` reaches each server of the environment: a stdio server is
started *inside* the environment (the command comes from ``provisioner.stdio_launch``); a
listener (a ``streamable_http`` entry, or MCP-Universe's ``sse``) is started there the same way,
on the address ``provisioner.listen_address`` gives, and reached over HTTP or SSE (local: a port
of this host's loopback; docker: the container's own network, without egress; bwrap: refused, a
sandbox's network is its own); an ``http_url`` server is reached over streamable HTTP with its
headers. It
lists their tools (annotations kept), namespaces them ``<server>__<tool>``, keeps the ones the
task allows and pins that list for the episode. With ``route=True`` the agent also gets the
built-in ``route`` tool (BM25 search over the inventory, ``actors/tool_router.py``); with
``top_k`` it is shown only the ``top_k`` tools retrieved for ``query`` (plus ``route``), and may
still call any pinned tool it finds. ``budget_s`` caps the tool time of the whole episode.
``call(env_id, name, arguments, timeout_s)`` never raises for tool-level problems: an unknown tool,
arguments that fail the tool's input schema, an ``isError`` result, a JSON-RPC error, a crashed
server and a deadline all come back as a ``ToolResult`` with ``is_error`` and ``error_kind`` set and
a message the model can read. ``close(env_id)`` ends the sessions and their processes.

Server reuse: ``close(env_id, keep_servers=True)`` (the pipeline's, for an environment that is not
broken) parks the sessions of the ``keep_alive`` stdio servers instead (``ServerLaunch.keep_alive``:
the domain declares them free of per-episode state; the reset spares their processes). The next
``open`` of the same environment (the pool handed it out again) takes a parked session over when
its launch is the same and it answers a ping, and starts the others; only on a backend whose
reset spares those processes (``Provisioner.keeps_servers``: local and bwrap, not docker). A
parked session is pinged every ``PARKED_CHECK_S`` and dropped once its process is gone (the pool
destroyed the environment), so nothing parked outlives its environment for long.

Failure semantics (deadlines, dead servers, restarts): ``actors/mcp_calls.py``; session lifetime:
``actors/mcp_sessions.py``.

Observations: text (secrets redacted, control tokens escaped, so tool output can neither close a
turn nor open a role), ``structuredContent`` and images (``keep_images``), each bounded by a gateway
option (``max_output_chars``, ``max_structured_bytes``, ``max_image_bytes``, ``max_images``) before
it leaves the gateway (its actor), every cut recorded in ``ToolResult.cuts``: ``actors/mcp_results.py``.

Facts: every ``ToolResult`` (success or any error) carries the ``server``, the ``tool``'s own name
and its ``read_only`` hint when the called name is a pinned tool (``None`` otherwise), and, for the
``route`` tool, ``route_hits``: the tools its observation lists, best first.

Module map: this class (open, call, serve, close); per-server processes and sessions in
``actors/mcp_sessions.py``; one call and its failure classification in ``actors/mcp_calls.py``;
result conversion and caps in ``actors/mcp_results.py``; wire helpers in ``actors/mcp_wire.py``;
transports in ``actors/mcp_transports.py``; the per-env MCP endpoint in ``actors/mcp_endpoint.py``.

Works with the ``mcp`` SDK 1.x and 2.x: results and tools are read in their wire (JSON) form
(``actors/mcp_wire.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypedDict, Unpack

import anyio
import anyio.abc
import msgspec

from actors.errors import EnvError, GatewayError, InfraError
from actors.mcp_calls import run_call
from actors.mcp_endpoint import serve_endpoint
from actors.mcp_results import Parts, ResultCaps, bound_text, route_parts, tool_result
from actors.mcp_sessions import (
    EnvState,
    ServerState,
    WireTool,
    answers_ping,
    check_servers,
    pin_tools,
    serve_session,
)
from actors.mcp_wire import DEFAULT_CONTROL_TOKENS
from actors.provisioners.base import Provisioner, make_provisioner
from actors.provisioners.local import free_port
from actors.tool_router import ROUTE_TOOL, ToolRouter, route_answer, visible_tools
from policies.types import ToolResult, ToolSpec
from specs.env import EnvInfo, ServerLaunch

logger = logging.getLogger(__name__)


class GatewayOptions(TypedDict, total=False):
    """The keyword options of ``McpGateway`` (see its ``__init__``), as ``running`` and the actor take them."""

    provisioner_for: Callable[[str], Provisioner]
    start_timeout_s: float
    stop_timeout_s: float
    max_output_chars: int
    max_structured_bytes: int
    max_image_bytes: int
    max_images: int
    cancel_grace_s: float
    control_tokens: Sequence[str]
    keep_images: bool
    max_episode_images: int | None


_DEFAULT_CAPS = ResultCaps()
PARKED_CHECK_S = 10.0
"""How often a parked session is pinged (its environment may have been destroyed meanwhile)."""
PING_TIMEOUT_S = 5.0
"""How long a parked session has to answer a ping before it counts as gone."""


class McpGateway:
    """Per-environment MCP sessions. Create inside ``async with McpGateway.running() as gw``."""

    def __init__(
        self,
        *,
        provisioner_for: Callable[[str], Provisioner] = make_provisioner,
        start_timeout_s: float = 60.0,
        stop_timeout_s: float = 15.0,
        max_output_chars: int = _DEFAULT_CAPS.max_text_chars,
        max_structured_bytes: int = _DEFAULT_CAPS.max_structured_bytes,
        max_image_bytes: int = _DEFAULT_CAPS.max_image_bytes,
        max_images: int = _DEFAULT_CAPS.max_images,
        cancel_grace_s: float = 1.0,
        control_tokens: Sequence[str] = (),
        keep_images: bool = False,
        max_episode_images: int | None = None,
    ) -> None:
        """``control_tokens``: the model's special tokens, escaped in every observation on top of
        ``DEFAULT_CONTROL_TOKENS``; ``keep_images``: pass images through for a multimodal model;
        the ``max_*`` caps bound each part of a result and the images of an episode
        (``actors.mcp_results.ResultCaps``)."""
        self._provisioner_for = provisioner_for
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.cancel_grace_s = cancel_grace_s
        self.caps = ResultCaps(
            max_text_chars=max_output_chars,
            max_structured_bytes=max_structured_bytes,
            max_image_bytes=max_image_bytes,
            max_images=max_images,
            keep_images=keep_images,
            max_episode_images=max_episode_images,
        )
        self.controls = tuple(dict.fromkeys([*DEFAULT_CONTROL_TOKENS, *control_tokens]))
        self._envs: dict[str, EnvState] = {}
        self._parked: dict[str, dict[str, ServerState]] = {}  # env_id -> its kept servers by name
        self._counts = {"servers_started": 0, "servers_kept": 0}
        self._closed_broken: set[str] = set()
        self._tg: anyio.abc.TaskGroup | None = None

    @classmethod
    @asynccontextmanager
    async def running(cls, **options: Unpack[GatewayOptions]) -> AsyncIterator[McpGateway]:
        """A gateway whose session tasks live in this context; leaving it closes every session."""
        gateway = cls(**options)
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
        check_servers(env, servers)
        state = EnvState(env, self._provisioner_for(env.backend))
        state.secrets = tuple(sorted({v for s in servers for v in s.secrets}, key=lambda v: (-len(v), v)))
        state.budget_left_s = budget_s
        self._envs[env.env_id] = state
        parked = self._parked.pop(env.env_id, {})
        try:
            for server in servers:
                launch = await self._launch(state, server)
                kept = parked.pop(launch.name, None)
                if kept is not None and await self._take_over(kept, launch):
                    state.servers[kept.name] = kept
                    continue
                if kept is not None:
                    parked[kept.name] = kept  # stopped below, with the ones this episode lacks
                self._start(state, launch)
            await self._stop(parked.values())
            parked.clear()
            # A backstop only: each session task bounds its own start with start_timeout_s.
            with anyio.fail_after(self.start_timeout_s + self.stop_timeout_s):
                for srv in state.servers.values():
                    await srv.ready.wait()
            failed = [srv.describe_failure() for srv in state.servers.values() if srv.status != "up"]
            if failed:
                raise InfraError("\n".join(failed))
            pin_tools(state, allowed_tools or {})
        except BaseException:
            state.broken = state.broken or "failed to open"
            with anyio.CancelScope(shield=True):
                await self._stop(parked.values())
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
        if name == ROUTE_TOOL.name and state.router is not None:  # the gateway's own, read-only tool
            answer = route_answer(state.router, arguments)
            parts, hits = route_parts(answer, self.caps.max_text_chars, state.secrets, self.controls)
            return self._result(state, ROUTE_TOOL, name, started, parts, None, hits)
        spec = state.tools.get(name)
        if spec is None:
            known = ", ".join(state.tools) or "(none)"
            unknown = Parts(text=f"Unknown tool {name!r}. Available tools: {known}.")
            return self._result(state, None, name, started, unknown, "unknown_tool")
        caps = self.caps
        if caps.max_episode_images is not None:
            caps = msgspec.structs.replace(caps, images_left=caps.max_episode_images - state.images_kept)
        parts, kind = await run_call(
            state, spec, arguments, timeout_s, caps, self.cancel_grace_s, self._start
        )
        state.images_kept += len(parts.images)
        return self._result(state, spec, name, started, parts, kind)

    def _result(
        self,
        state: EnvState,
        spec: ToolSpec | None,
        name: str,
        started: float,
        parts: Parts,
        kind: str | None,
        route_hits: tuple[str, ...] | None = None,
    ) -> ToolResult:
        """The bounded ``ToolResult`` with its facts; charges the call's time to the episode budget."""
        if route_hits is None:  # a route answer is bounded already, whole lines only
            text, cuts = bound_text(parts.text, self.caps.max_text_chars, state.secrets, self.controls)
            parts = msgspec.structs.replace(parts, text=text, cuts=(*cuts, *parts.cuts))
        latency = time.perf_counter() - started
        if state.budget_left_s is not None and kind != "budget_exhausted":
            state.budget_left_s -= latency
        logger.debug(
            "env %s call %s ok=%s kind=%s read_only=%s %.1f ms %d bytes",
            *(state.info.env_id, name, kind is None, kind, spec.read_only if spec else None),
            *(latency * 1e3, parts.output_bytes),
        )
        return tool_result(parts, spec, kind, latency, route_hits)

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

        async def run(*, task_status: anyio.abc.TaskStatus[str]) -> None:
            with scope:
                await serve_endpoint(
                    self, env_id, port or free_port(), call_timeout_s, task_status=task_status
                )

        url: str = await self._tg.start(run, name=f"mcp-endpoint:{env_id}")
        return url

    async def server_tools(self, env_id: str) -> dict[str, list[WireTool]]:
        """Each server's full tool listing in MCP wire form (annotations included), before filtering."""
        return {name: list(srv.tools) for name, srv in self._env(env_id).servers.items()}

    async def is_broken(self, env_id: str) -> bool:
        """Whether the environment must not be reused (a server died, timed out or never started)."""
        state = self._envs.get(env_id)
        return state.broken is not None if state else env_id in self._closed_broken

    async def close(self, env_id: str, keep_servers: bool = False) -> None:
        """Close the environment's sessions and wait (bounded) until their processes are gone;
        ``keep_servers``: park its ``keep_alive`` servers' sessions instead, for the environment's
        next episode (not when it is broken)."""
        state = self._envs.pop(env_id, None)
        if state is None:
            return
        if state.broken:
            self._closed_broken.add(env_id)
        if state.endpoint is not None:
            state.endpoint.cancel()
        kept = {
            name: srv
            for name, srv in state.servers.items()
            if keep_servers
            and state.provisioner.keeps_servers
            and not state.broken
            and srv.launch.keep_alive
            and srv.launch.transport == "stdio"
            and srv.status == "up"
        }
        await self._stop(srv for name, srv in state.servers.items() if name not in kept)
        if kept and self._tg is not None:
            for srv in kept.values():
                srv.parked = True
            self._parked[env_id] = kept
            self._tg.start_soon(self._watch_parked, env_id, kept, name=f"mcp-parked:{env_id}")
        else:
            await self._stop(kept.values())

    async def close_all(self) -> None:
        """Close every open environment, and end every parked session."""
        for env_id in list(self._envs):
            await self.close(env_id)
        while self._parked:
            await self._stop(self._parked.popitem()[1].values())

    def stats(self) -> dict[str, int]:
        """Counts for metrics: ``servers_started`` (each process start, restarts included),
        ``servers_kept`` (sessions taken over from a parked one) and ``parked`` (envs parked now)."""
        return {**self._counts, "parked": len(self._parked)}

    async def _launch(self, state: EnvState, server: ServerLaunch) -> ServerLaunch:
        """How this process starts or reaches ``server`` of the environment: a remote URL as it is;
        a process (stdio or a listener, on its address) as the provisioner runs it there."""
        if server.transport == "http" and not server.listens:
            return server
        if server.listens:
            try:
                server = server.listening_at(await state.provisioner.listen_address(state.info, server))
            except EnvError as e:
                raise GatewayError(str(e)) from e
        return msgspec.structs.replace(
            state.provisioner.stdio_launch(state.info, server),
            transport=server.transport,
            url=server.url,
            secrets=server.secrets,
            keep_alive=server.keep_alive,
        )

    async def _take_over(self, srv: ServerState, launch: ServerLaunch) -> bool:
        """Whether the parked session ``srv`` serves ``launch`` still (same launch, alive); if so
        it is the episode's now."""
        if srv.launch != launch or srv.status != "up" or not await answers_ping(srv, PING_TIMEOUT_S):
            return False
        srv.parked = False
        self._counts["servers_kept"] += 1
        return True

    async def _watch_parked(self, env_id: str, servers: dict[str, ServerState]) -> None:
        """Ping ``env_id``'s parked sessions until an ``open`` takes them, ending the ones whose
        process is gone."""
        while self._parked.get(env_id) is servers:
            await anyio.sleep(PARKED_CHECK_S)
            if self._parked.get(env_id) is not servers:
                return
            gone = [srv for srv in list(servers.values()) if not await answers_ping(srv, PING_TIMEOUT_S)]
            if self._parked.get(env_id) is not servers:
                return  # taken by an open meanwhile, which checks them itself
            for srv in gone:
                del servers[srv.name]
            if not servers:
                del self._parked[env_id]
            await self._stop(gone)

    async def _stop(self, servers: Iterable[ServerState]) -> None:
        """Stop these sessions and wait (bounded) until their processes are gone."""
        doomed = list(servers)
        for srv in doomed:
            srv.stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.stop_timeout_s) as scope:
            for srv in doomed:
                await srv.done.wait()
        if scope.cancelled_caught:
            still = sorted({f"{srv.name} of env {srv.env_id}" for srv in doomed if not srv.done.is_set()})
            logger.warning("MCP servers %s still stopping after %ss", still, self.stop_timeout_s)
        for srv in doomed:
            srv.stderr.close()

    def _env(self, env_id: str) -> EnvState:
        state = self._envs.get(env_id)
        if state is None:
            raise GatewayError(
                f"env {env_id} is not open in the gateway (open it first; open: {list(self._envs)})"
            )
        return state

    def _start(self, state: EnvState, launch: ServerLaunch) -> ServerState:
        srv = ServerState(state.info.env_id, launch)
        state.servers[srv.name] = srv
        self._counts["servers_started"] += 1
        assert self._tg is not None
        self._tg.start_soon(
            serve_session, srv, self.start_timeout_s, name=f"mcp:{state.info.env_id}:{srv.name}"
        )
        return srv
