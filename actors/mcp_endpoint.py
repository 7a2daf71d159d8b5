"""One MCP endpoint per environment: an environment's tools, aggregated, as a single MCP server.

``McpGateway.serve(env_id)`` runs this: a streamable-HTTP MCP server on ``127.0.0.1`` whose
``tools/list`` is the environment's pinned tools (namespaced ``<server>__<tool>``, annotations
kept) and whose ``tools/call`` goes through ``McpGateway.call`` — so an external agent, an
evaluator or a person with any MCP client drives the very same environment, with the same
deadlines, redaction and escaping as the agent in training. DNS-rebinding protection is on: only
``Host: 127.0.0.1:<port>`` / ``localhost:<port>`` (and matching origins) are served.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings

if TYPE_CHECKING:
    import anyio.abc
    from mcp.server.context import ServerRequestContext
    from starlette.applications import Starlette

    from actors.mcp_gateway import McpGateway

STARTUP_TIMEOUT_S = 30.0


def endpoint_app(gateway: McpGateway, env_id: str, port: int, call_timeout_s: float) -> Starlette:
    """The Starlette app of the environment's endpoint (its lifespan runs the MCP session manager)."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(
                name=spec.name,
                description=spec.description,
                input_schema=spec.parameters or {"type": "object"},
                annotations=types.ToolAnnotations(**_snake(spec.annotations)) if spec.annotations else None,
            )
            for spec in gateway.tools(env_id)
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result = await gateway.call(env_id, params.name, dict(params.arguments or {}), call_timeout_s)
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=result.text)]
        content += [
            types.ImageContent(type="image", data=i["data"], mime_type=i["mimeType"]) for i in result.images
        ]
        return types.CallToolResult(
            content=content, is_error=result.is_error, structured_content=result.structured
        )

    server: Server[Any] = Server(f"mcprl-env-{env_id}", on_list_tools=list_tools, on_call_tool=call_tool)
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{host}" for host in hosts],
    )
    return server.streamable_http_app(host="127.0.0.1", transport_security=security)


async def serve_endpoint(
    gateway: McpGateway,
    env_id: str,
    port: int,
    call_timeout_s: float,
    *,
    task_status: anyio.abc.TaskStatus[str],
) -> None:
    """Serve until cancelled (``port`` 0: any free one); reports the URL through ``task_status``
    once it accepts connections. The socket is bound before the URL exists: no port race."""
    import socket

    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # Ctrl-C belongs to the run, not to us
            yield

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    app = endpoint_app(gateway, env_id, port, call_timeout_s)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server = _Server(config)

    async def run() -> None:
        with anyio.CancelScope(shield=True):  # stopped by should_exit, so that it shuts down cleanly
            await server.serve(sockets=[sock])

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                with anyio.fail_after(STARTUP_TIMEOUT_S):
                    while not server.started:  # noqa: ASYNC110 -- uvicorn offers no event to wait on
                        await anyio.sleep(0.02)
                task_status.started(f"http://127.0.0.1:{port}/mcp")
                await anyio.sleep_forever()
            finally:
                server.should_exit = True
    finally:
        sock.close()


def _snake(annotations: dict[str, Any]) -> dict[str, Any]:
    """Wire (camelCase) annotations as the SDK model's field names."""
    fields = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title"}
    out = {}
    for key, value in annotations.items():
        if key in fields:
            out["".join("_" + c.lower() if c.isupper() else c for c in key)] = value
    return out
