"""The McpGateway as a Ray async actor: ``remote_mcp_gateway(**gateway_kwargs)``.

The plain class (``actors/mcp_gateway.py``) holds the sessions; this thin wrapper keeps its task
group alive for the actor's lifetime and forwards each method.
"""

from __future__ import annotations

import asyncio
from typing import Any, Unpack

import anyio

from actors.errors import GatewayError
from actors.mcp_gateway import GatewayOptions, McpGateway
from actors.mcp_sessions import WireTool
from policies.types import ToolResult, ToolSpec
from specs.env import EnvInfo, ServerLaunch


class McpGatewayActor:
    """Ray async actor body: the gateway's task group lives in a task on the actor's event loop.

    Ray runs every method of an async actor on one asyncio loop, so a background asyncio task
    started on first use can own ``McpGateway.running()`` for the actor's lifetime (an anyio task
    group cannot outlive the method call that opened it). Build it with ``remote_mcp_gateway``.
    """

    def __init__(self, **gateway_kwargs: Unpack[GatewayOptions]) -> None:
        self._kwargs = gateway_kwargs
        self._gateway: McpGateway | None = None
        self._started: anyio.Event | None = None
        self._stop: anyio.Event | None = None
        self._host: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    async def _get(self) -> McpGateway:
        if self._host is None:  # no await before the task exists: concurrent first calls share it
            # Ray actors run on asyncio; only the host task is asyncio-specific
            self._started, self._stop = anyio.Event(), anyio.Event()
            self._host = asyncio.get_running_loop().create_task(self._run_host(self._started, self._stop))
        assert self._started is not None
        with anyio.fail_after(30):
            await self._started.wait()
        if self._gateway is None:
            raise GatewayError(f"the gateway's host task has ended: {self._failure!r}") from self._failure
        return self._gateway

    async def _run_host(self, started: anyio.Event, stop: anyio.Event) -> None:
        try:
            async with McpGateway.running(**self._kwargs) as gateway:
                self._gateway = gateway
                started.set()
                await stop.wait()
        except BaseException as e:  # every caller, waiting or later, sees why instead of timing out
            self._failure = e
            raise
        finally:
            self._gateway = None
            started.set()

    async def open(
        self,
        env: EnvInfo,
        servers: list[ServerLaunch],
        allowed_tools: dict[str, tuple[str, ...] | None] | None = None,
        *,
        budget_s: float | None = None,
        route: bool = False,
        top_k: int | None = None,
        query: str = "",
    ) -> list[ToolSpec]:
        gateway = await self._get()
        return await gateway.open(
            env, servers, allowed_tools, budget_s=budget_s, route=route, top_k=top_k, query=query
        )

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        return await (await self._get()).call(env_id, name, arguments, timeout_s)

    async def server_tools(self, env_id: str) -> dict[str, list[WireTool]]:
        return await (await self._get()).server_tools(env_id)

    async def serve(self, env_id: str, port: int | None = None, call_timeout_s: float = 60.0) -> str:
        return await (await self._get()).serve(env_id, port, call_timeout_s)

    async def is_broken(self, env_id: str) -> bool:
        return await (await self._get()).is_broken(env_id)

    async def close(self, env_id: str, keep_servers: bool = False) -> None:
        await (await self._get()).close(env_id, keep_servers)

    async def stats(self) -> dict[str, int]:
        return (await self._get()).stats()

    async def shutdown(self) -> None:
        gateway = self._gateway
        if gateway is not None and self._stop is not None and self._host is not None:
            await gateway.close_all()
            self._stop.set()
            with anyio.fail_after(gateway.stop_timeout_s + 5):
                await self._host


def remote_mcp_gateway(
    ray_options: dict[str, Any] | None = None, **gateway_kwargs: Unpack[GatewayOptions]
) -> Any:
    """A Ray actor handle running ``McpGateway`` (Ray imported only here; Ray's handles are untyped)."""
    from actors.remote import remote_class

    return remote_class(McpGatewayActor, **(ray_options or {})).remote(**gateway_kwargs)
