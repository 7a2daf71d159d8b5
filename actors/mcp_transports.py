"""The transports to one MCP server, as the SDK's (read, write) streams: ``connect(launch, ...)``.

``stdio`` runs the launch's command (already wrapped by the provisioner to run inside the
environment); ``http`` reaches a running streamable-HTTP server with the launch's headers; ``sse``
(MCP-Universe's legacy entry) starts the command on a free port (``{{PORT}}``) on this host and
reaches it over SSE. Used by ``McpGateway``, which owns the session on top.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, TextIO, cast
from urllib.parse import urlsplit

import anyio
import anyio.abc
from mcp import StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from actors.errors import GatewayError
from actors.provisioners.local import kill_group
from specs.env import ServerLaunch
from specs.servers import PORT_PLACEHOLDER, free_port

if TYPE_CHECKING:  # mcp 2.x names the pair; 1.x yields the same two memory streams
    from mcp.client._transport import TransportStreams


@asynccontextmanager
async def connect(
    launch: ServerLaunch, errlog: IO[bytes], start_timeout_s: float
) -> AsyncIterator[TransportStreams]:
    """The transport streams to one server: stdio (a process in the environment), streamable
    HTTP (a running server, with its headers) or SSE (a process started here, on its own free
    port, killed with its process group on the way out). ``errlog`` takes the server's stderr."""
    if launch.transport == "http":
        assert launch.url is not None
        async with (
            create_mcp_http_client(headers=dict(launch.headers)) as client,
            streamable_http_client(launch.url, http_client=client) as (read, write),
        ):
            yield read, write
        return
    params = StdioServerParameters(
        command=launch.command, args=list(launch.args), env=dict(launch.env), cwd=launch.cwd
    )
    if launch.transport == "stdio":
        async with stdio_client(params, errlog=cast(TextIO, errlog)) as (read, write):
            yield read, write
        return
    assert launch.url is not None  # sse: a listener started here (local backend only), on its own port
    port = str(free_port())
    url = launch.url.replace(PORT_PLACEHOLDER, port)
    process = await anyio.open_process(
        [launch.command, *(a.replace(PORT_PLACEHOLDER, port) for a in launch.args)],
        cwd=launch.cwd,
        env=get_default_environment() | dict(launch.env),
        stdin=subprocess.DEVNULL,
        stdout=errlog,
        stderr=errlog,
        start_new_session=True,
    )
    try:
        await _wait_listening(url, process, start_timeout_s)
        async with sse_client(url) as (read, write):
            yield read, write
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(kill_group, process.pid)
            await process.aclose()


async def _wait_listening(url: str, process: anyio.abc.Process, timeout_s: float) -> None:
    """Until something accepts connections at ``url``'s port (bounded); fails if ``process`` exits."""
    port = urlsplit(url).port
    with anyio.fail_after(timeout_s):
        while True:
            if process.returncode is not None:
                raise GatewayError(f"the SSE server for {url} exited with code {process.returncode}")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port or 80)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return
